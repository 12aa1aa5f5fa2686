"""A verdict, in words with its fix, from where every rank is and at which step (pure logic).

Each rank's place is sorted into what it waits for (a collective, input,
a host read, a sleep, a queue or lock, I/O, a compilation), then the
ranks are judged together: ranks at different steps with some waiting in
a collective are the classic hang of a rank that skipped a step.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from tpu_nb.basics.units import format_duration
from tpu_nb.wire.events import Stalled
from tpu_nb.wire.stacks import RankPlace

_COLLECTIVE = re.compile(
    r"in _?(all_reduce|reduce_gradients|optimizer_step|rendezvous|xla_rendezvous|mesh_reduce|all_gather|reduce_scatter|"
    r"all_to_all|barrier|wait_device_ops|broadcast|send|recv)$"
)
_INPUT = re.compile(r"torch/utils/data/|torch_xla/distributed/parallel_loader\.py|datasets/")
_HOST_READ = re.compile(r"\.(item|cpu|tolist|numpy)\(|\bprint\(|float\(|int\(")
_SLEEP = re.compile(r"\bsleep\(")
_WAIT = re.compile(r"^(queue\.py|threading\.py|multiprocessing/(queues|connection|synchronize|pool)\.py|concurrent/futures/)")
_IO = re.compile(r"^(socket\.py|ssl\.py|http/|urllib|requests/|urllib3/|subprocess\.py|selectors\.py|fsspec/|gcsfs/|huggingface_hub/)")


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the ranks are doing, and what to do about it."""

    text: str
    fix: str


def kind_of(place: RankPlace) -> str:
    """What one rank waits for: "collective", "input", "host read", "sleep", "wait", "io" or "elsewhere"."""
    library = [line for line in place.stack if not line.startswith("In [")]
    if any(_COLLECTIVE.search(line) for line in library):
        return "collective"
    if any(_INPUT.search(line) for line in library):
        return "input"
    if place.waits_in is not None and _IO.search(place.waits_in):
        return "io"
    if place.waits_in is not None and _WAIT.search(place.waits_in):
        return "wait"
    # The innermost cell line's source: `where` names the cell frames above it too.
    cell_lines = [line for line in place.stack if line.startswith("In [")]
    source = (cell_lines[-1] if cell_lines else place.where or "").split(": ", 1)[-1]
    if _SLEEP.search(source):
        return "sleep"
    if _HOST_READ.search(source) and (place.waits_in is None or place.waits_in.startswith("torch/")):
        return "host read"
    return "elsewhere"


def judge(places: Sequence[RankPlace], stall: Stalled | None, host: int | None = None) -> Verdict:
    """The verdict for a run whose ranks are at `places`; `stall` is what the watchdog said, if it spoke (on `host`, on a pod)."""
    if not places:
        return Verdict(
            "No rank answered with its stack.",
            "The worker processes may be stuck in the operating system (a device or network file system) or gone: Kill the run.",
        )
    kinds = {_key(place): kind_of(place) for place in places}
    if stall is not None and stall.compiling is not None:
        place = _place(places, stall.rank, host)
        return Verdict(
            f"Compiling: an XLA compilation has been running for {format_duration(stall.compiling)} on {place.label}{_at(place)}.",
            "Wait for it: a step's graph is compiled once and then cached (on a TPU a big model's first step can take minutes; "
            "--compile-cache keeps it for the next run). If this comes back every few steps, the graph changes from step to step: "
            "see the XLA doctor's findings.",
        )
    waiting = [place for place in places if kinds[_key(place)] == "collective"]
    elsewhere = [place for place in places if kinds[_key(place)] != "collective"]
    steps = {place.step for place in places if place.step is not None}
    if waiting and (elsewhere or len(steps) > 1):
        return _collective_mismatch(waiting, elsewhere, kinds)
    if waiting:
        return Verdict(
            f"Every rank waits in a collective{_at(waiting[0])}, at the same step: one process has not arrived "
            "(it may have died) or the chips cannot reach each other.",
            "Kill the run and look at every rank's output (--all-ranks-output); on a pod, check that every host is up.",
        )
    if all(kind == "input" for kind in kinds.values()):
        return Verdict(
            f"Every rank waits for its next batch in the data loader{_at(places[0])}: the run is input-bound, "
            "or a DataLoader worker process has died.",
            "Make the data ready before training (tokenize in an earlier cell, Dataset.map), give the DataLoader "
            "num_workers, and check that the dataset's __getitem__ does not block.",
        )
    # Asked for without a stall: the rank furthest behind is the one the others would wait for.
    focus = (
        _place(places, stall.rank, host) if stall is not None else min(places, key=lambda place: -1 if place.step is None else place.step)
    )
    return _single(focus, kinds[_key(focus)])


