"""A worker's exception formatted from the user's first frame on."""

from __future__ import annotations

import pytest

from tpu_nb.workers.cell_output import tracebacks


def raise_in_user_code() -> None:
    values: dict[str, int] = {}
    values["missing"]


def test_without_a_shell_it_is_a_plain_python_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracebacks, "_ipython_shell", lambda: None)  # a worker forked from plain Python
    try:
        raise_in_user_code()
    except KeyError as error:
        lines = tracebacks.format_user_traceback(error)
    assert lines[0] == "Traceback (most recent call last):"
    assert any('values["missing"]' in line for line in lines)
    assert lines[-1] == "KeyError: 'missing'"


def test_tpu_nbs_own_frames_are_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracebacks, "_ipython_shell", lambda: None)
    # The worker catches the user's exception in tpu_nb's own code: compiled here under its file name.
    caught: list[BaseException] = []
    catcher = "try:\n    user_code()\nexcept KeyError as error:\n    caught.append(error)\n"
    exec(
        compile(catcher, tracebacks._PACKAGE_DIR + "/workers/processes/worker.py", "exec"),
        {"user_code": raise_in_user_code, "caught": caught},
    )
    text = "\n".join(tracebacks.format_user_traceback(caught[0]))
    assert "workers/worker.py" not in text
    assert "raise_in_user_code" in text and "KeyError: 'missing'" in text
