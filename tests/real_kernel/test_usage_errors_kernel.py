"""Errors the user can fix, as a real kernel renders them: the message alone, no tpu_nb frames."""

from __future__ import annotations

from support.kernel import Kernel, errors_of, shown


def test_a_bad_option_is_one_usage_error_line(kernel: Kernel) -> None:
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    cell = kernel.run("%%tpu_train --cores two\n1")
    assert shown(cell) == "UsageError: argument --cores: invalid int value: 'two'\n"


def test_a_refused_launch_shows_only_its_message(kernel: Kernel) -> None:
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    cell = kernel.run("%%tpu_train --cores 0 --timeout -1\n1")
    [error] = errors_of(cell)
    assert error.ename == "LaunchRefused"
    assert shown(cell).splitlines() == [
        "LaunchRefused: tpu_nb did not start the run:",
        "- cores=0: give a positive number of XLA devices, or leave it out to use all.",
        "- timeout=-1.0: give a positive number of seconds, or leave it out for no limit.",
    ]
    assert ".py" not in "\n".join(error.traceback) and "Traceback" not in "\n".join(error.traceback)


def test_a_launch_refused_from_python_shows_only_its_message(kernel: Kernel) -> None:
    kernel.run("import tpu_nb", allow_errors=False)
    cell = kernel.run("tpu_nb.launch(print, timeout=0)")
    assert [error.ename for error in errors_of(cell)] == ["LaunchRefused"]
    assert shown(cell) == (
        "LaunchRefused: tpu_nb did not start the run:\n- timeout=0: give a positive number of seconds, or leave it out for no limit.\n"
    )
