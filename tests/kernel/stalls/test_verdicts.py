"""Verdicts from where the ranks are: each kind of silence in words, with its fix."""

from __future__ import annotations

from tpu_nb.kernel.stalls.verdicts import judge, kind_of
from tpu_nb.wire.events import Stalled
from tpu_nb.wire.stacks import RankPlace

COLLECTIVE = ("In [5], line 9: xm.optimizer_step(optimizer)", "torch_xla/core/xla_model.py, line 1200, in all_reduce")


def place(rank: int, step: int | None, where: str | None, waits_in: str | None = None, stack: tuple[str, ...] = ()) -> RankPlace:
    return RankPlace(rank, 100 + rank, step, where, waits_in, stack or ((where,) if where else ()) + ((waits_in,) if waits_in else ()))


def test_ranks_waiting_in_a_collective_for_a_rank_behind_them_name_both_and_the_fix() -> None:
    waiting = [place(rank, 21, COLLECTIVE[0], COLLECTIVE[1], COLLECTIVE) for rank in (0, 2, 3)]
    sleeper = place(1, 20, "In [5], line 12: time.sleep(600)")
    verdict = judge([*waiting, sleeper], Stalled(0, 21, 65.0, 60.0, None))
    assert verdict.text.startswith("Ranks 0, 2, 3 wait in a collective at In [5], line 9: xm.optimizer_step(optimizer) at step 21")
    assert "rank 1 is at step 20, sleeping at In [5], line 12: time.sleep(600)" in verdict.text
    assert "skipped a step" in verdict.fix and "drop_last=True" in verdict.fix


def test_a_rank_that_left_the_loop_early_is_found_by_its_step_alone() -> None:
    verdict = judge([place(0, 30, COLLECTIVE[0], COLLECTIVE[1], COLLECTIVE), place(1, 29, COLLECTIVE[0], COLLECTIVE[1], COLLECTIVE)], None)
    assert verdict.text.endswith("at step 29, 30, which every rank must reach; rank 1 is at step 29.")


def test_every_rank_in_a_collective_at_one_step_suspects_a_missing_process() -> None:
    verdict = judge([place(rank, 7, COLLECTIVE[0], COLLECTIVE[1], COLLECTIVE) for rank in range(4)], None)
    assert verdict.text.startswith("Every rank waits in a collective") and "died" in verdict.text


def test_every_rank_in_the_data_loader_is_input_bound() -> None:
    loader = (
        "In [4], line 3: for batch in loader:",
        "torch/utils/data/dataloader.py, line 1300, in _get_data",
        "queue.py, line 180, in get",
    )
    verdict = judge([place(rank, 5, loader[0], loader[2], loader) for rank in range(2)], None)
    assert verdict.text.startswith("Every rank waits for its next batch in the data loader") and "num_workers" in verdict.fix


def test_a_host_read_a_sleep_a_queue_and_io_each_get_their_words() -> None:
    read = judge([place(0, 10, "In [6], line 8: total += loss.item()")], Stalled(0, 10, 5.0, 4.0, None))
    assert read.text.startswith("Rank 0 (step 10) is reading a value from the device at In [6], line 8") and "report(loss=" in read.fix
    asleep = judge([place(0, 3, "In [6], line 4: time.sleep(1000)")], None)
    assert asleep.text == "Rank 0 (step 3) is sleeping at In [6], line 4: time.sleep(1000)."
    queue = judge([place(0, 5, "In [6], line 6: q.get()", "threading.py, line 320, in wait")], None)
    assert "waits on a queue, event or lock at In [6], line 6: q.get() (threading.py, line 320, in wait)" in queue.text
    network = judge([place(0, 5, "In [6], line 6: urlopen(url).read()", "socket.py, line 707, in readinto")], None)
    assert "waits on I/O" in network.text and "earlier cell" in network.fix
    assert kind_of(place(0, 1, "In [6], line 2: x = model(batch)", "torch/nn/modules/module.py, line 1, in _call_impl")) == "elsewhere"


def test_a_running_compilation_is_said_with_its_duration_before_anything_else() -> None:
    verdict = judge([place(0, 1, "In [3], line 12: torch_xla.sync()")], Stalled(0, 1, 75.0, 60.0, 190.0))
    assert verdict.text == "Compiling: an XLA compilation has been running for 3m10s on rank 0 at In [3], line 12: torch_xla.sync()."
    assert "--compile-cache" in verdict.fix


def test_no_answer_at_all_says_so() -> None:
    assert judge([], None).text == "No rank answered with its stack."


def test_asked_for_without_a_stall_the_verdict_is_about_the_rank_furthest_behind() -> None:
    moving = place(0, 85, "In [2], line 8: time.sleep(0.05)")
    behind = place(1, 2, "In [2], line 10: x = next(batches)", "queue.py, line 171, in get")
    assert judge([moving, behind], None).text.startswith("Rank 1 (step 2) waits on a queue, event or lock at In [2], line 10")


def test_on_a_pod_the_stalled_rank_is_found_by_its_host_too() -> None:
    same_rank = [
        RankPlace(0, 10, 40, "In [2], line 8: time.sleep(0.05)", None, (), host=0),
        RankPlace(0, 11, 2, "In [2], line 10: time.sleep(600)", None, (), host=1),
    ]
    verdict = judge(same_rank, Stalled(0, 2, 5.0, 3.0, None), host=1)
    assert verdict.text == "Rank 0 on host 1 (step 2) is sleeping at In [2], line 10: time.sleep(600)."
