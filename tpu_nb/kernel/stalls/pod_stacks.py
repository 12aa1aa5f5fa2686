"""A pod run's stacks: asked of every host through its run directory, answered in the hosts' lines, folded here.

On a stall a host's watchdog reports, on a host gone silent, or when the
user asks, the notebook writes a numbered stacks request on every host
(`PodBackend.deliver`, through `ask`); each host's `train.py` signals its
worker processes and sends what they wrote as `StackAnswer`s. A request is
complete once every worker process the hosts started has answered, or
after `ASK_SECONDS`; then it becomes one `StackReport` for the slice.
What is known of the hosts' ranks, and when each host was last heard, is a
`StallRecord` with a host for each source.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tpu_nb.basics.units import format_duration
from tpu_nb.kernel.stalls.folding import fold_process
from tpu_nb.kernel.stalls.record import StallRecord, of_ranks
from tpu_nb.kernel.stalls.verdicts import judge
from tpu_nb.kernel.stalls.watch import stall_reason
from tpu_nb.wire.events import Stalled
from tpu_nb.wire.host_lines import HostEvent
from tpu_nb.wire.run_directory import Cell
from tpu_nb.wire.stacks import RankPlace, StackAnswer, StackReport, WatchdogSetting
from tpu_nb.workers.stalls.stack_dumps import Dump, stacks_of

ASK_SECONDS = 45.0
"""How long the hosts may take to answer: the request's ssh (or kubectl exec) to every host, then each host's own asking."""

Process = tuple[int, int]  # (host, pid)


@dataclass
class StacksRequest:
    """One request to every host, and what has come back."""

    number: int
    reason: str
    stall: tuple[int, Stalled] | None  # (host, what its watchdog said)
    shown: bool  # its report goes to the dashboard (a stall's, a silence's); the user's own goes to them
    asked_at: float
    expected: frozenset[Process]
    pieces: dict[Process, list[str]] = field(default_factory=dict)
    answers: dict[Process, Dump] = field(default_factory=dict)
    not_delivered: str | None = None  # the request did not reach every host, and why
    report: StackReport | None = None
    reported: threading.Event = field(default_factory=threading.Event)


class PodStacks:
    """Per pod run: where every host's ranks are, on a stall, a silence, or on demand."""

    def __init__(
        self,
        setting: WatchdogSetting | None,
        ask: Callable[[int], str | None],
        cells: Sequence[Cell] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`ask(number)` delivers request `number` to every host (blocking); it returns why it did not reach them all, or None.

        `cells`: the run's cells, whose lines the hosts' stacks point at.
        """
        self._sources = {cell.name: cell.lines_as_written() for cell in cells}
        self._ask = ask
        self._clock = clock
        self._lock = threading.Lock()  # the requests and their answers
        # Every host is a source, heard on any line it sends; its ranks and processes are keyed (host, rank) and (host, pid).
        self._record: StallRecord[int, tuple[int, int]] = StallRecord(setting, lambda process: process[0], clock)
        self._requests: dict[int, StacksRequest] = {}

    def on_event(self, host: int, event: HostEvent) -> None:
        """What a host sent (before its rank becomes the host's row)."""
        self._record.heard(host)
        self._record.follow(event, lambda number: (host, number))
        if isinstance(event, StackAnswer):
            with self._lock:
                self._take_answer(host, event)

    def on_stall(self, host: int, stall: Stalled) -> StacksRequest | None:
        """Ask every host, unless a request went out within the threshold (the same stall, seen by another rank)."""
        if not self._record.new_stall(stall.threshold):
            return None
        return self.ask(f"on host {host}, {stall_reason(stall)}", (host, stall), shown=True)

    def on_silence(self) -> StacksRequest | None:
        """Ask every host when one has sent nothing for longer than the threshold allows (once per silence)."""
        silence = self._record.silent()
        if silence is None:
            return None
        hosts = ", ".join(map(str, sorted(silence.sources)))
        return self.ask(
            f"host {hosts} sent nothing for over {format_duration(silence.seconds)}: its workers' interpreters are held (in C++, or in the OS)",
            shown=True,
        )

    def ask(self, reason: str, stall: tuple[int, Stalled] | None = None, shown: bool = False) -> StacksRequest:
        """Send a new request to every host (from a helper thread: a command to every host takes seconds)."""
        running = frozenset(self._record.running())
        with self._lock:
            request = StacksRequest(len(self._requests) + 1, reason, stall, shown, self._clock(), running)
            self._requests[request.number] = request
        threading.Thread(target=self._deliver, args=(request,), name="tpu_nb-pod-stacks", daemon=True).start()
        return request

    def ready(self, request: StacksRequest) -> bool:
        """Every process answered, or the time for answers is up."""
        with self._lock:
            return request.expected <= set(request.answers) or self._clock() - request.asked_at > ASK_SECONDS

    def due(self) -> list[StackReport]:
        """The reports of the stall and silence requests that have just become ready (the user's own are returned to them)."""
        due = [request for request in list(self._requests.values()) if request.report is None and self.ready(request)]
        return [report for request in due if (report := self.report(request)) is not None and request.shown]

    def report(self, request: StacksRequest) -> StackReport:
        """The request's report from what has come back (made once)."""
        with self._lock:
            if request.report is None:
                request.report = self._folded(request)
                request.reported.set()
            return request.report

    def _deliver(self, request: StacksRequest) -> None:
        problem = self._ask(request.number)
        if problem is not None:
            with self._lock:
                request.not_delivered = problem

    def _take_answer(self, host: int, answer: StackAnswer) -> None:
        request = self._requests.get(answer.request)
        if request is None or request.report is not None:
            return  # another run's request, or one reported already
        process = (host, answer.pid)
        request.pieces.setdefault(process, []).append(answer.text)
        if answer.last:
            request.answers[process] = Dump(answer.pid, "".join(request.pieces.pop(process)), answer.problem)

    def _folded(self, request: StacksRequest) -> StackReport:
        places: list[RankPlace] = []
        unanswered = []
        steps_heard = self._record.steps()
        for (host, pid), dump in sorted(request.answers.items()):
            ranks = self._rank_numbers((host, pid))
            steps = {rank: step for (on, rank), step in steps_heard.items() if on == host}
            places += [dataclasses.replace(place, host=host) for place in fold_process(stacks_of(dump), ranks, steps, self._sources)]
            if dump.problem is not None:
                unanswered.append(f"pid {pid} on host {host}{of_ranks(ranks)}: {dump.problem}")
        for host, pid in sorted(request.expected - set(request.answers)):
            unanswered.append(
                f"pid {pid} on host {host}{of_ranks(self._rank_numbers((host, pid)))}: no answer within {format_duration(ASK_SECONDS)} "
                f"(its train.py may be held too: ssh to host {host} and send SIGUSR2 to the process, kill -USR2 {pid}; it writes its "
                f"stacks to stacks-{pid}.txt in the run's results directory there)"
            )
        if request.not_delivered is not None:
            unanswered.append(f"the request did not reach every host ({request.not_delivered})")
        places.sort(key=lambda place: (place.rank, place.host or 0))
        stall = request.stall[1] if request.stall is not None else None
        verdict = judge(places, stall, host=request.stall[0] if request.stall is not None else None)
        return StackReport(request.reason, tuple(places), verdict.text, verdict.fix, tuple(unanswered))

    def _rank_numbers(self, process: Process) -> dict[int, int]:
        """A host's process's ranks by thread id, as the host numbers them (its stacks are folded per host)."""
        return {thread: rank for thread, (_, rank) in self._record.ranks_in(process).items()}
