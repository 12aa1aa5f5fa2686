"""A run's record: written as strict JSON whatever it holds, read field by field, what does not fit left out and counted."""

from __future__ import annotations

import enum
import json
from typing import Any

from tpu_nb.kernel.history.run_record import DEEPEST, RecordRead, RunRecord, json_safe, read_record

GOOD: dict[str, Any] = {"number": 3, "title": "%%tpu_train", "started": 1_700_000_000.0, "seconds": 12.5, "status": "done"}


class Mode(enum.IntEnum):
    FAST = 2


def test_values_json_cannot_hold_are_written_as_strict_json() -> None:
    nested: list[Any] = []
    nested.append(nested)  # a list that holds itself
    value = {(0, 1): 2.0, 3: float("inf"), "nan": float("nan"), "set": {1}, "mode": Mode.FAST, "deep": nested}
    safe = json_safe(value)
    text = json.dumps(safe, allow_nan=False)  # no TypeError (tuple key), no OverflowError or NaN token
    assert json.loads(text) == safe
    assert safe["(0, 1)"] == 2.0 and safe["3"] == "inf" and safe["nan"] == "nan" and safe["set"] == "{1}" and safe["mode"] == 2
    depth, inner = 0, safe["deep"]
    while isinstance(inner, list):
        depth, inner = depth + 1, inner[0]
    assert depth == DEEPEST - 1 and inner == "[[...]]"  # kept as its repr past the deepest level


def test_a_record_is_written_json_safe_and_read_back() -> None:
    record = RunRecord(
        3,
        "t",
        1.7e9,
        2.0,
        "done",
        None,
        {"cores": 2},
        {"pair": {(0, 1): 2.0}},
        None,
        {"loss": 0.5},
        {"loss": 0.4},
        {"loss": ((0, 0.5),)},
        None,
    )
    read = read_record(json.loads(json.dumps(record.to_json(), allow_nan=False)))
    assert read.passed_over == 0 and read.record is not None
    assert read.record.trial == {"pair": {"(0, 1)": 2.0}} and read.record.curves == {"loss": ((0, 0.5),)}


def test_a_line_without_a_runs_number_title_start_time_or_status_is_no_record() -> None:
    assert read_record({**GOOD}).record is not None
    for shape in ([1, 2], "a record", 7, None):
        assert read_record(shape) == RecordRead(None, 0)
    for field, value in [
        ("number", float("inf")),  # "number": 1e999 as json.loads gives it
        ("number", float("nan")),
        ("number", 3.0),
        ("number", True),
        ("title", None),
        ("status", 1),
        ("started", "yesterday"),
        ("started", 1e300),  # past any date the table can show
        ("seconds", float("inf")),
        ("seconds", 10**400),  # a whole number no float holds
    ]:
        assert read_record({**GOOD, field: value}).record is None, (field, value)
    assert read_record({key: value for key, value in GOOD.items() if key != "status"}).record is None


def test_a_field_that_is_not_what_a_record_holds_is_left_out_and_counted() -> None:
    read = read_record(
        {
            **GOOD,
            "text": 5,
            "options": [1],
            "trial": "lr=1",
            "final": {"loss": "low", "accuracy": 0.5, "f1": None, "steps": True},
            "best": 3,
            "curves": {"loss": [[0, 2.0], [1], "x", [2, "y"], [3.5, 1.0], [4, 1.0]], "acc": "not a curve"},
        }
    )
    assert read.record is not None and read.passed_over == 1 + 1 + 1 + 3 + 1 + 4 + 1
    record = read.record
    assert (record.text, record.options, record.trial) == (None, {}, None)
    assert record.final == {"accuracy": 0.5} and record.best == {}
    assert record.curves == {"loss": ((0, 2.0), (4, 1.0))}
    curves_not_a_dict = read_record({**GOOD, "curves": [[0, 1.0]]})
    assert curves_not_a_dict.record is not None and curves_not_a_dict.record.curves == {} and curves_not_a_dict.passed_over == 1


def test_a_runs_speed_is_kept_null_where_unknown_and_an_earlier_records_lack_of_it_is_no_damage() -> None:
    fast = RunRecord(1, "t", 1.7e9, 2.0, "done", None, {}, None, None, {}, {}, {}, None, tokens_per_second=1234.5, mfu=0.41)
    slow = RunRecord(2, "t", 1.7e9, 2.0, "done", None, {}, None, None, {}, {}, {}, None, tokens_per_second=99.0)
    assert slow.to_json()["mfu"] is None  # no chip peak known: null, as JSON says nothing
    for record in (fast, slow):
        read = read_record(json.loads(json.dumps(record.to_json(), allow_nan=False)))
        assert read == RecordRead(record, 0)
    assert read_record({**GOOD}) == RecordRead(RunRecord(3, "%%tpu_train", 1.7e9, 12.5, "done", None, {}, None, None, {}, {}, {}, None), 0)
    damaged = read_record({**GOOD, "tokens_per_second": "fast", "mfu": float("inf")})
    assert damaged.passed_over == 2 and damaged.record is not None and damaged.record.tokens_per_second is None
