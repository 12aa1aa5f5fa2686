"""`tpu_nb.spmd`: helpers for hand-written loops in a `%%tpu_train --spmd` cell.

    model = tpu_nb.spmd.shard_model(model)             # each parameter split over the fsdp axis
    for batch in tpu_nb.spmd.sharded_loader(loader):   # each batch split over it too
        ...

See `tpu_nb.workers.cell_api.spmd_helpers` for what each does.
"""

from tpu_nb.workers.cell_api.spmd_helpers import bytes_per_device, partition_spec, shard_model, sharded_loader, sharding_of

__all__ = ["bytes_per_device", "partition_spec", "shard_model", "sharded_loader", "sharding_of"]
