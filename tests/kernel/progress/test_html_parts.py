"""The metrics table the dashboard and the summary share."""

from __future__ import annotations

import re

from support.finished_runs import finished_run, training_metrics

from tpu_nb.kernel.progress.html_parts import HEALTH_COLOURS, OTHER_PHASE_COLOUR, PHASE_COLOURS, PILL_TEXT, table_html


def test_table_is_trainer_style() -> None:
    table = table_html(finished_run(training_metrics()), max_rows=100)
    headers = re.findall(r"<th[^>]*>([^<]*)</th>", table)
    assert headers == ["Step", "Training Loss", "Validation Loss", "Learning Rate", "Validation Accuracy"]
    rows = re.findall(r"<tr>(.*?)</tr>", table)[1:]
    assert len(rows) == 6
    assert re.findall(r"<td[^>]*>([^<]*)</td>", rows[2]) == ["15", "0.1333", "0.06667", "2.5e-05", "0.375"]
    assert re.findall(r"<td[^>]*>([^<]*)</td>", rows[0])[2] == "—"  # no evaluation at step 5


def test_long_tables_show_the_last_rows() -> None:
    snapshot = finished_run({step: {"loss": 1.0 / step} for step in range(1, 31)})
    table = table_html(snapshot, max_rows=10)
    assert "the last 10 of 30 logged rows" in table
    assert re.findall(r"<tr><td[^>]*>(\d+)</td>", table) == [str(step) for step in range(21, 31)]


def relative_luminance(colour: str) -> float:
    """WCAG 2's relative luminance of a #rrggbb colour."""
    channels = [int(colour[index : index + 2], 16) / 255 for index in (1, 3, 5)]
    red, green, blue = (value / 12.92 if value <= 0.03928 else ((value + 0.055) / 1.055) ** 2.4 for value in channels)
    return 0.2126 * red + 0.7152 * green + 0.0722 * blue


def test_every_pill_reads_at_aa_contrast_in_any_theme() -> None:
    text = relative_luminance(PILL_TEXT)
    for colour in {*PHASE_COLOURS.values(), *HEALTH_COLOURS.values(), OTHER_PHASE_COLOUR}:
        background = relative_luminance(colour)
        assert (max(text, background) + 0.05) / (min(text, background) + 0.05) >= 4.5, colour


def test_a_pod_runs_worker_rows_are_hosts() -> None:
    from tpu_nb.kernel.progress.html_parts import workers_html
    from tpu_nb.kernel.progress.state import ProgressState
    from tpu_nb.wire.events import Heartbeat, WorkerStarted

    progress = ProgressState("%%tpu_train --pod my-slice", "TPU VM my-slice", expected_workers=2, worker_noun="host")
    for host in (0, 1):
        progress.on_event(WorkerStarted(host, 2, 100 + host, "xla:0"))
        progress.on_event(Heartbeat(host, 7, "train", 2, 1.5))
    table = workers_html(progress.snapshot())
    assert re.findall(r"<th[^>]*>([^<]*)</th>", table)[0] == "Host"
    assert [row[0] for row in (re.findall(r"<td[^>]*>([^<]*)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", table)[1:])] == ["0", "1"]


def test_the_watchdog_s_report_shows_verdict_fix_each_rank_and_the_whole_stacks_a_click_away() -> None:
    from tpu_nb.kernel.progress.html_parts import stall_html
    from tpu_nb.wire.stacks import RankPlace, StackReport

    assert stall_html(None) == ""
    place = RankPlace(1, 42, 19, "In [3], line 10: time.sleep(600)", None, ("In [3], line 10: time.sleep(600)",), ("thread 0x8: x",))
    waiting = RankPlace(
        0, 41, 20, "In [3], line 7: xm.optimizer_step(o)", "torch/distributed/distributed_c10d.py, line 2942, in all_reduce", ()
    )
    report = StackReport(
        "rank 1's step has not moved for 5s",
        (waiting, place),
        "Rank 0 waits <here>.",
        "Do & this.",
        ("pid 9: gone",),
        "rank 0: TensorCore 2%",
    )
    shown = stall_html(report)
    assert "Where are they?</strong> Rank 0 waits &lt;here&gt;." in shown and "Fix: Do &amp; this." in shown
    assert "<code>In [3], line 10: time.sleep(600)</code>" in shown and "waiting in <code>torch/distributed/" in shown
    assert "no stacks from pid 9: gone" in shown and "Chips: rank 0: TensorCore 2%" in shown
    assert '<details class="tpu-nb-stacks">' in shown and "other thread: thread 0x8: x" in shown


def test_the_workers_and_xla_section_holds_the_workers_health_and_doctor_and_opens_when_asked() -> None:
    from tpu_nb.kernel.progress.html_parts import doctor_html, health_html, workers_details_html, workers_html

    snapshot = finished_run(training_metrics())
    closed, opened = workers_details_html(snapshot, False), workers_details_html(snapshot, True)
    assert closed.startswith('<details class="tpu-nb-details"><summary') and opened.startswith('<details class="tpu-nb-details" open>')
    assert "Workers and XLA</summary>" in closed
    assert closed.endswith(f"{workers_html(snapshot)}{health_html(snapshot)}{doctor_html(snapshot)}</details>")


def test_all_rows_are_a_click_away_only_beyond_the_table_and_at_most_max_rows() -> None:
    from tpu_nb.kernel.progress.html_parts import all_rows_html

    snapshot = finished_run({step: {"loss": 1.0 / step} for step in range(1, 31)})
    assert all_rows_html(snapshot, table_rows=30, max_rows=100) == ""
    rows = all_rows_html(snapshot, table_rows=8, max_rows=12)
    assert rows.startswith('<details class="tpu-nb-all-rows"><summary style="cursor:pointer">All 30 logged rows</summary>')
    assert re.findall(r"<tr><td[^>]*>(\d+)</td>", rows) == [str(step) for step in range(19, 31)]


def test_the_health_line_has_the_newest_checkpoint_under_it_when_there_is_one() -> None:
    import dataclasses

    from tpu_nb.kernel.progress.html_parts import health_lines_html

    snapshot = finished_run(training_metrics())
    alone = health_lines_html(snapshot)
    assert alone.startswith('<div class="tpu-nb-xla-stable">') and "tpu-nb-checkpoint" not in alone
    saved = health_lines_html(dataclasses.replace(snapshot, checkpoint="step 30 saved & verified"))
    assert saved.startswith(alone) and saved.endswith(">saved</span> step 30 saved &amp; verified</div>")
