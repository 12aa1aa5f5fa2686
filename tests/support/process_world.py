"""A test world with one worker process per device, as on a TPU host (a process per chip on every TPU since v4).

On XLA:CPU, `xmp.spawn` runs one process with a thread per device, and XLA's
collectives between XLA:CPU devices hang (pytorch/xla#9089). This layer,
for tests only (it is not part of the package), makes `xmp.spawn` fork N
processes instead (N: CPU_NUM_DEVICES, which `--cores N` sets), each with
one XLA:CPU device, its own rank and world size N, and real collectives
across the processes for what training uses: `xm.all_reduce` (and so
`xm.reduce_gradients` and `xm.optimizer_step`) and `xm.rendezvous` (and so
`xm.mesh_reduce`), through a gloo process group over the tensors' CPU copies.

How it differs from a TPU host: XLA compiles no collective into the graph
(each is a copy to the host, gloo, and a copy back, outside the graph); each
process compiles its own graphs; and every process shares this machine's
two cores. What it shows as on a TPU host: several processes writing one
event pipe, reading one shared stop request, agreeing on a stop step,
waiting for each other in collectives, one of them failing or being killed,
rank 0 saving results while the others exit.

`install()` patches torch_xla's process launcher in this process (the
kernel of a test, or a simulated pod host's train.py through
`sitecustomize`); each forked worker then patches its own torch_xla.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import functools
import itertools
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

WORLD_TIMEOUT = datetime.timedelta(seconds=120)
"""How long a collective waits for the other processes (gloo's default is 30 min: a test must not hang that long)."""


def install() -> None:
    """From now on, `xmp.spawn` in this process (and in processes forked from it) starts a process per device."""
    import torch_xla._internal.pjrt as pjrt

    pjrt.run_multiprocess = run_multiprocess


def run_multiprocess(fn: Callable[..., Any], *args: Any, start_method: str = "spawn", **kwargs: Any) -> dict[int, Any]:
    """torch_xla's `run_multiprocess`, with CPU_NUM_DEVICES processes of one XLA:CPU device each."""
    import torch
    import torch_xla
    import torch_xla._internal.pjrt as pjrt

    if torch_xla._XLAC._xla_runtime_is_initialized():
        raise RuntimeError("Runtime is already initialized. Do not use the XLA device before calling xmp.spawn.")
    local = int(os.environ.get("CPU_NUM_DEVICES", "1"))
    world = _World.from_environment(local)
    context = torch.multiprocessing.get_context(start_method)
    with concurrent.futures.ProcessPoolExecutor(max_workers=local, mp_context=context) as executor:
        run = functools.partial(_run_one_device, world=world, fn=functools.partial(fn, *args, **kwargs))
        results = list(itertools.chain.from_iterable(result.items() for result in executor.map(run, range(local))))
    return pjrt._merge_replica_results(results)  # type: ignore[no-any-return]


class _World:
    """Where this host's processes stand in the world: N processes here, after `first_rank` others, joined at `store`."""

    def __init__(self, local: int, first_rank: int, size: int, store: str) -> None:
        self.local, self.first_rank, self.size, self.store = local, first_rank, size, store

    @classmethod
    def from_environment(cls, local: int) -> _World:
        hosts = int(os.environ.get("TPU_NB_TEST_WORLD_HOSTS", "1"))
        if hosts > 1:
            # A simulated pod slice: every host's processes join one world, at a store named after the run
            # (each host runs train.py in its copy of the run directory, named alike on every host).
            store = f"{os.environ['TPU_NB_TEST_WORLD_STORE']}-{os.path.basename(os.getcwd())}"
            return cls(local, int(os.environ["TPU_WORKER_ID"]) * local, hosts * local, store)
        return cls(local, 0, local, os.path.join(tempfile.gettempdir(), f"tpu_nb-test-world-{os.getpid()}-{time.monotonic_ns()}"))


def _run_one_device(local_rank: int, world: _World, fn: Callable[[], Any]) -> dict[int, Any]:
    """One worker process: one XLA:CPU device, its rank in the world, gloo beside it for the collectives."""
    os.environ["CPU_NUM_DEVICES"] = "1"  # before this process's XLA client starts
    os.environ["PJRT_LOCAL_PROCESS_RANK"] = str(local_rank)
    os.environ["PJRT_LOCAL_PROCESS_COUNT"] = str(world.local)
    import torch.distributed as dist
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr

    rank = world.first_rank + local_rank
    dist.init_process_group("gloo", init_method=f"file://{world.store}", rank=rank, world_size=world.size, timeout=WORLD_TIMEOUT)
    _patch(rank, world.size)
    device = xm.get_xla_supported_devices()[0]
    torch_xla._XLAC._xla_set_default_device(device)
    xr._init_world_size_ordinal()
    return {rank: fn()}


def _patch(rank: int, size: int) -> None:
    """This process's torch_xla, as one rank of `size` (a throwaway forked worker: patching is its own business)."""
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr

    xr._WORLD_SIZE, xr._ORDINAL = size, rank
    xr.world_size = lambda: size
    xr.global_ordinal = lambda: rank
    xr.global_device_count = lambda: size
    xr.process_index = lambda: rank
    xr.process_count = lambda: size
    xm.all_reduce = _all_reduce
    xm.rendezvous = _rendezvous
    xm.xla_rendezvous = _xla_rendezvous


_OPS = {"sum": "SUM", "mul": "PRODUCT", "min": "MIN", "max": "MAX"}


def _all_reduce(reduce_type: str, inputs: Any, scale: float = 1.0, groups: Any = None, pin_layout: bool = True) -> Any:
    """`xm.all_reduce` over gloo: the tensors' CPU copies reduced across processes, then written back in place."""
    import torch
    import torch.distributed as dist

    tensors = [inputs] if isinstance(inputs, torch.Tensor) else list(inputs)
    if not tensors:
        return inputs
    flat = torch.cat([tensor.detach().cpu().reshape(-1).to(torch.float64) for tensor in tensors])
    dist.all_reduce(flat, op=getattr(dist.ReduceOp, _OPS[reduce_type]))
    flat *= scale
    reduced, offset = [], 0
    for tensor in tensors:
        part = flat[offset : offset + tensor.numel()].reshape(tensor.shape).to(tensor.dtype)
        offset += tensor.numel()
        reduced.append(part.to(tensor.device))
    if isinstance(inputs, torch.Tensor):
        return reduced[0]
    with torch.no_grad():
        for tensor, value in zip(tensors, reduced, strict=True):
            tensor.copy_(value)
    return inputs


def _xla_rendezvous(payload: bytes = b"", ordinals: Any = None, tag: Any = None) -> list[bytes]:
    import torch.distributed as dist
    import torch_xla

    torch_xla.sync()
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, payload)
    return [bytes(item) for item in gathered]


def _rendezvous(tag: str, payload: bytes = b"", replicas: Any = None) -> list[bytes]:
    return _xla_rendezvous(payload, replicas, tag)
