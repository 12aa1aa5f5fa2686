"""Each TPU device's duty cycle and HBM, read through tpu-info from a stand-in of libtpu's metrics service; never an exception."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import pytest

pytest.importorskip("tpu_info.proto.tpu_metric_service_pb2_grpc", reason="tpu-info (the test extra) serves the stand-in's protocol")

import grpc
from support.processes import wait_until
from tpu_info import device as tpu_info_device
from tpu_info import metrics as tpu_info_metrics
from tpu_info.proto import tpu_metric_service_pb2 as messages
from tpu_info.proto import tpu_metric_service_pb2_grpc as services

from tpu_nb.kernel.tpu import chip_usage
from tpu_nb.kernel.tpu.chip_usage import (
    ChipReadings,
    ChipUsagePoller,
    DeviceUsage,
    metrics_addresses,
    rank_chip_text,
    read_chip_usage,
    silent_rank_hint,
    tpu_info_installed,
    usage_for_rank,
    usage_text,
)

GIB = 2**30
Names = tpu_info_metrics.MetricName
DUTY_CYCLES = (97.0, 3.0, 50.0, 0.0)
"""Four chips: one busy, one idle, one in between, one doing nothing."""


def v5e_figures() -> dict[str, list[messages.Gauge]]:
    """Four v5e chips (a device each): 16 GiB each, 1-4 GiB in use."""
    return {
        Names.TOTAL_MEMORY.value: [messages.Gauge(as_int=16 * GIB)] * 4,
        Names.MEMORY_USAGE.value: [messages.Gauge(as_int=(chip + 1) * GIB) for chip in range(4)],
        Names.DUTY_CYCLE_PCT.value: [messages.Gauge(as_double=duty) for duty in DUTY_CYCLES],
    }


def v3_figures() -> dict[str, list[messages.Gauge]]:
    """Four v3 chips of two devices (cores) each: memory per device, the duty cycle per chip."""
    return {
        Names.TOTAL_MEMORY.value: [messages.Gauge(as_int=16 * GIB)] * 8,
        Names.MEMORY_USAGE.value: [messages.Gauge(as_int=device * GIB // 2) for device in range(8)],
        Names.DUTY_CYCLE_PCT.value: [messages.Gauge(as_double=duty) for duty in DUTY_CYCLES],
    }


class LibtpuStandIn(services.RuntimeMetricServiceServicer):  # type: ignore[misc]
    """libtpu's runtime metrics service with fixed figures, on a free local port, as tpu-info's own protocol defines it."""

    def __init__(self, figures: dict[str, list[messages.Gauge]], port: int = 0) -> None:
        self.figures = figures
        self.stalled = False
        self.released = threading.Event()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        services.add_RuntimeMetricServiceServicer_to_server(self, self.server)
        self.port = self.server.add_secure_port(f"localhost:{port}", grpc.local_server_credentials(grpc.LocalConnectionType.LOCAL_TCP))
        self.address = f"localhost:{self.port}"
        self.server.start()

    def GetRuntimeMetric(self, request: messages.MetricRequest, context: Any) -> messages.MetricResponse:
        if self.stalled:  # a service that accepts the call and never answers
            self.released.wait()
        if request.metric_name not in self.figures:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no metric {request.metric_name}")
        metrics = [
            messages.Metric(attribute=messages.Attribute(key="device-id", value=messages.AttrValue(int_attr=index)), gauge=gauge)
            for index, gauge in enumerate(self.figures[request.metric_name])
        ]
        return messages.MetricResponse(metric=messages.TPUMetric(name=request.metric_name, metrics=metrics))

    def close(self) -> None:
        self.released.set()
        self.server.stop(None).wait()


@pytest.fixture
def libtpu() -> Iterator[LibtpuStandIn]:
    stand_in = LibtpuStandIn(v5e_figures())
    yield stand_in
    stand_in.close()


@pytest.fixture
def without_tpu_info(monkeypatch: pytest.MonkeyPatch) -> None:
    """tpu-info as if it were not installed: None in sys.modules makes every import of it fail."""
    for name in ["tpu_info", *(name for name in sys.modules if name.startswith("tpu_info."))]:
        monkeypatch.setitem(sys.modules, name, None)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_four_v5e_chips_are_read_through_tpu_info(libtpu: LibtpuStandIn) -> None:
    readings = read_chip_usage(libtpu.address, devices_per_chip=1)
    assert readings == ChipReadings(
        devices=tuple(
            DeviceUsage(device=chip, chip=chip, duty_cycle_percent=duty, hbm_used=(chip + 1) * GIB, hbm_total=16 * GIB)
            for chip, duty in enumerate(DUTY_CYCLES)
        )
    )


def test_on_v2_and_v3_the_two_devices_of_a_chip_share_its_duty_cycle() -> None:
    stand_in = LibtpuStandIn(v3_figures())
    try:
        readings = read_chip_usage(stand_in.address, devices_per_chip=2)
    finally:
        stand_in.close()
    assert [(usage.device, usage.chip, usage.duty_cycle_percent) for usage in readings.devices] == [
        (device, device // 2, DUTY_CYCLES[device // 2]) for device in range(8)
    ]
    assert [usage.hbm_used for usage in readings.devices] == [device * GIB // 2 for device in range(8)]


@pytest.mark.parametrize(("chip", "figures"), [("V5E", v5e_figures), ("V3", v3_figures)])
def test_the_figures_are_those_tpu_infos_own_get_chip_usage_reads(chip: str, figures: Any) -> None:
    stand_in = LibtpuStandIn(figures())
    chip_type = tpu_info_device.TpuChip[chip]
    try:
        theirs = tpu_info_metrics.get_chip_usage(chip_type, addr=stand_in.address)
        ours = read_chip_usage(stand_in.address, devices_per_chip=chip_type.value.devices_per_chip)
    finally:
        stand_in.close()
    assert [(usage.device, usage.hbm_used, usage.hbm_total, usage.duty_cycle_percent) for usage in ours.devices] == [
        (usage.device_id, usage.memory_usage, usage.total_memory, usage.duty_cycle_pct) for usage in theirs
    ]


def test_without_devices_per_chip_tpu_info_tells_the_chips_from_their_pci_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    stand_in = LibtpuStandIn(v3_figures())
    try:
        monkeypatch.setattr(tpu_info_device, "get_local_chips", lambda: (tpu_info_device.TpuChip.V3, 4))
        assert [usage.chip for usage in read_chip_usage(stand_in.address).devices] == [0, 0, 1, 1, 2, 2, 3, 3]
        monkeypatch.setattr(tpu_info_device, "get_local_chips", lambda: (None, 0))
        assert read_chip_usage(stand_in.address) == ChipReadings(unavailable="tpu-info finds no TPU chip on this machine's PCI bus")
    finally:
        stand_in.close()


def test_without_tpu_info_the_readings_say_so_and_the_poller_never_starts(without_tpu_info: None) -> None:
    assert not tpu_info_installed()
    readings = read_chip_usage("localhost:1", devices_per_chip=1)
    assert readings.devices == () and readings.unavailable is not None and readings.unavailable.startswith("tpu-info is not installed")
    poller = ChipUsagePoller(("localhost:8431", "localhost:8432"), devices_per_chip=1).start()
    assert not poller.running and poller.readings() == (readings, readings)
    poller.stop()


def test_no_service_is_unavailable_at_once_with_the_reason() -> None:
    port = free_port()
    started = time.monotonic()
    readings = read_chip_usage(f"localhost:{port}", devices_per_chip=1, timeout=1.0)
    assert time.monotonic() - started < 2.0
    assert readings.devices == () and readings.unavailable is not None
    assert readings.unavailable.startswith(f"no libtpu metrics service at localhost:{port}: it runs only while a process uses the TPU")


def test_a_service_that_never_answers_costs_the_timeout_only(libtpu: LibtpuStandIn) -> None:
    libtpu.stalled = True
    started = time.monotonic()
    readings = read_chip_usage(libtpu.address, devices_per_chip=1, timeout=0.3)
    assert time.monotonic() - started < 2.0
    assert readings == ChipReadings(unavailable=f"libtpu's metrics service at {libtpu.address} did not answer within 0.3 s")


def test_a_service_that_comes_up_later_is_read_the_next_time() -> None:
    # The poller starts with the run; libtpu serves only once a worker uses the TPU.
    port = free_port()
    assert read_chip_usage(f"localhost:{port}", devices_per_chip=1).unavailable is not None
    stand_in = LibtpuStandIn(v5e_figures(), port=port)
    try:
        assert len(read_chip_usage(stand_in.address, devices_per_chip=1).devices) == 4
    finally:
        stand_in.close()


def test_a_metric_the_service_lacks_gives_a_reason_and_an_empty_one_none() -> None:
    figures = v5e_figures()
    figures[Names.DUTY_CYCLE_PCT.value] = []
    stand_in = LibtpuStandIn(figures)
    try:
        assert [usage.duty_cycle_percent for usage in read_chip_usage(stand_in.address, devices_per_chip=1).devices] == [None] * 4
        del figures[Names.DUTY_CYCLE_PCT.value]
        readings = read_chip_usage(stand_in.address, devices_per_chip=1)
        assert readings.unavailable == (
            f"libtpu's metrics service at {stand_in.address} refused: NOT_FOUND: no metric {Names.DUTY_CYCLE_PCT.value}"
        )
        figures.clear()
        figures.update({name.value: [] for name in (Names.TOTAL_MEMORY, Names.MEMORY_USAGE, Names.DUTY_CYCLE_PCT)})
        assert read_chip_usage(stand_in.address, devices_per_chip=1) == ChipReadings(
            unavailable=f"libtpu's metrics service at {stand_in.address} reports no TPU device yet"
        )
    finally:
        stand_in.close()


def test_the_poller_reads_each_process_and_keeps_the_latest_until_stopped(libtpu: LibtpuStandIn) -> None:
    # One process per chip: each serves its own chip on its own port.
    second = LibtpuStandIn({name: gauges[1:2] for name, gauges in v5e_figures().items()})
    absent = f"localhost:{free_port()}"
    poller = ChipUsagePoller((libtpu.address, second.address, absent), devices_per_chip=1, interval=0.05).start()
    try:
        deadline = time.monotonic() + 10
        while poller.readings() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert poller.running and poller.readings() is not None
        assert [len(readings.devices) for readings in poller.readings()] == [4, 1, 0]
        libtpu.figures[Names.DUTY_CYCLE_PCT.value] = [messages.Gauge(as_double=12.0)] * 4
        while poller.readings()[0].devices[0].duty_cycle_percent != 12.0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert poller.readings()[0].devices[0].duty_cycle_percent == 12.0
    finally:
        poller.stop()
        second.close()
    assert not poller.running


def test_a_poller_whose_client_raises_goes_on_and_shows_the_figures_age_meanwhile(
    libtpu: LibtpuStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing = threading.Event()
    asked = chip_usage._ask_libtpu

    def ask(*args: Any) -> Any:
        if failing.is_set():
            raise ValueError("an answer tpu-info does not expect")
        return asked(*args)

    monkeypatch.setattr(chip_usage, "_ask_libtpu", ask)
    poller = ChipUsagePoller((libtpu.address,), devices_per_chip=1, interval=0.05).start()
    try:
        assert wait_until(lambda: poller.readings() is not None, 10)
        live = poller.generation
        failing.set()
        assert wait_until(lambda: poller.readings()[0].unavailable is not None, 10)
        [stale] = poller.readings()
        assert stale.devices == ()  # the last figures are not given as if live: no verdict reads them
        assert re.fullmatch(
            r"chip figures from \d\d:\d\d:\d\d: reading them stopped working "
            r"\(ValueError: an answer tpu-info does not expect\); still trying",
            stale.unavailable or "",
        )
        assert rank_chip_text(poller.readings(), 0, 1) == f"rank 0: {stale.unavailable}"  # what a stalled rank's report says
        said = poller.generation
        time.sleep(0.3)  # rounds go on failing the same way: nothing new to show
        assert poller.running and poller.generation == said > live
        failing.clear()
        assert wait_until(lambda: poller.readings()[0].unavailable is None, 10)
        assert len(poller.readings()[0].devices) == 4 and poller.running
    finally:
        poller.stop()


def test_a_ranks_figures_are_its_process_devices_in_order() -> None:
    def devices(*duties: float) -> ChipReadings:
        return ChipReadings(devices=tuple(DeviceUsage(index, index // 2, duty, None, None) for index, duty in enumerate(duties)))

    v3_processes = (devices(10.0, 10.0), devices(90.0, 90.0), ChipReadings(unavailable="no libtpu metrics service at localhost:8433"))
    found = [usage_for_rank(v3_processes, rank, devices_per_process=2) for rank in range(8)]
    assert [usage.duty_cycle_percent for usage in found[:4] if isinstance(usage, DeviceUsage)] == [10.0, 10.0, 90.0, 90.0]
    assert found[4] == found[5] == "no libtpu metrics service at localhost:8433" and found[6] is None
    assert usage_for_rank((devices(50.0),), 1, devices_per_process=2) == "libtpu reports 1 device(s) for this rank's process, not 2"


def test_each_process_serves_on_its_own_port_from_tpu_runtime_metrics_ports() -> None:
    kaggle = {"TPU_RUNTIME_METRICS_PORTS": ",".join(str(port) for port in range(8431, 8439))}
    assert metrics_addresses(8, kaggle) == tuple(f"localhost:{port}" for port in range(8431, 8439))
    assert metrics_addresses(1, kaggle) == ("localhost:8431",)
    assert metrics_addresses(1, {}) == ("localhost:8431",)
    assert metrics_addresses(4, {}) == ("localhost:8431", "localhost:8432", "localhost:8433", "localhost:8434")
    assert metrics_addresses(2, {"TPU_RUNTIME_METRICS_PORTS": "9000"}) == ("localhost:9000", "localhost:9001")


def test_reading_imports_no_torch_xla_and_leaves_the_kernels_environment_alone() -> None:
    program = (
        "import os, sys\n"
        "from tpu_nb.kernel.tpu.chip_usage import read_chip_usage\n"
        f"readings = read_chip_usage('localhost:{free_port()}', devices_per_chip=1)\n"
        "assert readings.unavailable.startswith('no libtpu metrics service'), readings\n"
        "assert 'torch_xla' not in sys.modules and 'TPU_LIBRARY_PATH' not in os.environ\n"
        "assert 'tpu_info' in sys.modules\n"
    )
    environment = {name: value for name, value in os.environ.items() if name != "TPU_LIBRARY_PATH"}
    subprocess.run([sys.executable, "-c", program], check=True, env=environment, capture_output=True, timeout=60)


def test_a_worker_row_shows_the_figures_there_are() -> None:
    usage = DeviceUsage(device=0, chip=0, duty_cycle_percent=97.4, hbm_used=int(12.1 * GIB), hbm_total=16 * GIB)
    assert usage_text(usage) == "TensorCore 97% · HBM 12.1/16.0 GiB"
    assert usage_text(DeviceUsage(0, 0, None, 3 * GIB, None)) == "HBM 3.0 GiB"
    assert usage_text(DeviceUsage(0, 0, 0.0, None, None)) == "TensorCore 0%"
    assert usage_text(DeviceUsage(0, 0, None, None, None)) == "no figures from libtpu"


def test_a_silent_ranks_chip_says_busy_or_idle_when_clearly_either() -> None:
    def hint(duty: float | None) -> str | None:
        return silent_rank_hint(DeviceUsage(0, 0, duty, None, None))

    assert (
        hint(97.0)
        == hint(80.0)
        == ("the chip is busy: the rank runs a program on it (a long step, or a collective waiting for other ranks)")
    )
    assert hint(0.0) == hint(5.0) == "the chip is idle: the rank waits on the host (compiling, input, a host read, Python)"
    assert hint(50.0) is None and hint(None) is None and silent_rank_hint(None) is None


def test_a_rank_s_chip_text_gives_its_figures_and_what_they_say_or_why_there_are_none() -> None:
    idle = ChipReadings((DeviceUsage(0, 0, 2.0, 2**30, 16 * 2**30),))
    busy = ChipReadings((DeviceUsage(0, 0, 99.0, None, None),))
    assert rank_chip_text([idle, busy], 0, 1) == (
        "rank 0: TensorCore 2% · HBM 1.0/16.0 GiB (the chip is idle: the rank waits on the host (compiling, input, a host read, Python))"
    )
    assert rank_chip_text([idle, busy], 1, 1) == (
        "rank 1: TensorCore 99% (the chip is busy: the rank runs a program on it (a long step, or a collective waiting for other ranks))"
    )
    assert rank_chip_text([ChipReadings(unavailable="no service")], 0, 1) == "rank 0: no service"
    assert rank_chip_text([], 0, 1) is None
