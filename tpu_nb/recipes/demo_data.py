"""The built-in "demo" dataset: English movie-review sentences labelled negative/positive.

Generated from word lists, deterministic for a seed, so it works offline.
Negations ("was not boring"), contrasts ("..., but ...") and intensifiers
mean no single word gives the label away: a bag of words gets part of the
way, a pretrained model much further. Its `text` column also serves masked
and causal language modelling.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from datasets import DatasetDict

LABELS = ("negative", "positive")
NEGATIVE, POSITIVE = 0, 1
TRAIN_ROWS = 4000
VALIDATION_ROWS = 500
SEED = 1234

_SUBJECTS = (
    "the plot", "the acting", "the soundtrack", "the ending", "the script", "the dialogue", "the camera work",
    "the pacing", "the story", "the direction", "the cast", "the humour", "the film", "the movie", "the sequel",
    "the lead performance", "the visual style", "the first half", "the final scene", "the villain",
)  # fmt: skip
_ADJECTIVES = {
    POSITIVE: (
        "good", "great", "wonderful", "brilliant", "charming", "moving", "delightful", "gripping", "clever",
        "beautiful", "superb", "memorable", "excellent", "touching", "sharp", "fresh", "stunning", "funny",
    ),
    NEGATIVE: (
        "bad", "boring", "dull", "awful", "terrible", "clumsy", "weak", "predictable", "tedious", "lazy",
        "bland", "forgettable", "painful", "messy", "flat", "shallow", "dreadful", "poor",
    ),
}  # fmt: skip
_VERBS = {
    POSITIVE: ("loved", "enjoyed", "liked", "admired", "adored", "appreciated"),
    NEGATIVE: ("hated", "disliked", "regretted", "could not stand", "was bored by", "was annoyed by"),
}
_INTENSIFIERS = ("very", "really", "truly", "incredibly", "remarkably", "utterly", "quite", "surprisingly", "extremely", "rather", "so")
_NEGATED_COPULAS = ("was not", "was never", "was hardly", "wasn't")
_OPENERS = ("", "", "", "honestly,", "overall,", "to be fair,", "in the end,", "after two hours,", "frankly,", "all in all,")
_NOUNS = ("film", "movie", "story", "ride", "experience", "evening")


def demo_examples(count: int, seed: int = SEED) -> list[tuple[str, int]]:
    """`count` (sentence, label) pairs, the same for the same seed; labels are balanced on average."""
    rng = random.Random(seed)
    return [_sentence(rng, rng.choice((NEGATIVE, POSITIVE))) for _ in range(count)]


def demo_dataset(seed: int = SEED) -> DatasetDict:
    """ "train" (TRAIN_ROWS) and "validation" (VALIDATION_ROWS) splits with `text` and a ClassLabel `label`."""
    from datasets import ClassLabel, Dataset, DatasetDict, Features, Value

    features = Features({"text": Value("string"), "label": ClassLabel(names=list(LABELS))})

    def split(rows: int, split_seed: int) -> Dataset:
        texts, labels = zip(*demo_examples(rows, split_seed), strict=True)
        return Dataset.from_dict({"text": list(texts), "label": list(labels)}, features=features)

    # Different seeds per split: validation sentences are new draws, not a slice of training.
    return DatasetDict(train=split(TRAIN_ROWS, seed), validation=split(VALIDATION_ROWS, seed + 1))


def _sentence(rng: random.Random, label: int) -> tuple[str, int]:
    form = rng.random()
    if form < 0.5:
        text = _clause(rng, label)
        if text.startswith("what "):
            return text + "!", label
    elif form < 0.75:
        text = f"{_clause(rng, 1 - label)}, but {_clause(rng, label)}"  # the part after "but" decides
    elif form < 0.9:
        text = f"{_clause(rng, label)} and {_clause(rng, label)}"
    else:
        text = f"although {_clause(rng, 1 - label)}, {_clause(rng, label)}"
    opener = rng.choice(_OPENERS)
    return (f"{opener} {text}" if opener else text) + ".", label


def _clause(rng: random.Random, label: int) -> str:
    clause: Callable[[random.Random, int], str] = rng.choice(_CLAUSES)
    return clause(rng, label)


def _intensified(rng: random.Random, adjective: str) -> str:
    return f"{rng.choice(_INTENSIFIERS)} {adjective}" if rng.random() < 0.4 else adjective


def _copula(rng: random.Random, label: int) -> str:
    return f"{rng.choice(_SUBJECTS)} was {_intensified(rng, rng.choice(_ADJECTIVES[label]))}"


def _negated_copula(rng: random.Random, label: int) -> str:
    # "not boring" is positive: the adjective has the opposite sign.
    return f"{rng.choice(_SUBJECTS)} {rng.choice(_NEGATED_COPULAS)} {_intensified(rng, rng.choice(_ADJECTIVES[1 - label]))}"


def _nothing_about(rng: random.Random, label: int) -> str:
    return f"nothing about {rng.choice(_SUBJECTS)} was {rng.choice(_ADJECTIVES[1 - label])}"


def _verb(rng: random.Random, label: int) -> str:
    return f"i {rng.choice(_VERBS[label])} {rng.choice(_SUBJECTS)}"


def _exclamation(rng: random.Random, label: int) -> str:
    phrase = f"{_intensified(rng, rng.choice(_ADJECTIVES[label]))} {rng.choice(_NOUNS)}"
    return f"what {'an' if phrase[0] in 'aeiou' else 'a'} {phrase}"


def _negated_verb(rng: random.Random, label: int) -> str:
    if label == POSITIVE:
        return _negated_copula(rng, label)
    return f"i did not {rng.choice(('like', 'enjoy', 'love', 'care for'))} {rng.choice(_SUBJECTS)}"


_CLAUSES = (_copula, _copula, _negated_copula, _nothing_about, _verb, _exclamation, _negated_verb)
