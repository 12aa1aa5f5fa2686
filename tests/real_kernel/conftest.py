"""A real Jupyter kernel (ipykernel, started by jupyter_client), shared by the tests of a module.

A kernel's first run costs about 10 CPU-seconds that later runs do not
(importing torch and transformers in the kernel, torch_xla in the run's
supervisor, the warm imports after it: measured), and `make test` is
CPU-bound on 2 cores. So the tests of a module run one after another in one
kernel, as a user's cells do, each starting where a user's next cell would:
tpu_nb loaded or not, no run or process left (the tests check that
themselves). A test that leaves the kernel dead or with processes under it
hands the next test a restarted kernel, so one failure does not become
several. A test marked `fresh_kernel` gets a kernel of its own: one that
checks a new kernel's state, ends its kernel, or changes what every later
run would see and cannot put it back (a process world installed). A test
that changes something it can put back (os.fork, the multiprocessing start
method) does so at its end instead.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from nbclient.util import run_sync
from support.kernel import Kernel, started_kernel
from support.processes import descendants


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "fresh_kernel: the test gets a kernel of its own, not its module's")


@pytest.fixture(scope="module")
def module_kernel() -> Iterator[Kernel]:
    with started_kernel() as kernel:
        yield kernel


@pytest.fixture
def kernel(request: pytest.FixtureRequest) -> Iterator[Kernel]:
    if request.node.get_closest_marker("fresh_kernel"):
        with started_kernel() as fresh:
            yield fresh
        return
    shared: Kernel = request.getfixturevalue("module_kernel")
    if not run_sync(shared.client.km.is_alive)() or descendants(shared.pid):  # what an earlier test left
        shared.restart()
    shared.client.widget_state.clear()  # each test sees the widgets of its own cells
    yield shared
