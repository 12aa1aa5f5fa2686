"""%tpu_runs' table and overlay: a row per run with its trial and values, a line per run in the chart, what was passed over."""

from __future__ import annotations

from tpu_nb.kernel.history.log import THROUGHPUT_CURVE, RunLog
from tpu_nb.kernel.history.run_record import RunRecord
from tpu_nb.kernel.history.view import passed_over_text, run_label, runs_chart, runs_html, runs_text


def _record(number: int, trial: dict[str, object] | None, loss: list[float], accuracy: float | None = None) -> RunRecord:
    curves = {"loss": tuple(enumerate(loss))}
    final = {"loss": loss[-1]}
    if accuracy is not None:
        curves["eval_accuracy"] = ((len(loss) - 1, accuracy),)
        final["eval_accuracy"] = accuracy
    return RunRecord(number, "%%tpu_train", 1_700_000_000.0, 75.0, "done", None, {}, trial, None, final, final, curves, "/ckpt/trial-0")


def test_each_run_is_a_row_named_by_its_number_title_and_trial() -> None:
    records = [_record(1, None, [2.0, 1.0]), _record(2, {"lr": 3e-5}, [2.0, 0.5], accuracy=0.75)]
    assert run_label(records[1]) == "#2 %%tpu_train (lr=3e-05)"
    text = runs_text(records, "eval_accuracy")
    assert text.splitlines()[1].startswith("#2 %%tpu_train (lr=3e-05)") and "1m15s" in text and "eval_accuracy=0.75" in text
    html = runs_html(records, "eval_accuracy", chart=None)
    assert html.count("<tr>") == 3 and "best eval_accuracy" in html and "/ckpt/trial-0" in html and "<img" not in html
    assert runs_text([], "loss").startswith("tpu_nb: no runs logged yet")


def test_the_overlay_has_a_panel_per_metric_reported_and_nothing_without_curves() -> None:
    records = [_record(1, None, [2.0, 1.0, 0.8]), _record(2, {"lr": 3e-5}, [2.0, 0.5, 0.4], accuracy=0.75)]
    both = runs_chart(records, "eval_accuracy")
    loss_only = runs_chart(records, "loss")
    assert both is not None and loss_only is not None and both.startswith(b"\x89PNG")
    assert _width(both) > _width(loss_only)  # two panels side by side
    assert runs_chart([RunRecord(3, "t", 0.0, 1.0, "failed", "x", {}, None, None, {}, {}, {}, None)], "loss") is None


def test_what_a_damaged_log_lost_is_said_with_the_file() -> None:
    record = _record(1, None, [1.0])
    assert passed_over_text(RunLog((record,), 0, 0), "runs.jsonl") is None
    said = passed_over_text(RunLog((record,), 3, 1), "/nb/tpu_nb_runs/runs.jsonl")
    assert said == (
        "tpu_nb: /nb/tpu_nb_runs/runs.jsonl: passed over 3 lines (no run's record: cut short, damaged or edited by hand) "
        "and 1 value in the records (a metric that is not a number, a curve's point not [step, value]); the runs listed are the rest."
    )
    assert passed_over_text(RunLog((), 1, 0), "runs.jsonl") == (
        "tpu_nb: runs.jsonl: passed over 1 line (no run's record: cut short, damaged or edited by hand); the runs listed are the rest."
    )


def _width(png: bytes) -> int:
    return int.from_bytes(png[16:20], "big")


def test_each_runs_speed_is_a_column_and_its_tokens_per_second_an_overlay() -> None:
    fast = RunRecord(
        1, "t", 1.7e9, 9.0, "done", None, {}, None, None, {"loss": 0.5}, {"loss": 0.5},
        {"loss": ((1, 0.9), (2, 0.5)), THROUGHPUT_CURVE: ((1, 900.0), (2, 1200.0))}, None, 1234.5, 0.412,
    )  # fmt: skip
    cpu = RunRecord(2, "t", 1.7e9, 9.0, "done", None, {}, None, None, {"loss": 0.4}, {"loss": 0.4}, {"loss": ((2, 0.4),)}, None, 99.0)
    lines = runs_text([fast, cpu], "loss").splitlines()
    assert lines[0].endswith("loss=0.5  tokens/s=1,234 MFU=41.2%") and lines[1].endswith("loss=0.4  tokens/s=99")
    html = runs_html([fast, cpu], THROUGHPUT_CURVE, chart=None)
    assert "<th style='padding:2px 10px'>tokens/s</th><th style='padding:2px 10px'>MFU</th>" in html
    assert ">1,234<" in html and ">41.2%<" in html and "best tokens_per_second" not in html  # its column says it
    speed = runs_chart([fast, cpu], THROUGHPUT_CURVE)
    assert speed is not None and _width(speed) > _width(runs_chart([fast, cpu], "loss") or b"")
