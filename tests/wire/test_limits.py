"""Size limits: events cut to fit one atomic write without losing what can be kept, text capped by bytes."""

from __future__ import annotations

import pickle

import pytest

from tpu_nb.wire.events import Diagnosis, Notice, Output, Progress
from tpu_nb.wire.limits import cap_text, fit, utf8_pieces
from tpu_nb.wire.stacks import StackAnswer


def pickled_size(event: object) -> int:
    return len(pickle.dumps(event))


def test_cap_text_keeps_head_and_tail_and_says_how_much_was_skipped() -> None:
    assert cap_text("short", 100) == "short"
    text = "A" * 10_000_000 + "the end"
    capped = cap_text(text, 2000)
    assert len(capped.encode()) <= 2000
    assert capped.startswith("AAAA") and capped.endswith("the end")
    assert "bytes skipped" in capped and "9,998," in capped


def test_cap_text_never_cuts_a_character_in_two() -> None:
    capped = cap_text("日本語" * 1000, 101)
    capped.encode()  # valid UTF-8: no half characters
    assert capped.startswith("日本語") and capped.endswith("語")


def test_utf8_pieces_fit_their_budget_and_join_back() -> None:
    text = "ascii " + "训练" * 500 + " 🚀" * 300
    pieces = utf8_pieces(text, 64)
    assert "".join(pieces) == text
    assert all(len(piece.encode()) <= 64 for piece in pieces)


def test_an_event_that_fits_is_left_alone() -> None:
    event = Output(0, "stdout", "hello\n")
    assert fit(event, pickled_size, 4096) == [event]


def test_metrics_are_split_across_events_of_the_same_step_and_none_is_lost() -> None:
    metrics = {f"eval_per_class_{n}_precision": float(n) for n in range(300)}
    pieces = fit(Progress(0, 7, metrics, max_steps=9, epoch=1.0, phase="eval"), pickled_size, 4096)
    assert len(pieces) > 2 and all(pickled_size(piece) <= 4096 for piece in pieces)
    assert all(isinstance(piece, Progress) and piece.step == 7 and piece.epoch == 1.0 for piece in pieces)
    assert {name: value for piece in pieces for name, value in piece.metrics.items()} == metrics  # type: ignore[union-attr]


def test_a_hosts_stack_dump_is_split_in_order_and_only_its_last_piece_says_so() -> None:
    dump = "".join(f'  File "/usr/lib/python3.12/threading.py", line {n} in wait\n' for n in range(400))
    pieces = fit(StackAnswer(2, 77, dump), pickled_size, 4096)
    assert len(pieces) > 2 and all(isinstance(piece, StackAnswer) and pickled_size(piece) <= 4096 for piece in pieces)
    assert "".join(piece.text for piece in pieces) == dump  # type: ignore[union-attr]
    assert [piece.last for piece in pieces] == [False] * (len(pieces) - 1) + [True]  # type: ignore[union-attr]


def test_a_single_item_bigger_than_a_frame_is_cut_with_a_notice() -> None:
    huge = Diagnosis(2, "host-syncs", "Host syncs", "x" * 50_000, ("In [4], line 9",) * 40, "fix it", 20)
    pieces = fit(huge, pickled_size, 4096)
    cut, notice = pieces
    assert isinstance(cut, Diagnosis) and pickled_size(cut) <= 4096 and cut.key == "host-syncs" and cut.rank == 2
    assert isinstance(notice, Notice) and notice.rank == 2 and "cut a doctor's finding" in notice.text
    one_metric = fit(Progress(0, 1, {"m" * 10_000: 1.0}), pickled_size, 4096)
    assert isinstance(one_metric[-1], Notice) and "metric name at step 1" in one_metric[-1].text


def test_an_event_that_cannot_be_cut_to_size_is_a_tpu_nb_bug() -> None:
    with pytest.raises(ValueError, match="tpu_nb bug"):
        fit(Notice(0, "hi"), pickled_size, 10)
