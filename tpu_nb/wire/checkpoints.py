"""A run's checkpoints on disk (or gs://): the format workers write and the kernel lists, in both directions.

    DIR/checkpoint-500/            one checkpoint, named by its step (a Trainer names its own so too)
        state.pt                     a hand-written loop's tracked state: model, optimizer, scheduler, RNG, step
        (a Trainer's own files)      model.safetensors (or adapter_model.safetensors), optimizer.pt, trainer_state.json, ...
        tpu_nb.json                  written last, once the checkpoint was read back and checked: what `CheckpointRecord` holds

A checkpoint without `tpu_nb.json`, or whose record says it failed its
check, never counts: resuming takes the newest verified one. A loop's
checkpoint is written as `checkpoint-500.partial/` and renamed once
verified, so a cut write never even looks like one. DIR is a local path
(a Drive mount, /kaggle/working) or any fsspec URL (gs://BUCKET/PATH).
"""

from __future__ import annotations

import datetime
import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

RECORD = "tpu_nb.json"
LOOP_STATE = "state.pt"
PREFIX = "checkpoint-"
PARTIAL = ".partial"
_NAME = re.compile(rf"^{PREFIX}(\d+)$")


class CheckpointError(ValueError):
    """A checkpoint setting or directory that cannot be used as asked; the message says what to change."""


@dataclass(frozen=True, slots=True)
class Every:
    """How often a run saves: every `steps` steps or every `seconds` seconds (and always when it stops)."""

    steps: int | None = None
    seconds: float | None = None

    @classmethod
    def parse(cls, text: str) -> Every:
        """ "500steps", "500 steps", "15m", "90s", "2h" or "1h30m"."""
        cleaned = text.strip().lower().replace(" ", "")
        steps = re.fullmatch(r"(\d+)steps?", cleaned)
        if steps:
            if int(steps[1]) < 1:
                raise CheckpointError(f"--every {text}: give at least 1 step.")
            return cls(steps=int(steps[1]))
        return cls(seconds=parse_duration(text, "--every"))

    def __str__(self) -> str:
        return f"{self.steps} steps" if self.steps is not None else f"{format_duration(self.seconds or 0)}"


@dataclass(frozen=True, slots=True)
class CheckpointPlan:
    """What a run's workers do about checkpoints (from `--checkpoint`, `--every`, `--keep`, `--resume`)."""

    directory: str
    every: Every
    keep: int
    resume_from: str | None = None  # a checkpoint directory to start from (the newest verified one, chosen in the kernel)
    passed_over: tuple[str, ...] = ()  # newer checkpoints a resume did not trust, each with why (said on the dashboard)
    budget: int | None = None  # bytes all checkpoints may take: older verified ones go first (never the newest)


