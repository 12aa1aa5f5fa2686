"""The run log: records numbered in order under a lock, curves thinned, final and best values, a damaged log read around."""

from __future__ import annotations

import json
import multiprocessing
import sys
from pathlib import Path

import pytest
from support.mounts import run_with_small_mounts

from tpu_nb.kernel.history.log import (
    CURVE_POINTS,
    LOG_FILE,
    CurveKeeper,
    RunLog,
    append_record,
    changed_options,
    log_directory,
    read_log,
    records_named,
)
from tpu_nb.kernel.history.run_record import RunRecord
from tpu_nb.kernel.planning.options import LaunchOptions
from tpu_nb.wire.events import Progress, Stopping
from tpu_nb.wire.stop_reason import StopReason


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
    read = read_log(tmp_path).records
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
    assert sorted(entry.number for entry in read_log(tmp_path).records) == list(range(1, 51))


GOOD = b'{"number": 7, "title": "by hand", "started": 1700000000.0, "seconds": 1.0, "status": "done"}\n'


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(b'{"number": 8, "title": "\xff\xfe"', id="non-UTF-8 bytes"),
        pytest.param(b'{"number": 1e999, "title": "x"}', id="number 1e999"),
        pytest.param(b'{"number": NaN}', id="number NaN"),
        pytest.param(b"[1, 2, 3]", id="not an object"),
        pytest.param(b"[" * 100_000, id="nested past the parser"),
    ],
)
def test_a_damaged_line_is_passed_over_and_counted_and_the_next_record_follows_the_good_ones(tmp_path: Path, damage: bytes) -> None:
    (tmp_path / LOG_FILE).write_bytes(GOOD + damage + b"\n")
    assert append_record(tmp_path, record("after")).number == 8
    log = read_log(tmp_path)
    assert [(entry.number, entry.title) for entry in log.records] == [(7, "by hand"), (8, "after")]
    assert log.lines_passed_over == 1


def test_a_last_line_cut_short_is_ended_before_the_next_record(tmp_path: Path) -> None:
    (tmp_path / LOG_FILE).write_bytes(GOOD + b'{"number": 8, "title": "cut sh')  # a full disk: no newline
    append_record(tmp_path, record("after"))
    log = read_log(tmp_path)
    assert [(entry.number, entry.title) for entry in log.records] == [(7, "by hand"), (8, "after")]
    assert log.lines_passed_over == 1
    assert read_log(tmp_path / "nothing here") == RunLog((), 0, 0)


FILL_THE_DISK = """
import json, sys
from pathlib import Path
from tpu_nb.kernel.history.log import append_record, read_log
from tpu_nb.kernel.history.run_record import RunRecord
disk = Path(sys.argv[1])
def record(title):  # 200 points a curve: a record of 2.5 kB, so the second one does not fit in the disk's last page
    return RunRecord(0, title, 1.7e9, 1.0, "done", None, {}, None, None, {}, {}, {"loss": tuple((s, 1.0) for s in range(200))}, None)
append_record(disk, record("first"))
try:
    with open(disk / "filler", "wb", buffering=0) as filler:
        while True:
            filler.write(b"x" * 512)
except OSError:
    pass  # the disk is full
try:
    append_record(disk, record("cut short"))
except OSError as error:
    refused = str(error)
(disk / "filler").unlink()
append_record(disk, record("after"))
log = read_log(disk)
print(json.dumps({"refused": refused, "records": [[r.number, r.title] for r in log.records], "passed_over": log.lines_passed_over}))
"""


def test_a_record_cut_short_by_a_full_disk_costs_only_itself(tmp_path: Path) -> None:
    done = run_with_small_mounts({tmp_path / "disk": "16k"}, [sys.executable, "-c", FILL_THE_DISK, str(tmp_path / "disk")])
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert "No space left on device" in found["refused"]
    assert found["records"] == [[1, "first"], [2, "after"]] and found["passed_over"] == 1


def test_a_trial_value_json_cannot_hold_is_written_as_strict_json(tmp_path: Path) -> None:
    append_record(tmp_path, record(trial={"pair": {(0, 1): 2.0}, "lr": float("inf"), "seed": 1}))
    text = (tmp_path / LOG_FILE).read_text()
    json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} is not JSON"))
    [read] = read_log(tmp_path).records
    assert read.trial == {"pair": {"(0, 1)": 2.0}, "lr": "inf", "seed": 1}


def test_bad_bytes_inside_a_record_cost_only_those_characters(tmp_path: Path) -> None:
    (tmp_path / LOG_FILE).write_bytes(GOOD.replace(b"by hand", b"by \xff hand"))
    [read] = read_log(tmp_path).records
    assert read.title == "by \ufffd hand"


def test_curves_keep_rank_0s_reports_thinned_with_the_last_point_and_the_best_by_the_metrics_direction() -> None:
    keeper = CurveKeeper()
    steps = 1001
    for step in range(steps):
        keeper.on_event(Progress(0, step, {"loss": 10.0 - step / 200, "eval_accuracy": 0.5 + (step % 7) / 100}))
    keeper.on_event(Progress(0, None, {"loss": float("nan")}))  # nothing to keep
    keeper.on_event(Stopping(0, 3, StopReason.USER))
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
    assert log_directory("~no-such-user/runs") == Path("~no-such-user/runs")  # as written, not a RuntimeError that costs the run


def test_a_record_lists_only_the_options_that_differ_from_the_defaults() -> None:
    options = LaunchOptions(cores=2, stop_grace=30.0)
    assert changed_options(options, LaunchOptions()) == {"cores": 2, "stop_grace": 30.0}
    assert json.dumps(changed_options(LaunchOptions.from_user(checkpoint="/tmp/never-made", every="5steps"), LaunchOptions()))


def test_runs_are_named_by_their_numbers_in_the_order_given(tmp_path: Path) -> None:
    for title in ("a", "b", "c"):
        append_record(tmp_path, record(title))
    records = read_log(tmp_path).records
    assert [entry.title for entry in records_named(records, [3, 1])] == ["c", "a"]
    with pytest.raises(KeyError) as missing:
        records_named(records, [2, 7, 9])
    assert missing.value.args[0] == [7, 9]
