"""How far a rate can be trusted: the steps and the seconds it was measured over."""

from __future__ import annotations

from dataclasses import dataclass

SURE_STEPS = 20
"""Steps measured after warm-up for a rate to be stated as it stands."""


@dataclass(frozen=True, slots=True)
class Span:
    """The steps after `first_step` up to `last_step`, taking `seconds`."""

    first_step: int
    last_step: int
    seconds: float
    includes_warmup: bool  # measured from before warm-up ended: the first steps' one-off work is in it

    @property
    def steps(self) -> int:
        return self.last_step - self.first_step

    @property
    def rough(self) -> bool:
        return self.includes_warmup or self.steps < SURE_STEPS

    @property
    def text(self) -> str:
        """E.g. "measured over 55 steps (6–60) in 1.8 s", with how rough the figure is when it is."""
        measured = f"measured over {self.steps} steps ({self.first_step + 1}–{self.last_step}) in {self.seconds:.1f} s"
        if self.includes_warmup:
            return f"{measured}, warm-up included: a short run, so the figure is rough"
        if self.rough:
            return f"{measured}: few steps, so the figure is rough"
        return measured
