"""hub_unreachable_reason(): a quick socket probe instead of ~23 s of retries, remembered for a while."""

from __future__ import annotations

import socket

import pytest

from tpu_nb.recipes import hub


def test_offline_mode_answers_without_probing(monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub, "_probe", lambda endpoint: pytest.fail("probed although offline"))
    assert hub.hub_unreachable_reason() == "HF_HUB_OFFLINE=1 is set"


def test_a_refused_connection_is_reported_and_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    with socket.socket() as listener:  # a port nobody listens on: bound, never listening
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
        monkeypatch.setattr(hub, "_last_probe", None)
        reason = hub.hub_unreachable_reason()
    assert reason is not None and reason.startswith("no connection to 127.0.0.1: Connection refused")
    monkeypatch.setattr(hub, "_probe", lambda endpoint: pytest.fail("probed again within REMEMBER_SECONDS"))
    assert hub.hub_unreachable_reason() == reason


def test_a_listening_endpoint_is_reachable(monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{listener.getsockname()[1]}")
        monkeypatch.setattr(hub, "_last_probe", None)
        assert hub.hub_unreachable_reason() is None
