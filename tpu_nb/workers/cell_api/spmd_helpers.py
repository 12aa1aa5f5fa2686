"""Helpers for hand-written loops in an `--spmd` cell (also `tpu_nb.spmd`).

SPMD: one process drives every device, and the compiler splits the work by
the shardings marked on tensors. FSDP-style: each parameter is split along
the mesh's "fsdp" axis (so each device holds 1/N of it), and each batch is
split along its first dimension over the same axis (data parallelism); the
compiler gathers what a step needs and reduces the gradients. These run in
the SPMD worker, where `mesh` is set as the global mesh.
"""

from __future__ import annotations

from typing import Any

FSDP_AXIS = "fsdp"


def shard_model(model: Any, mesh: Any = None, axis: str = FSDP_AXIS) -> Any:
    """Move `model` to the XLA device and split each parameter along `axis`; returns the same module.

    Each parameter is split on its largest dimension that the axis size
    divides; one that none divides (a small bias, a scalar) stays whole on
    every device. The module is not wrapped, so its state dict keeps its names.
    """
    import torch_xla
    import torch_xla.distributed.spmd as xs

    mesh = _mesh(mesh)
    ways = mesh.mesh_shape[mesh.axis_names.index(axis)]
    model.to(torch_xla.device())
    for parameter in model.parameters():
        spec = partition_spec(tuple(parameter.shape), ways, axis)
        if spec is not None:
            xs.mark_sharding(parameter, mesh, spec)
    return model


def partition_spec(shape: tuple[int, ...], ways: int, axis: str = FSDP_AXIS) -> tuple[str | None, ...] | None:
    """Where to split a tensor of `shape` `ways` ways along `axis`: its largest divisible dimension, or None."""
    divisible = [dim for dim, size in enumerate(shape) if size % ways == 0 and size >= ways]
    if not divisible or ways == 1:
        return None
    dim = max(divisible, key=lambda index: shape[index])
    return tuple(axis if index == dim else None for index in range(len(shape)))


def sharded_loader(loader: Any, mesh: Any = None, axis: str = FSDP_AXIS) -> Any:
    """`MpDeviceLoader` over `loader` that splits each batch's first dimension along `axis`.

    The per-step batch is the whole mesh's: a loader of batch 32 over 4 fsdp
    devices gives each device 8 rows. Tensors of one dimension (labels) are
    given to every device whole.
    """
    import torch_xla
    import torch_xla.distributed.parallel_loader as pl
    import torch_xla.distributed.spmd as xs

    return pl.MpDeviceLoader(loader, torch_xla.device(), input_sharding=xs.ShardingSpec(_mesh(mesh), (axis, None)))


def sharding_of(tensor: Any) -> str:
    """How XLA lays `tensor` out over the devices, e.g. "{devices=[4,1]0,1,2,3}" ("" when not sharded)."""
    import torch_xla

    return str(torch_xla._XLAC._get_xla_sharding_spec(tensor))


def bytes_per_device(tensors: Any) -> int:
    """What the largest share of these XLA tensors takes on one device, measured from their local shards."""
    from torch_xla.distributed.spmd.xla_sharding import wrap_as_sharded_tensor

    per_device: dict[str, int] = {}
    everywhere = 0  # tensors without a sharding: SPMD keeps them whole on every device
    for tensor in tensors:
        if not sharding_of(tensor):
            everywhere += tensor.numel() * tensor.element_size()
            continue
        for shard in wrap_as_sharded_tensor(tensor).local_shards:
            size = shard.data.numel() * shard.data.element_size()
            per_device[shard.shard_device] = per_device.get(shard.shard_device, 0) + size
    return everywhere + max(per_device.values(), default=0)


def _mesh(mesh: Any) -> Any:
    if mesh is not None:
        return mesh
    import torch_xla.distributed.spmd as xs

    found = xs.get_global_mesh()
    if found is None:
        raise RuntimeError("no device mesh here: tpu_nb.spmd helpers run in a `%%tpu_train --spmd` cell (or launch(spmd=True)).")
    return found
