"""%%tpu_prepare: cells run in the notebook and are recorded for pod runs; IPython-only lines are refused."""

from __future__ import annotations

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from tpu_nb.kernel.pod.recording import RECORDED, IPythonSyntax, PreparedCells, ipython_syntax
from tpu_nb.wire.run_directory import Cell


def recorded(shell: InteractiveShell) -> tuple[Cell, ...]:
    """What %%tpu_prepare recorded: the one record the magic and `tpu_nb.pod.launch` read."""
    return RECORDED.cells()


def test_a_prepare_cell_runs_here_and_is_recorded(ip: InteractiveShell) -> None:
    with capture_output() as captured:
        result = ip.run_cell("%%tpu_prepare\nvalue = 41 + 1\nprint('ran', value)")
    assert result.success and ip.user_ns["value"] == 42 and "ran 42" in captured.stdout
    [cell] = recorded(ip)
    assert cell.magic == "%%tpu_prepare" and cell.source == "value = 41 + 1\nprint('ran', value)\n"
    assert cell.name.startswith("In [")


def test_a_cell_run_again_replaces_its_recording_and_clear_forgets_all(ip: InteractiveShell) -> None:
    with capture_output():
        ip.run_cell("%%tpu_prepare\nfirst = 1")
        ip.run_cell("%%tpu_prepare\nsecond = 2")
        ip.run_cell("%%tpu_prepare\nfirst = 1")
    assert [cell.source for cell in recorded(ip)] == ["first = 1\n", "second = 2\n"]
    with capture_output() as captured:
        ip.run_cell("%tpu_prepare --show")
    assert "2 recorded cell(s)" in captured.stdout and "second = 2" in captured.stdout
    with capture_output():
        ip.run_cell("%tpu_prepare --clear")
    assert recorded(ip) == ()


def test_a_failing_or_ipython_only_cell_is_not_recorded(ip: InteractiveShell) -> None:
    with capture_output():
        failed = ip.run_cell("%%tpu_prepare\nraise ValueError('no data')")
        magic = ip.run_cell("%%tpu_prepare\nimport os\n!pip install something\nran = True")
    assert isinstance(failed.error_in_exec, UsageError) and "did not record the cell for pod runs" in str(failed.error_in_exec)
    assert isinstance(magic.error_in_exec, UsageError)
    assert "line 3 (`!pip install something`) is IPython syntax" in str(magic.error_in_exec)
    assert "ran" not in ip.user_ns  # refused before anything ran
    assert recorded(ip) == ()


def test_ipython_syntax_names_the_line_as_written() -> None:
    source = "x = 1\n%time y = 2\nz = 'get_ipython() in a string is fine'"
    transformed = "x = 1\nget_ipython().run_line_magic('time', 'y = 2')\nz = 'get_ipython() in a string is fine'"
    assert ipython_syntax(source, transformed) == IPythonSyntax(3, "%time y = 2")
    assert ipython_syntax("a = get_ipython()", "a = get_ipython()") is None


def test_frontend_cell_ids_tell_cells_apart() -> None:
    cells = PreparedCells()
    cells.record(Cell("In [1]", "%%tpu_prepare", "a = 1"), "cell-a")
    cells.record(Cell("In [2]", "%%tpu_prepare", "b = 2"), "cell-b")
    cells.record(Cell("In [3]", "%%tpu_prepare", "a = 10"), "cell-a")  # edited and run again
    assert [cell.source for cell in cells.cells()] == ["a = 10", "b = 2"]


def test_unloading_the_extension_forgets_its_recordings(ip: InteractiveShell) -> None:
    with capture_output():
        ip.run_cell("%%tpu_prepare\nx = 1")
    assert len(recorded(ip)) == 1
    ip.run_line_magic("unload_ext", "tpu_nb")
    ip.run_line_magic("load_ext", "tpu_nb")
    assert recorded(ip) == ()
