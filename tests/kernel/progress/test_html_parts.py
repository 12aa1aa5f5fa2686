"""The metrics table the dashboard and the summary share."""

from __future__ import annotations

import re

from support.finished_runs import finished_run, training_metrics

from tpu_nb.kernel.progress.html_parts import table_html


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