def _collective_mismatch(waiting: Sequence[RankPlace], elsewhere: Sequence[RankPlace], kinds: dict[tuple[int | None, int], str]) -> Verdict:
    waiting_steps = sorted({place.step for place in waiting if place.step is not None})
    at_step = f" at step {_steps(waiting_steps)}" if waiting_steps else ""
    others = "; ".join(
        f"{place.label}{'' if place.step is None else f' is at step {place.step}'}, {_what(kinds[_key(place)])}{_at(place)}"
        for place in elsewhere
    )
    behind = [place for place in waiting if waiting_steps and place.step is not None and place.step < waiting_steps[-1]]
    if not others and behind:
        others = "; ".join(f"{place.label} is at step {place.step}" for place in behind)
    return Verdict(
        f"Rank{'s' if len(waiting) > 1 else ''} {_ranks_on_hosts(waiting)} wait{'' if len(waiting) > 1 else 's'} in a collective"
        f"{_at(waiting[0])}{at_step}, which every rank must reach; " + (others or "the others are elsewhere") + ".",
        "Every rank must make the same collective calls (xm.optimizer_step, all_reduce, mesh_reduce, rendezvous) in the same "
        "order: a rank skipped a step or left the loop early (a data loader of another length on one rank, a `break` or an "
        "`if rank == ...` around a step). Give every rank the same number of batches (a DistributedSampler with drop_last=True) "
        "and stop every rank at the same step.",
    )


def _single(place: RankPlace, kind: str) -> Verdict:
    rank = f"{place.label.capitalize()}{'' if place.step is None else f' (step {place.step})'}"
    if kind == "host read":
        return Verdict(
            f"{rank} is reading a value from the device{_at(place)}: each read waits for everything queued on the device, "
            "and in a loop the host and the device take turns instead of overlapping.",
            "Keep values on the device and read them once every N steps (pass tensors to report(loss=...), which reads them "
            "after the step), or move the read out of the loop.",
        )
    if kind == "sleep":
        return Verdict(
            f"{rank} is sleeping{_at(place)}.", "Remove or shorten the sleep: the other ranks wait for it in their next collective."
        )
    if kind == "wait":
        return Verdict(
            f"{rank} waits on a queue, event or lock{_at(place)} ({place.waits_in}): whatever should fill or release it has "
            "stopped or never started.",
            "Check the thread or process that should put into it (did it raise?), and give the wait a timeout.",
        )
    if kind == "io":
        return Verdict(
            f"{rank} waits on I/O{_at(place)} ({place.waits_in}): a download, a network file or a subprocess is slow or hung.",
            "Do such I/O before %%tpu_train, in an earlier cell, and pass the data in; give network calls a timeout.",
        )
    if kind == "input":
        return Verdict(
            f"{rank} waits for its next batch in the data loader{_at(place)}.",
            "Make the data ready before training and give the DataLoader num_workers; check that __getitem__ does not block.",
        )
    inside = f", inside {place.waits_in}" if place.waits_in else ""
    return Verdict(
        f"{rank} has not moved{_at(place)}{inside}.",
        "If this is expected work (a long evaluation, saving), wait or raise --watchdog; otherwise Stop or Kill the run and look at this line.",
    )


def _what(kind: str) -> str:
    return {
        "input": "waiting for input",
        "host read": "reading from the device",
        "sleep": "sleeping",
        "wait": "waiting on a queue or lock",
        "io": "waiting on I/O",
        "collective": "in a collective",
    }.get(kind, "elsewhere")


def _at(place: RankPlace) -> str:
    return f" at {place.where}" if place.where else ""


def _key(place: RankPlace) -> tuple[int | None, int]:
    return place.host, place.rank


def _place(places: Sequence[RankPlace], rank: int, host: int | None) -> RankPlace:
    return next((place for place in places if _key(place) == (host, rank)), places[0])


def _ranks_on_hosts(places: Sequence[RankPlace]) -> str:
    return ", ".join(str(place.rank) if place.host is None else f"{place.rank} (host {place.host})" for place in places)


def _steps(steps: Sequence[int | None]) -> str:
    return ", ".join(str(step) for step in steps)
