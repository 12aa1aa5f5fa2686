"""The run log: records numbered in order under a lock, curves thinned, final and best values, a bad line passed over."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

from tpu_nb.kernel.history.log import (
    CURVE_POINTS,
    LOG_FILE,
    CurveKeeper,
    RunRecord,
    append_record,
    changed_options,
    log_directory,
    read_log,
    records_named,
)
from tpu_nb.kernel.planning.options import LaunchOptions
from tpu_nb.wire.events import Progress, Stopping


def record(title: str = "%%tpu_train", **changes: object) -> RunRecord:
    fields: dict[str, object] = {
        "number": 0,
        "title": title,
        "started": 1_700_000_000.0,
        "seconds": 12.5,
        "status": "done",
        "text": None,
        "options": {"cores": 1},
        "trial": {"lr": 3e-5, "optimizer": object()},
        "sweep": "a sweep",
        "final": {"loss": 0.5},
        "best": {"loss": 0.4},
        "curves": {"loss": ((0, 1.0), (1, 0.5))},
        "checkpoints": None,
    }
    return RunRecord(**{**fields, **changes})  # type: ignore[arg-type]


def test_records_are_numbered_in_order_and_read_back_as_written(tmp_path: Path) -> None:
    first = append_record(tmp_path, record("first"))
    second = append_record(tmp_path, record("second", trial=None))
    assert (first.number, second.number) == (1, 2)
    read = read_log(tmp_path)
    assert [entry.title for entry in read] == ["first", "second"]
    assert read[1] == second
    assert read[0].trial is not None and read[0].trial["optimizer"].startswith("<object object")  # kept as its repr
    assert read[0].curves["loss"] == ((0, 1.0), (1, 0.5))


def _append_many(directory: str, count: int) -> None:
    for _ in range(count):
        append_record(Path(directory), record())


def test_two_kernels_appending_at_once_never_write_one_number_twice(tmp_path: Path) -> None:
    writers = [multiprocessing.get_context("fork").Process(target=_append_many, args=(str(tmp_path), 25)) for _ in range(2)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(60)
    assert sorted(entry.number for entry in read_log(tmp_path)) == list(range(1, 51))


def test_a_line_that_cannot_be_read_is_passed_over(tmp_path: Path) -> None:
    append_record(tmp_path, record())
    with open(tmp_path / LOG_FILE, "a") as log:
        log.write('{"number": 2, "title": "cut off\n')
    append_record(tmp_path, record("after"))
    assert [(entry.number, entry.title) for entry in read_log(tmp_path)] == [(1, "%%tpu_train"), (2, "after")]
    assert read_log(tmp_path / "nothing here") == []


def test_curves_keep_rank_0s_reports_thinned_with_the_last_point_and_the_best_by_the_metrics_direction() -> None:
    keeper = CurveKeeper()
    steps = 1001
    for step in range(steps):
        keeper.on_event(Progress(0, step, {"loss": 10.0 - step / 200, "eval_accuracy": 0.5 + (step % 7) / 100}))
    keeper.on_event(Progress(0, None, {"loss": float("nan")}))  # nothing to keep
    keeper.on_event(Stopping(0, 3))
    curves = keeper.curves()
    assert len(curves["loss"]) <= CURVE_POINTS + 1 and curves["loss"][-1] == (1000, 5.0) and curves["loss"][0] == (0, 10.0)
    assert keeper.final["loss"] == 5.0 and keeper.best["loss"] == 5.0  # lower is better for a loss
    assert keeper.best["eval_accuracy"] == pytest.approx(0.56)  # higher for an accuracy


def test_the_log_is_where_the_option_says_else_the_environment_else_beside_the_notebook(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TPU_NB_RUN_LOG", raising=False)
    assert log_directory(None) == Path("tpu_nb_runs")
    monkeypatch.setenv("TPU_NB_RUN_LOG", "/shared/runs")
    assert log_directory(None) == Path("/shared/runs")
    assert log_directory("mine") == Path("mine")
    assert log_directory("off") is None and log_directory(" OFF ") is None


def test_a_record_lists_only_the_options_that_differ_from_the_defaults() -> None:
    options = LaunchOptions(cores=2, stop_grace=30.0)
    assert changed_options(options, LaunchOptions()) == {"cores": 2, "stop_grace": 30.0}
    assert json.dumps(changed_options(LaunchOptions.from_user(checkpoint="/tmp/never-made", every="5steps"), LaunchOptions()))


def test_runs_are_named_by_their_numbers_in_the_order_given(tmp_path: Path) -> None:
    for title in ("a", "b", "c"):
        append_record(tmp_path, record(title))
    records = read_log(tmp_path)
    assert [entry.title for entry in records_named(records, [3, 1])] == ["c", "a"]
    with pytest.raises(KeyError) as missing:
        records_named(records, [2, 7, 9])
    assert missing.value.args[0] == [7, 9]
