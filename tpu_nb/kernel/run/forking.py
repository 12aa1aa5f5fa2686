"""Forking the kernel, deliberately, and Python 3.12+'s warning about it.

Every Jupyter kernel is multi-threaded, and Python 3.12+ warns on each
`os.fork()` in a multi-threaded process ("This process (pid=...) is
multi-threaded, use of fork() may lead to deadlocks in the child."): a
thread that held a lock at the moment of the fork does not exist in the
child, so the child waits forever if it takes that lock.

The threads a kernel has when `%%tpu_train` forks (ipykernel 6.17 to 7,
IPython 7.34 to 9), and the locks they may hold:
- ipykernel's IOPub, heartbeat and control threads (zmq sockets, their event
  loops): the child never writes to the kernel's streams or sockets, it
  replaces sys.stdout and sys.stderr first (ipykernel drops messages from a
  fork anyway);
- IPython's history-saving thread (the SQLite history database): the child
  never touches history;
- native pools started by libraries the notebook used: OpenBLAS (numpy),
  OpenMP (torch), Rayon (tokenizers). OpenBLAS re-initialises its pool after
  a fork through its own at-fork handler; GNU OpenMP does not, and a fork of
  the thread that used it hangs at its first parallel op, so the supervisor
  forks the workers from a thread of its own (`tpu_nb.workers.processes.supervisor`);
  tokenizers turns its parallelism off in a forked child, and the workers
  get TOKENIZERS_PARALLELISM=false so it does that quietly;
- threads the user started: not known to tpu_nb, see below.

What the child (the supervisor) runs before it is a process of its own:
os.close, setpgid, prctl (looked up in the kernel before forking, so the
child never waits on the dynamic loader's lock), new Python objects (glibc
keeps malloc consistent across fork), os.environ updates, then imports
torch_xla, which no kernel thread is importing (tpu_nb never imports it in
the kernel). So the warning is expected here and not actionable: tpu_nb
shows nothing for its own fork, and the supervisor ignores the warning for
its fork of the workers. A user thread that holds a lock the child
needs could still hang the start; the run then stays "starting" and an
interrupt ends it like any other run.
"""

from __future__ import annotations

import os
import warnings

from tpu_nb.workers.processes.supervisor import FORK_WARNING


def fork() -> int:
    """`os.fork()` without Python 3.12+'s multi-threaded-fork warning; other warnings pass on."""
    # catch_warnings swaps the process's filters for the moment of the fork.
    # A warning another kernel thread raises meanwhile lands in `caught` and
    # is re-issued below, so it is not lost.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pid = os.fork()
    if pid:
        for warning in caught:
            if not is_fork_warning(warning.message):
                warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno, source=warning.source)
    return pid


def is_fork_warning(message: Warning | str) -> bool:
    return isinstance(message, DeprecationWarning) and FORK_WARNING.fullmatch(str(message)) is not None
