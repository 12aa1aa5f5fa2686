"""What the TPU chips are doing, live: TensorCore duty cycle and HBM in use per device, read from libtpu in the kernel.

While a process uses the TPU, its libtpu serves runtime metrics over gRPC on
localhost (port 8431). They are read here through Google's tpu-info library
where it is installed (Colab's TPU image ships 0.8.1; tpu_nb does not depend
on it): its protocol definitions and metric names, but not its
`get_chip_usage()`, which waits for an answer without a deadline, never
closes its channel and asserts on a partial answer. Every call here has a
deadline, so an unreachable or stuck service costs at most `timeout` seconds
and gives readings that say why they are unavailable, never an exception.
Nothing here imports torch_xla or starts the XLA runtime.

Each process that uses the TPU runs its own service, for the chips it
holds. With one process per chip (torch_xla's multi-process start), libtpu
takes the process's place in TPU_PROCESS_ADDRESSES as its index into
TPU_RUNTIME_METRICS_PORTS (8431,8432,... on Kaggle and Cloud TPU VMs), so
the poller reads one address per worker process (`metrics_addresses`).
This comes from libtpu's logs and those images' settings; it was not
watched on a TPU here.

Importing tpu-info 0.8.1 is not free: its package forks a process that tries
`import libtpu`, then imports libtpu and libtpu.sdk into this process (sdk.so,
which opens no device; libtpu.so stays unloaded), which sets
TPU_LIBRARY_PATH, and prints a line when libtpu is missing. 0.14 does that
only for its command line. So tpu-info is imported on the poller's thread,
once the run's processes are forked (a fork during an import would copy a
held import lock), and TPU_LIBRARY_PATH is taken back out: the kernel's
environment stays as the user left it.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

DEFAULT_PORT = 8431
DEFAULT_ADDRESS = f"localhost:{DEFAULT_PORT}"
"""Where libtpu serves its runtime metrics when one process uses the TPU."""
BUSY_PERCENT = 80.0
IDLE_PERCENT = 5.0
_GIB = 2**30


@dataclass(frozen=True, slots=True)
class DeviceUsage:
    """One TPU device as libtpu reports it: one per chip from v4 on, two per chip (its cores) on v2 and v3."""

    device: int
    """libtpu's device id on this host."""
    chip: int
    duty_cycle_percent: float | None
    """Share of the last sampling period the chip's TensorCore ran a program (the chip's figure, for each of its devices)."""
    hbm_used: int | None
    hbm_total: int | None


@dataclass(frozen=True, slots=True)
class ChipReadings:
    """One reading of every device, or why there is none."""

    devices: tuple[DeviceUsage, ...] = ()
    unavailable: str | None = None


def tpu_info_installed() -> bool:
    """Whether tpu-info can be imported, without importing it."""
    return importlib.util.find_spec("tpu_info") is not None


def read_chip_usage(address: str = DEFAULT_ADDRESS, *, devices_per_chip: int | None = None, timeout: float = 1.0) -> ChipReadings:
    """Every device's duty cycle and HBM from libtpu's metrics service at `address`, waiting at most `timeout` seconds.

    `devices_per_chip` (2 on v2/v3, else 1; tpu_nb's `TpuInfo` has it) pairs
    the per-chip duty cycle with the per-device memory; None asks tpu-info,
    which reads the chips' PCI ids under /sys/bus/pci.
    """
    library = _import_tpu_info()
    if isinstance(library, str):
        return ChipReadings(unavailable=library)
    if devices_per_chip is None:
        found = _local_devices_per_chip(library)
        if isinstance(found, str):
            return ChipReadings(unavailable=found)
        devices_per_chip = found
    try:
        gauges = _ask_libtpu(library, address, time.monotonic() + timeout)
    except library.grpc.RpcError as error:
        return ChipReadings(unavailable=_why_unanswered(error, address, timeout))
    devices = _pair(gauges, devices_per_chip, library.metric_names)
    if not devices:
        return ChipReadings(unavailable=f"libtpu's metrics service at {address} reports no TPU device yet")
    return ChipReadings(devices=devices)


def usage_text(usage: DeviceUsage) -> str:
    """A worker row's figures: "TensorCore 97% · HBM 12.1/16.0 GiB"."""
    parts = []
    if usage.duty_cycle_percent is not None:
        parts.append(f"TensorCore {usage.duty_cycle_percent:.0f}%")
    if usage.hbm_used is not None and usage.hbm_total is not None:
        parts.append(f"HBM {usage.hbm_used / _GIB:.1f}/{usage.hbm_total / _GIB:.1f} GiB")
    elif usage.hbm_used is not None:
        parts.append(f"HBM {usage.hbm_used / _GIB:.1f} GiB")
    return " · ".join(parts) or "no figures from libtpu"


