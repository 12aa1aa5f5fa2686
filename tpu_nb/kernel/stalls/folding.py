"""A rank's thread folded to what the user needs: the line of their cell it is on, and the library call it waits in."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tpu_nb.wire.stacks import RankPlace
from tpu_nb.workers.doctor.analysis_log import Frame
from tpu_nb.workers.doctor.places import describe, first_user_frame, is_tpu_nb
from tpu_nb.workers.stack_dumps import ProcessStacks, ThreadStack

_PACKAGE_MARKERS = ("/site-packages/", "/dist-packages/")
Sources = Mapping[str, Sequence[str]] | None  # lines of files this process does not have: a pod run's cells


def fold_process(
    stacks: ProcessStacks, ranks_by_thread: Mapping[int, int], steps: Mapping[int, int | None], sources: Sources = None
) -> list[RankPlace]:
    """The places of the ranks that run in this process (by their threads), with its other threads beside them."""
    own = [thread for thread in stacks.threads if thread.thread in ranks_by_thread]
    others = tuple(line for thread in stacks.threads if thread not in own and (line := _other_thread_line(thread, sources)) is not None)
    places = []
    for thread in own:
        rank = ranks_by_thread[thread.thread]
        places.append(place_of(rank, stacks.pid, steps.get(rank), thread.frames, others, sources))
    return places


def place_of(
    rank: int, pid: int, step: int | None, frames: Sequence[Frame], others: tuple[str, ...] = (), sources: Sources = None
) -> RankPlace:
    """Where one rank is, from its frames (outermost first)."""
    user = user_frame(frames, sources)
    innermost = frames[-1] if frames else None
    waits_in = None
    if innermost is not None and innermost is not user and not is_tpu_nb(innermost.filename):
        waits_in = library_frame_text(innermost)
    lines = tuple(
        describe(frame, sources) if frame is user or _in_cell(frame, sources) else library_frame_text(frame)
        for frame in frames
        if not is_tpu_nb(frame.filename)
    )
    return RankPlace(rank, pid, step, None if user is None else describe(user, sources), waits_in, lines, others)


def user_frame(frames: Sequence[Frame], sources: Sources = None) -> Frame | None:
    """The innermost frame in a notebook cell; else the innermost in the user's own files."""
    for frame in reversed(frames):
        if _in_cell(frame, sources):
            return frame
    return first_user_frame(reversed(frames))


def library_frame_text(frame: Frame) -> str:
    """ "torch_xla/core/xla_model.py, line 512, in all_reduce": a library's file named from its package."""
    filename = frame.filename
    for marker in _PACKAGE_MARKERS:
        if marker in filename:
            filename = filename.rsplit(marker, 1)[1]
            break
    else:
        filename = filename.rsplit("/lib/python", 1)[-1].split("/", 1)[-1] if "/lib/python" in filename else filename
    return f"{filename}, line {frame.line}, in {frame.function}"


def _in_cell(frame: Frame, sources: Sources) -> bool:
    return describe(frame, sources).startswith("In [")


def _other_thread_line(thread: ThreadStack, sources: Sources) -> str | None:
    """One line for a thread of the process that is not a rank's: none for tpu_nb's own (heartbeat, output) or idle ones."""
    if not thread.frames or any(is_tpu_nb(frame.filename) for frame in thread.frames):
        return None
    user = user_frame(thread.frames, sources)
    innermost = thread.frames[-1]
    where = describe(user, sources) if user is not None else library_frame_text(innermost)
    return f"thread {thread.thread:#x}: {where}"
