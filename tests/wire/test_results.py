"""A rank's result through the run dir: every part its own file, what cannot be pickled shown as text."""

from __future__ import annotations

import threading
from pathlib import Path

import torch

from tpu_nb.wire.results import NotTransferable, RankResult, load_result, save_result


def test_a_result_comes_back_as_it_went(tmp_path: Path) -> None:
    sent = RankResult({"accuracy": 0.9}, True, {"weights": torch.ones(2), "notes": ["a"]}, ("missing",))
    save_result(sent, tmp_path, 0)
    back = load_result(tmp_path, 0)
    assert back is not None
    assert back.value == {"accuracy": 0.9} and back.has_value and back.missing == ("missing",)
    assert torch.equal(back.returned["weights"], torch.ones(2)) and back.returned["notes"] == ["a"]


def test_no_value_is_not_a_none_value(tmp_path: Path) -> None:
    save_result(RankResult(returned={"x": 1}), tmp_path, 0)
    back = load_result(tmp_path, 0)
    assert back is not None and not back.has_value and back.returned == {"x": 1}


def test_one_unpicklable_part_loses_nothing_else(tmp_path: Path) -> None:
    save_result(RankResult(threading.Lock(), True, {"fine": 3}), tmp_path, 1)
    back = load_result(tmp_path, 1)
    assert back is not None
    assert isinstance(back.value, NotTransferable) and back.value.type_name == "lock"
    assert back.returned == {"fine": 3}


def test_a_rank_that_saved_nothing_has_no_result(tmp_path: Path) -> None:
    assert load_result(tmp_path, 0) is None
