"""Whether the Hugging Face Hub can be reached, found out cheaply.

Without HF_HUB_OFFLINE=1, transformers and datasets retry an unreachable Hub
for about 23 seconds per file before giving up; a picker that validates on
every change cannot wait that long. A socket connection answers in at most
`PROBE_SECONDS`.
"""

from __future__ import annotations

import socket
import time
from urllib.parse import urlparse

PROBE_SECONDS = 2.0
REMEMBER_SECONDS = 60.0
"""How long a probe's answer is reused: a firewall that drops packets makes every probe take PROBE_SECONDS."""

_last_probe: tuple[float, str, str | None] | None = None  # (when, endpoint, why unreachable)


def offline_mode() -> bool:
    """True when HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) was set before huggingface_hub was imported."""
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def hub_unreachable_reason() -> str | None:
    """None when the Hub can be reached; otherwise why not, in words for a message."""
    global _last_probe
    if offline_mode():
        return "HF_HUB_OFFLINE=1 is set"
    from huggingface_hub import constants

    endpoint = constants.ENDPOINT
    now = time.monotonic()
    if _last_probe is not None and _last_probe[1] == endpoint and now - _last_probe[0] < REMEMBER_SECONDS:
        return _last_probe[2]
    reason = _probe(endpoint)
    _last_probe = (now, endpoint, reason)
    return reason


def _probe(endpoint: str) -> str | None:
    parsed = urlparse(endpoint)
    host = parsed.hostname or endpoint
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=PROBE_SECONDS).close()
    except OSError as error:
        return f"no connection to {host}: {error.strerror or error}"
    return None