def silent_rank_hint(usage: DeviceUsage | None) -> str | None:
    """What a silent rank's chip says about where the rank is, when its duty cycle is clear either way.

    XLA compiles on the host's CPU, so a rank that compiles leaves its chip idle.
    """
    duty = usage.duty_cycle_percent if usage is not None else None
    if duty is None:
        return None
    if duty >= BUSY_PERCENT:
        return "the chip is busy: the rank runs a program on it (a long step, or a collective waiting for other ranks)"
    if duty <= IDLE_PERCENT:
        return "the chip is idle: the rank waits on the host (compiling, input, a host read, Python)"
    return None


def metrics_addresses(processes: int, environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """Where each of a run's `processes` serves its metrics, in process order: TPU_RUNTIME_METRICS_PORTS, else from 8431 on."""
    listed = [port.strip() for port in environ.get("TPU_RUNTIME_METRICS_PORTS", "").split(",") if port.strip().isdecimal()]
    first = int(listed[0]) if listed else DEFAULT_PORT
    ports = listed[:processes] if len(listed) >= processes else [str(first + index) for index in range(processes)]
    return tuple(f"localhost:{port}" for port in ports)


def usage_for_rank(by_process: Sequence[ChipReadings], rank: int, devices_per_process: int) -> DeviceUsage | str | None:
    """A rank's figures, or why its process has none (None: no readings for its process yet).

    Ranks go process by process, each process's devices in order, as torch_xla numbers them.
    """
    process, local = divmod(rank, devices_per_process)
    if process >= len(by_process):
        return None
    readings = by_process[process]
    if local < len(readings.devices):
        return readings.devices[local]
    return readings.unavailable or f"libtpu reports {len(readings.devices)} device(s) for this rank's process, not {local + 1}"


def rank_chip_text(by_process: Sequence[ChipReadings], rank: int, devices_per_process: int) -> str | None:
    """ "rank 0: TensorCore 0% · HBM 1.2/16.0 GiB (the chip is idle: ...)", or why there are no figures; None before any reading."""
    usage = usage_for_rank(by_process, rank, devices_per_process)
    if usage is None:
        return None
    if isinstance(usage, str):
        return f"rank {rank}: {usage}"
    hint = silent_rank_hint(usage)
    return f"rank {rank}: {usage_text(usage)}" + (f" ({hint})" if hint else "")


class ChipUsagePoller:
    """Reads each address every `interval` seconds on a daemon thread; `readings()` gives the last readings, one per address.

    Start the poller once the run's processes are forked (see the module's
    note on importing tpu-info). Without tpu-info no thread starts, and the
    readings say so. The thread outlives its own errors (tpu-info raising on
    an answer it does not expect): it goes on polling, and until a round
    works again the readings are the error and the time of the last figures,
    never those figures as if they were live.
    """

    def __init__(
        self,
        addresses: Sequence[str] = (DEFAULT_ADDRESS,),
        *,
        devices_per_chip: int | None = None,
        interval: float = 2.0,
        timeout: float = 1.0,
    ) -> None:
        self.addresses = tuple(addresses)
        self.devices_per_chip = devices_per_chip
        self.interval = interval
        self.timeout = timeout
        self.generation = 0
        """Counts changes of `readings()`: a new round read, or reading started or stopped failing."""
        self._latest: tuple[ChipReadings, ...] | None = None
        self._read_at: float | None = None
        self._failure: str | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> ChipUsagePoller:
        if not tpu_info_installed():
            self._latest = tuple(ChipReadings(unavailable=_NOT_INSTALLED) for _address in self.addresses)
            self.generation += 1
            return self
        self._thread = threading.Thread(target=self._poll, name="tpu_nb-chip-usage", daemon=True)
        self._thread.start()
        return self

    def readings(self) -> tuple[ChipReadings, ...] | None:
        """The last round's readings (None before the first), or, while reading fails, why and since when."""
        with self._lock:
            if self._failure is None:
                return self._latest
            since = "" if self._read_at is None else f"chip figures from {time.strftime('%H:%M:%S', time.localtime(self._read_at))}: "
            said = f"{since}reading them stopped working ({self._failure}); still trying"
            return tuple(ChipReadings(unavailable=said) for _address in self.addresses)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        """Stop polling; waits at most one reading's deadline for the thread."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(self.timeout + 1.0)

    def _poll(self) -> None:
        while not self._stopping.is_set():
            try:
                readings = [
                    read_chip_usage(address, devices_per_chip=self.devices_per_chip, timeout=self.timeout) for address in self.addresses
                ]
            except Exception as error:  # noqa: BLE001 - whatever tpu-info raises, the figures go on (the error is shown instead)
                with self._lock:
                    failure = f"{type(error).__name__}: {error}"
                    if failure != self._failure:
                        self._failure = failure
                        self.generation += 1
            else:
                with self._lock:
                    self._latest, self._read_at, self._failure = tuple(readings), time.time(), None
                    self.generation += 1
            self._stopping.wait(self.interval)


_NOT_INSTALLED = "tpu-info is not installed (`pip install tpu-info` adds each chip's TensorCore duty cycle and HBM use)"


@dataclass(frozen=True, slots=True)
class _TpuInfoModules:
    """The parts of tpu-info (and the grpc it brings) that reading uses; modules, so untyped."""

    grpc: ModuleType
    metric_names: Any
    messages: ModuleType
    services: ModuleType
    device: ModuleType


def _import_tpu_info() -> _TpuInfoModules | str:
    """tpu-info's modules, or why they cannot be imported."""
    library_path_was_set = "TPU_LIBRARY_PATH" in os.environ
    try:
        import grpc
        from tpu_info import device, metrics
        from tpu_info.proto import tpu_metric_service_pb2, tpu_metric_service_pb2_grpc
    except ModuleNotFoundError as error:
        if error.name is not None and error.name.split(".")[0] == "tpu_info":
            return _NOT_INSTALLED
        return f"tpu-info cannot be imported: {error}"
    except Exception as error:  # noqa: BLE001 - a tpu-info that fails to import for any reason (a protobuf it does not match) only means no figures
        return f"tpu-info cannot be imported: {type(error).__name__}: {error}"
    finally:
        # tpu-info 0.8.1 imports libtpu, which sets it; torch_xla finds the same libtpu without it.
        if not library_path_was_set:
            os.environ.pop("TPU_LIBRARY_PATH", None)
    return _TpuInfoModules(grpc, metrics.MetricName, tpu_metric_service_pb2, tpu_metric_service_pb2_grpc, device)


def _local_devices_per_chip(library: _TpuInfoModules) -> int | str:
    try:
        chip_type, _count = library.device.get_local_chips()
    except (OSError, AssertionError) as error:  # a PCI entry without the files it reads; chips of two kinds
        return f"tpu-info could not tell the TPU chips apart: {error}"
    if chip_type is None:
        return "tpu-info finds no TPU chip on this machine's PCI bus"
    devices: int = chip_type.value.devices_per_chip
    return devices


def _ask_libtpu(library: _TpuInfoModules, address: str, deadline: float) -> dict[str, list[tuple[int, Any]]]:
    """Metric name -> (id, gauge) sorted by id, for total HBM, HBM in use and duty cycle; all three calls share one deadline."""
    names = library.metric_names
    with library.grpc.secure_channel(address, library.grpc.local_channel_credentials()) as channel:
        stub = library.services.RuntimeMetricServiceStub(channel)
        gauges = {}
        for name in (names.TOTAL_MEMORY.value, names.MEMORY_USAGE.value, names.DUTY_CYCLE_PCT.value):
            request = library.messages.MetricRequest(metric_name=name)
            response = stub.GetRuntimeMetric(request, timeout=max(deadline - time.monotonic(), 0.0))
            by_id = ((metric.attribute.value.int_attr, metric.gauge) for metric in response.metric.metrics)
            gauges[name] = sorted(by_id, key=lambda pair: pair[0])  # by id alone: gauges do not compare
    return gauges


def _pair(gauges: dict[str, list[tuple[int, Any]]], devices_per_chip: int, names: Any) -> tuple[DeviceUsage, ...]:
    """One row per device reporting HBM in use; the duty cycle is per chip, in chip order (as tpu-info pairs them)."""
    totals = dict(gauges[names.TOTAL_MEMORY.value])
    duty_cycles = [gauge.as_double for _chip, gauge in gauges[names.DUTY_CYCLE_PCT.value]]
    rows = []
    for position, (device, used) in enumerate(gauges[names.MEMORY_USAGE.value]):
        chip = position // devices_per_chip
        total = totals.get(device)
        rows.append(
            DeviceUsage(
                device=device,
                chip=chip,
                duty_cycle_percent=duty_cycles[chip] if chip < len(duty_cycles) else None,
                hbm_used=used.as_int,
                hbm_total=total.as_int if total is not None else None,
            )
        )
    return tuple(rows)


def _why_unanswered(error: Any, address: str, timeout: float) -> str:
    code = error.code()
    if code.name == "DEADLINE_EXCEEDED":
        return f"libtpu's metrics service at {address} did not answer within {timeout:g} s"
    if code.name == "UNAVAILABLE":
        return f"no libtpu metrics service at {address}: it runs only while a process uses the TPU ({error.details()})"
    return f"libtpu's metrics service at {address} refused: {code.name}: {error.details()}"
