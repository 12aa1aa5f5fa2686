"""A rank's thread folded to what the user needs: the line of their cell it is on, and the library call it waits in."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tpu_nb.wire.stacks import RankPlace
from tpu_nb.workers.doctor.analysis_log import Frame
from tpu_nb.workers.doctor.places import describe, first_user_frame, is_tpu_nb
from tpu_nb.workers.stalls.stack_dumps import ProcessStacks, ThreadStack

_PACKAGE_MARKERS = ("/site-packages/", "/dist-packages/")
MOST_CALLS = 4
"""Cell frames named in a rank's place: the outermost (the line the cell is on) and the innermost others."""
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
        describe(frame, sources, function=True) if frame is user or _in_cell(frame, sources) else library_frame_text(frame)
        for frame in frames
        if not is_tpu_nb(frame.filename)
    )
    return RankPlace(rank, pid, step, call_chain(frames, sources), waits_in, lines, others)


def call_chain(frames: Sequence[Frame], sources: Sources = None) -> str | None:
    """The cell lines a thread is on, outermost first, as a traceback names them but on one line:
    "In [3], line 5: sleeping(); line 3, in sleeping: time.sleep(3600)". Without a cell frame, the innermost of the
    user's own files; None when no frame is the user's."""
    # A process forked from the kernel keeps the kernel's frames from before the fork (the cell's `%%tpu_train`
    # line, IPython, tpu_nb's launch): the user's code runs below the outermost tpu_nb frame.
    first_tpu_nb = next((index for index, frame in enumerate(frames) if is_tpu_nb(frame.filename)), -1)
    cells = [frame for frame in frames[first_tpu_nb + 1 :] if _in_cell(frame, sources)]
    if not cells:
        user = user_frame(frames, sources)
        return None if user is None else describe(user, sources, function=True)
    shown: list[Frame | None] = list(cells) if len(cells) <= MOST_CALLS else [cells[0], None, *cells[1 - MOST_CALLS :]]
    parts = []
    previous: Frame | None = None
    for frame in shown:
        if frame is None:
            parts.append(f"… {len(cells) - MOST_CALLS} more")
            continue
        same_cell = previous is not None and previous.filename == frame.filename
        parts.append(describe(frame, sources, function=True, file=not same_cell))
        previous = frame
    return "; ".join(parts)


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
    where = call_chain(thread.frames, sources) or library_frame_text(thread.frames[-1])
    return f"thread {thread.thread:#x}: {where}"