@dataclass(frozen=True, slots=True)
class CheckpointRecord:
    """`tpu_nb.json`: what a checkpoint holds and what its check found."""

    step: int
    kind: str  # "loop" (tpu_nb.checkpoint.track) or "trainer"
    saved_at: str  # ISO time, UTC
    seconds: float  # from the step's end to the checkpoint written and checked
    stall_seconds: float  # how long the training step waited (the device-to-host copy)
    size: int  # bytes
    verified: bool
    problem: str | None  # why it failed its check
    loss: float | None
    history: list[tuple[int | None, dict[str, float]]]  # the metrics logged up to this step: the loss curve, continued on resume
    parameters: dict[str, list[int]]  # the model's parameter names and shapes: a resume with another model is refused
    world: dict[str, Any]  # world size and mesh of the run that saved it
    start_checksums: dict[str, str]  # each starting weight's checksum: a checkpoint that saved them again is caught
    files: dict[str, int]  # each file's size: a file cut or changed since is found before a resume trusts it
    # Each tensor file's checksums (by tensor in a safetensors file, by stored record in a torch one): a file changed with
    # its size intact is found when a resume reads it back. Empty in records written before they were kept.
    checksums: dict[str, dict[str, str]] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> CheckpointRecord:
        fields = json.loads(text)
        fields["history"] = [(step, dict(metrics)) for step, metrics in fields["history"]]
        return cls(**fields)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One checkpoint found in a directory."""

    path: str  # its directory (local path or URL)
    step: int
    record: CheckpointRecord | None  # None: no tpu_nb.json (cut short, or not written by tpu_nb)
    damage: str | None = None  # how its files differ from what its record says was written

    @property
    def verified(self) -> bool:
        return self.record is not None and self.record.verified and self.damage is None

    @property
    def state(self) -> str:
        if self.record is None:
            return "not verified (no tpu_nb.json: cut short, or not written by tpu_nb)"
        if not self.record.verified:
            return f"failed its check: {self.record.problem}"
        return "verified" if self.damage is None else f"damaged since it was saved: {self.damage}"


def checkpoint_name(step: int) -> str:
    return f"{PREFIX}{step}"


def list_checkpoints(directory: str) -> list[Checkpoint]:
    """Every checkpoint in `directory` (local or URL), by step; a missing directory has none."""
    import fsspec

    filesystem, root = fsspec.core.url_to_fs(directory)
    if not filesystem.exists(root):
        return []
    found = []
    for entry in filesystem.ls(root, detail=True):
        name = entry["name"].rstrip("/").rsplit("/", 1)[-1]
        match = _NAME.match(name)
        if entry["type"] != "directory" or match is None:
            continue
        sizes = {
            file["name"].rstrip("/").rsplit("/", 1)[-1]: int(file.get("size") or 0)
            for file in filesystem.ls(entry["name"], detail=True)
            if file["type"] == "file"
        }
        record = None
        if RECORD in sizes:
            try:
                with filesystem.open(f"{entry['name'].rstrip('/')}/{RECORD}", "r") as file:
                    record = CheckpointRecord.from_json(file.read())
            except (ValueError, TypeError, KeyError):
                record = None  # unreadable: as good as none
        damage = None if record is None else file_damage(record.files, sizes)
        found.append(Checkpoint(_joined(directory, name), int(match[1]), record, damage))
    return sorted(found, key=lambda checkpoint: checkpoint.step)


def file_damage(written: dict[str, int], found: dict[str, int]) -> str | None:
    """How the files found differ from those written (a file missing, or cut or grown), or None."""
    for name, size in sorted(written.items()):
        if name not in found:
            return f"{name} is missing"
        if found[name] != size:
            return f"{name} is {found[name]:,} bytes, was {size:,} when saved"
    return None


def newest_verified(directory: str) -> Checkpoint | None:
    verified = [checkpoint for checkpoint in list_checkpoints(directory) if checkpoint.verified]
    return verified[-1] if verified else None


def parse_duration(text: str, option: str) -> float:
    """Seconds in "15m", "90s", "2h", "8h30m", "1h30m15s" or a plain number of seconds."""
    cleaned = text.strip().lower().replace(" ", "")
    if re.fullmatch(r"\d+(\.\d+)?", cleaned):
        seconds = float(cleaned)
    else:
        parts = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m(?:in)?)?(?:(\d+)s)?", cleaned)
        if not cleaned or parts is None or not any(parts.groups()):
            raise CheckpointError(f"{option} {text}: give a duration such as 90s, 15m, 2h or 8h30m.")
        hours, minutes, seconds_part = (int(part or 0) for part in parts.groups())
        seconds = hours * 3600.0 + minutes * 60.0 + seconds_part
    if seconds <= 0:
        raise CheckpointError(f"{option} {text}: give a duration longer than zero.")
    return seconds


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_size(text: str, option: str) -> int:
    """Bytes in "15GB", "500MB", "2GiB" or a plain number of bytes."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([a-z]*)", text.strip().lower().replace(" ", ""))
    if match is None or match[2] not in _UNITS or float(match[1]) <= 0:
        raise CheckpointError(f"{option} {text}: give a size such as 500MB or 15GB.")
    return int(float(match[1]) * _UNITS[match[2]])


LONGEST_DEADLINE = 366 * 24 * 3600.0
"""A deadline further away than this is a typo (99999999h), not a plan."""

_CLOCK_TIME = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}))?\s*(z|utc|gmt|[+-]\d{2}:?\d{2})?", re.IGNORECASE)
_DEADLINE_HELP = "give a duration such as 8h30m, or a clock time such as 21:00 (this machine's zone) or 21:00+02:00"


def parse_deadline(text: str, now: datetime.datetime) -> datetime.datetime:
    """When `--deadline` falls, as an aware time: a duration from `now` ("8h30m"), or a clock time, today or else
    tomorrow, in this machine's zone ("21:00": `now`'s zone; UTC on Colab and Kaggle) or the one it names
    ("21:00+02:00", "21:00 UTC")."""
    now = now if now.tzinfo is not None else now.astimezone()
    clock = _CLOCK_TIME.fullmatch(text.strip())
    if clock is None:
        try:
            seconds = parse_duration(text, "--deadline")
        except CheckpointError:
            raise CheckpointError(f"--deadline {text}: {_DEADLINE_HELP}.") from None
        if seconds > LONGEST_DEADLINE:
            raise CheckpointError(f"--deadline {text}: that is more than a year away; {_DEADLINE_HELP}.")
        return now + datetime.timedelta(seconds=seconds)
    hour, minute, second = int(clock[1]), int(clock[2]), int(clock[3] or 0)
    zone = _zone(clock[4]) if clock[4] else now.tzinfo
    if hour > 23 or minute > 59 or second > 59 or zone is None:
        raise CheckpointError(f"--deadline {text}: {_DEADLINE_HELP}.")
    at = now.astimezone(zone).replace(hour=hour, minute=minute, second=second, microsecond=0)
    return at if at > now else at + datetime.timedelta(days=1)


def _zone(text: str) -> datetime.tzinfo | None:
    """ "Z", "UTC", "GMT", "+02:00" or "-0530" as a zone (None for an offset no zone has)."""
    if text.upper() in ("Z", "UTC", "GMT"):
        return datetime.timezone.utc
    sign = -1 if text[0] == "-" else 1
    hours, minutes = int(text[1:3]), int(text[-2:])
    if hours > 14 or minutes > 59:
        return None
    return datetime.timezone(sign * datetime.timedelta(hours=hours, minutes=minutes))


def format_duration(seconds: float) -> str:
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return "".join(f"{value}{unit}" for value, unit in ((hours, "h"), (minutes, "m"), (seconds, "s")) if value) or "0s"


def _joined(directory: str, name: str) -> str:
    return f"{directory.rstrip('/')}/{name}"
