"""Which input changed shape between steps: from the data loaders' batches or the user's `.to(device)` calls."""

from __future__ import annotations

from dataclasses import dataclass

from tpu_nb.workers.doctor.analysis_log import Frame
from tpu_nb.workers.doctor.input_watch import Shapes
from tpu_nb.workers.doctor.transfers import Shape, TransferSite

MOST_SHAPES_NAMED = 6


@dataclass(frozen=True, slots=True)
class VaryingInput:
    """An input seen in several shapes (distinct, in the order seen), and the user's call that moved it to the device, if seen."""

    shapes: tuple[Shape, ...]
    site: Frame | None

    @property
    def dimensions(self) -> frozenset[str]:
        """Which of its dimensions change between its shapes: "batch" (the first), "length" (any other)."""
        changed = set()
        if len({shape[:1] for shape in self.shapes}) > 1:
            changed.add("batch")
        if len({shape[1:] for shape in self.shapes}) > 1:
            changed.add("length")
        return frozenset(changed)

    @property
    def named(self) -> str:
        """ "(8, 64), (9, 64), (10, 64)", the first few when there are many."""
        named = ", ".join(str(shape) for shape in self.shapes[:MOST_SHAPES_NAMED])
        more = len(self.shapes) - MOST_SHAPES_NAMED
        return f"{named} and {more} more" if more > 0 else named


def varying_input(batches: tuple[Shapes, ...], transfers: tuple[TransferSite, ...]) -> VaryingInput | None:
    """The input seen in the most shapes (at least two); a `.to(device)` call wins a tie, as it names a line."""
    candidates = [VaryingInput(shapes, frame) for frame, shapes in transfers]
    candidates.append(VaryingInput(_varying_tensor(batches), None))
    widest = max(candidates, key=lambda candidate: len(candidate.shapes))
    return widest if len(widest.shapes) >= 2 else None


def _varying_tensor(batches: tuple[Shapes, ...]) -> tuple[Shape, ...]:
    """The distinct shapes of the first tensor in a batch whose shape changed between batches; () if none did."""
    for position in range(min((len(batch) for batch in batches), default=0)):
        shapes = dict.fromkeys(batch[position] for batch in batches)
        if len(shapes) > 1:
            return tuple(shapes)
    return ()
