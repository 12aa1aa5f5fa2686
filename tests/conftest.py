"""Shared test setup: every XLA use in tests goes to XLA:CPU in forked workers."""

from __future__ import annotations

import importlib
import os
import signal

os.environ.setdefault("PJRT_DEVICE", "CPU")
# Nothing can come from the Hub here. huggingface_hub reads this once, when it is first imported, which any test
# module may do (peft, trl, transformers): set here, before every test module, it holds whatever order they load in;
# without it every Hub lookup retries for ~23 s.
os.environ["HF_HUB_OFFLINE"] = "1"

from collections.abc import Iterator

import pytest
from IPython.core.interactiveshell import InteractiveShell
from support.platforms import fake_torch_xla, make_system  # noqa: F401 - fixtures for every test


def pytest_configure(config: pytest.Config) -> None:
    """pytest's process stands for a notebook's kernel after its first run, where tests run.

    tpu_nb.kernel.run.warm_imports leaves there torch's compiler stack, which
    torch_xla imports at its top (never torch_xla itself). Each fork of a test
    then imports torch_xla in about 0.3 CPU-seconds instead of 4 (measured).
    The cold first run is what every test in tests/real_kernel and
    tests/notebooks starts: each runs in a new kernel. pytest-xdist's
    controller runs no test, so it imports none of it (4 CPU-seconds).
    """
    if getattr(config.option, "dist", "no") != "no" and not hasattr(config, "workerinput"):
        return
    for compiler_module in ("torch._dynamo", "torch._inductor.lowering", "torch._inductor.fx_passes.post_grad", "functorch.compile"):
        importlib.import_module(compiler_module)


# tests/torch_tpu_env runs only inside the TorchTPU environment (torch 2.14.1 + torch_tpu, no torch_xla):
# `make test-torch-tpu` builds .venv-torch-tpu and runs pytest there on that directory alone, with
# TPU_NB_TORCH_TPU_ENV=1. Everywhere else (`make test`, Colab's and Kaggle's images) pytest does not
# collect it at all, so nothing there is reported as skipped: `collect_ignore` (paths relative to this
# file) keeps the directory out when pytest walks tests/. Named on the command line, a path is collected
# anyway; tests/torch_tpu_env/conftest.py then stops the run with a usage error naming the make target.
collect_ignore = [] if os.environ.get("TPU_NB_TORCH_TPU_ENV") == "1" else ["torch_tpu_env"]


# What takes longest (measured: docs/concepts/testing.md, "How long the tests take"): the tutorials (40-200 s
# each), the real kernels (10-100 s; the README's quick start, 80 s), JupyterLab and the pod runs start kernels or processes and train; the
# decoder families (30 s each) compile eight models.
LONGEST = (
    "/tests/notebooks/",
    "/tests/browser/",
    "/tests/real_kernel/",
    "/tests/test_readme.py",
    "/tests/kernel/pod/test_pod_run.py",
    "/tests/workers/trainer/test_families.py",
)
SHARED_KERNEL = "/tests/real_kernel/"
"""Its modules' tests share one kernel (tests/real_kernel/conftest.py), so each module stays on one worker, in order."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each xdist worker's share starts with its part of the longest tests.

    pytest-xdist's work stealing (Makefile) hands the collection out in as many
    contiguous parts as there are workers, and a worker that runs out takes half
    of what is left at the end of another's. So the long tests are dealt to the
    parts first, in turn (a module of tests/real_kernel as one), and the short
    ones fill the parts up to the same length: they
    end each part, where stealing takes them to fill the gaps. Every worker
    computes the same order from the same collection, as xdist requires.
    """
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    units: list[list[pytest.Item]] = []
    for rank, place in enumerate(LONGEST):
        for item in items:
            path = item.path.as_posix()
            if place not in path or any(earlier in path for earlier in LONGEST[:rank]):
                continue
            if place == SHARED_KERNEL and units and units[-1][0].path == item.path:
                units[-1].append(item)
            else:
                units.append([item])
    taken = {id(item) for unit in units for item in unit}
    short = [item for item in items if id(item) not in taken]
    parts: list[list[pytest.Item]] = [[] for _ in range(workers)]
    for index, unit in enumerate(units):
        parts[index % workers].extend(unit)
    for item in short:
        min(parts, key=len).append(item)
    items[:] = [item for part in parts for item in part]


@pytest.fixture(scope="session", autouse=True)
def run_log_of_the_tests(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every run's record goes to a run log (tpu_nb/kernel/history/log.py), by default in the kernel's working directory: the tests'
    runs, and the kernels and tutorials they start, log into a directory of each pytest process's own, never the checkout."""
    previous = os.environ.get("TPU_NB_RUN_LOG")
    os.environ["TPU_NB_RUN_LOG"] = str(tmp_path_factory.mktemp("run_log"))
    yield
    if previous is None:
        os.environ.pop("TPU_NB_RUN_LOG", None)
    else:
        os.environ["TPU_NB_RUN_LOG"] = previous


@pytest.fixture(scope="session", autouse=True)
def sigint_raises_keyboard_interrupt() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt in pytest's process, as in a notebook's kernel, however pytest was started.

    Tests interrupt themselves the way Jupyter does. A process started in the
    background by a non-interactive shell ignores SIGINT, and Python then
    installs no handler: those tests would wait forever for an interrupt that
    never arrives.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture
def ip() -> Iterator[InteractiveShell]:
    """A real IPython shell with tpu_nb loaded."""
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "tpu_nb")
    yield shell
    shell.run_line_magic("unload_ext", "tpu_nb")
