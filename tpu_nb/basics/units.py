"""Durations and sizes as the user types them in options, and as tpu_nb writes them.

`parse_duration` reads "90s", "15m", "8h30m" (`--every`, `--watchdog`, and
`--deadline`'s durations), `parse_size` reads "500MB", "15GB", "2GiB"
(`--budget`); each raises `UnitError` with the option, the text and what to
give instead. `format_duration` and `format_bytes` are how every message and
the dashboard write them.
"""

from __future__ import annotations

import re


class UnitError(ValueError):
    """A duration, size or deadline that cannot be read; the message names the option and says what to give."""


def parse_duration(text: str, option: str) -> float:
    """Seconds in "15m", "90s", "2h", "8h30m", "1h30m15s" or a plain number of seconds."""
    cleaned = text.strip().lower().replace(" ", "")
    if re.fullmatch(r"\d+(\.\d+)?", cleaned):
        seconds = float(cleaned)
    else:
        parts = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m(?:in)?)?(?:(\d+)s)?", cleaned)
        if not cleaned or parts is None or not any(parts.groups()):
            raise UnitError(f"{option} {text}: give a duration such as 90s, 15m, 2h or 8h30m.")
        hours, minutes, seconds_part = (int(part or 0) for part in parts.groups())
        seconds = hours * 3600.0 + minutes * 60.0 + seconds_part
    if seconds <= 0:
        raise UnitError(f"{option} {text}: give a duration longer than zero.")
    return seconds


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_size(text: str, option: str) -> int:
    """Bytes in "15GB", "500MB", "2GiB" or a plain number of bytes."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([a-z]*)", text.strip().lower().replace(" ", ""))
    if match is None or match[2] not in _UNITS or float(match[1]) <= 0:
        raise UnitError(f"{option} {text}: give a size such as 500MB or 15GB.")
    return int(float(match[1]) * _UNITS[match[2]])


def format_duration(seconds: float) -> str:
    """0.5s, 8.5s, 42s, 2m02s, 1h05m: a tenth of a second under 10 s (a short step or wait is not "0s"), whole
    seconds under an hour, whole minutes after."""
    if seconds < 10:
        return f"{seconds:.1f}".removesuffix(".0") + "s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


_BINARY_UNITS = ("KiB", "MiB", "GiB")


def format_bytes(size: float) -> str:
    """512 bytes, 1.5 KiB, 320.0 MiB, 16.0 GiB: binary units, as device memory, TPU HBM, a tmpfs and `df -h` count,
    and as most of tpu_nb's text already said them (device memory, the chips' HBM, the memory estimate); sizes the
    user types (`parse_size`) may be in either."""
    if size < 1024:
        return f"{size:.0f} bytes"
    for unit in _BINARY_UNITS:
        size /= 1024
        if round(size, 1) < 1024 or unit == _BINARY_UNITS[-1]:
            break
    return f"{size:.1f} {unit}"
