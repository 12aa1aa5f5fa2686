"""Forking a real kernel full of threads, as Python 3.12+ sees it, and under Python 3.14's forkserver default.

On Python 3.12+ every `os.fork()` in a process with more than one thread
warns (DeprecationWarning); a Jupyter kernel always has several (ipykernel's,
IPython's history, torch's and tokenizers' pools). tpu_nb forks on purpose
(see docs/concepts/how-it-works.md) and shows nothing for its own forks, while
a fork of the user's own still warns. `make test-compat` runs this on
Python 3.13 (Colab's); on 3.11 there is no warning to see at all.
"""

from __future__ import annotations

import sys

from support.kernel import Kernel, errors_of, text_of

THREADS = """
import os, threading, time, warnings
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1, "b": 2}, unk_token="[UNK]"))
tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
tokenizer.encode_batch(["a b"] * 1000)  # tokenizers' pool has run
torch.ones(512, 512) @ torch.ones(512, 512)  # and torch's
keep_busy = threading.Thread(target=lambda: time.sleep(600), daemon=True)
keep_busy.start()
print("threads:", len(os.listdir("/proc/self/task")))
"""

OWN_FORK = """
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    child = os.fork()
    if child == 0:
        os._exit(0)
    os.waitpid(child, 0)
print("user's fork warned:", any("use of fork() may lead to deadlocks" in str(warning.message) for warning in seen))
"""

FORK_WARNING = "use of fork() may lead to deadlocks"


def test_tpu_nb_forks_a_kernel_full_of_threads_without_a_warning_while_a_users_fork_still_warns(kernel: Kernel) -> None:
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    threads = kernel.run(THREADS, allow_errors=False)
    assert int(text_of(threads).split("threads:")[1].split()[0]) > 3
    trained = kernel.run("%%tpu_train --no-progress\nimport torch\n(torch.ones(2, device=device) * 5).sum().item()")
    assert "10.0" in text_of(trained) and not errors_of(trained), text_of(trained)
    assert FORK_WARNING not in text_of(trained)
    spmd = kernel.run("%%tpu_train --spmd --cores 2 --no-progress\nworld_size")
    assert "2" in text_of(spmd) and FORK_WARNING not in text_of(spmd), text_of(spmd)
    own = text_of(kernel.run(OWN_FORK, allow_errors=False))
    # Python 3.12+ warns for the user's own fork in this kernel, so tpu_nb's forks above were quiet on purpose;
    # before 3.12 there is no such warning at all (make test-compat runs this on 3.13).
    assert f"user's fork warned: {sys.version_info >= (3, 12)}" in own, own


def test_tpu_nb_asks_for_fork_under_the_forkserver_default_of_python_3_14(kernel: Kernel) -> None:
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    kernel.run(
        "import multiprocessing\nas_it_was = multiprocessing.get_start_method(allow_none=True)\n"
        "multiprocessing.set_start_method('forkserver', force=True)",
        allow_errors=False,
    )
    try:
        kernel.run("values = [1, 2, 3]  # defined in the notebook: only a fork carries it to the workers", allow_errors=False)
        trained = kernel.run("%%tpu_train --no-progress\nsum(values) + world_size")
        assert "7" in text_of(trained) and not errors_of(trained), text_of(trained)
        spmd = kernel.run("%%tpu_train --spmd --cores 2 --no-progress\nsum(values) + world_size")
        assert "8" in text_of(spmd) and not errors_of(spmd), text_of(spmd)
        background = kernel.run("%%tpu_train --background --name job --no-progress\nsum(values)")
        assert not errors_of(background), text_of(background)
        assert "6" in text_of(kernel.run("print(job.wait(120))", allow_errors=False))
    finally:  # for the module's next test in this kernel
        kernel.run("multiprocessing.set_start_method(as_it_was, force=True)", allow_errors=False)


PARALLEL_CPU_OP = """
import torch
torch.set_num_threads(2)  # GNU OpenMP's pool starts with a parallel op on two or more threads
features = torch.randn(1000, 1000)
torch.nn.functional.layer_norm(features, (1000,)).shape  # a parallel CPU op in the notebook's own thread
"""


def test_workers_run_parallel_cpu_ops_after_the_notebook_ran_one(kernel: Kernel) -> None:
    """The notebook's OpenMP pool is not the workers': a fork of its thread would wait for the pool forever."""
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    kernel.run(PARALLEL_CPU_OP, allow_errors=False)
    cell = "import torch\nround(torch.nn.functional.layer_norm(features, (1000,)).abs().mean().item(), 1) + world_size"
    trained = kernel.run(f"%%tpu_train --no-progress\n{cell}", timeout=90)
    assert "1.8" in text_of(trained) and not errors_of(trained), text_of(trained)
    spmd = kernel.run(f"%%tpu_train --spmd --cores 2 --no-progress\n{cell}", timeout=90)
    assert "2.8" in text_of(spmd) and not errors_of(spmd), text_of(spmd)
