"""What users do in a real Jupyter kernel: %tpu_info, a normal run, a failing worker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.kernel import Kernel, errors_of, plain, shown, started_kernel, text_of
from support.processes import descendants
from support.tracebacks import arrow_line, cell_frame_header

TESTS = str(Path(__file__).parent.parent)
FORK_SENT = "attempted to send message from fork"  # what ipykernel logs for each message a forked process sends


@pytest.fixture(scope="module")
def module_kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    """The module's kernel, its own log (stderr) kept: what a worker sent on its sockets shows there."""
    with started_kernel(log=tmp_path_factory.mktemp("kernel") / "kernel.log") as kernel:
        yield kernel


def test_tpu_info_then_training_in_the_same_kernel(kernel: Kernel) -> None:
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    info = kernel.run("%tpu_info", allow_errors=False)
    [output] = info.outputs
    assert "text/html" in output.data
    assert "CPU" in output.data["text/plain"] and "1 worker" in output.data["text/plain"]

    kernel.run("import torch\nweights = torch.nn.Linear(3, 1)\nstart = weights.weight.detach().clone()", allow_errors=False)
    cell = kernel.run(
        "%%tpu_train --return weights\n"
        "import torch_xla.core.xla_model as xm\n"
        "weights.to(device)\n"
        "opt = torch.optim.SGD(weights.parameters(), lr=0.5)\n"
        "for step in range(3):\n"
        "    loss = weights(torch.ones(4, 3, device=device)).pow(2).mean()\n"
        "    loss.backward(); xm.optimizer_step(opt); opt.zero_grad(); xm.mark_step()\n"
        "    print('step', step)\n"
        "f'rank {rank} of {world_size} on {device}'\n",
        allow_errors=False,
    )
    text = text_of(cell)
    assert "step 2" in text
    assert "'rank 0 of 1 on xla:0'" in text
    changed = kernel.run("print(bool((weights.weight != start).any()), weights.weight.device)", allow_errors=False)
    assert text_of(changed).strip() == "True cpu"
    assert not descendants(kernel.pid)


def test_a_failing_worker_fails_the_cell_with_its_traceback(kernel: Kernel) -> None:
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    helper = kernel.run("def lookup(values):\n    return values['missing']\n", allow_errors=False)
    cell = kernel.run("%%tpu_train\nprint('before')\nvalues = {}\nlookup(values)\n")
    [error] = errors_of(cell)
    assert error.ename == "WorkerError"
    assert "rank 0 of 1 raised KeyError: 'missing'" in error.evalue
    traceback = plain("\n".join(error.traceback))
    # The cell as written (magic line included), then the function from the earlier cell.
    assert cell_frame_header(cell.execution_count, 4).search(traceback), traceback
    assert arrow_line(4, "lookup(values)").search(traceback), traceback
    assert cell_frame_header(helper.execution_count, 2, "lookup").search(traceback), traceback
    assert arrow_line(2, "    return values['missing']").search(traceback), traceback
    assert traceback.index("lookup(values)") < traceback.index("return values['missing']")
    assert "KeyError: 'missing'" in traceback
    assert "(raised in the worker for rank 0 of 1; every worker was stopped)" in traceback
    assert "before" in text_of(cell)
    assert not descendants(kernel.pid)
    again = kernel.run("%%tpu_train\n21 * 2", allow_errors=False)
    assert "42" in text_of(again)


def test_python_3_12s_fork_warning_is_not_shown(kernel: Kernel) -> None:
    # Every kernel is multi-threaded: on Python 3.12+ each fork warns. Simulated
    # here (Python 3.11), for a user who turned every warning on; os.fork and the
    # filters are put back at the end, for the module's next test in this kernel.
    kernel.run(
        f"import os, sys, warnings\nsys.path.insert(0, {TESTS!r})\n"
        "from support.forks import fork_that_warns\n"
        "as_they_were = os.fork, warnings.filters[:]\n"
        "warnings.simplefilter('always')\n"
        "os.fork = fork_that_warns(os.fork)\n"
        "%load_ext tpu_nb",
        allow_errors=False,
    )
    try:
        first = kernel.run("%%tpu_train --no-progress\nprint('trained', rank)", allow_errors=False)
        second = kernel.run("%%tpu_train --no-progress\nprint('trained', rank)", allow_errors=False)
        for cell in (first, second):
            # Only the cell's own line; on Python 3.12+, a kernel whose user turned every warning on also shows
            # jupyter_client 7's own warnings (datetime.utcnow, on Colab's image): not tpu_nb's.
            assert shown(cell).count("trained 0\n") == 1 and "use of fork()" not in shown(cell), shown(cell)
            assert all(
                "jupyter_client" in line or line.strip().startswith("return datetime")
                for line in shown(cell).replace("trained 0\n", "").splitlines()
            ), shown(cell)
        kernel.run("warnings.warn('the user still sees their own warnings')", allow_errors=False)
        assert "the user still sees their own warnings" in shown(kernel.notebook.cells[-1])
    finally:
        kernel.run("os.fork, warnings.filters[:] = as_they_were", allow_errors=False)


def test_a_datasets_progress_bar_in_a_worker_shows_as_text_under_the_cell(kernel: Kernel) -> None:
    assert kernel.log is not None
    logged_before = kernel.log.stat().st_size
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    notebook = kernel.run(
        "from datasets import Dataset\n"
        "from datasets.utils.tqdm import tqdm as datasets_bar\n"
        "from tqdm.notebook import tqdm as notebook_bar\n"
        "rows = Dataset.from_dict({'n': list(range(8))})\n"
        "issubclass(datasets_bar, notebook_bar)",  # in a kernel, datasets' bars are widgets
        allow_errors=False,
    )
    assert "True" in text_of(notebook)
    cell = kernel.run(
        "%%tpu_train --no-progress\n"
        "doubled = rows.map(lambda row: {'twice': 2 * row['n']}, desc='Doubling')\n"
        "print('sum', sum(doubled['twice']))",
        allow_errors=False,
    )
    seen = shown(cell)
    assert "Doubling: 100%|██████████| 8/8" in seen and "sum 56" in seen, seen
    assert "Doubling:   0%" not in seen  # redrawn in place, as in a terminal
    assert FORK_SENT not in kernel.log.read_bytes()[logged_before:].decode(errors="replace")
