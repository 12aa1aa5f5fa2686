"""What runs in the processes tpu_nb forks, in rooms by role, each importing only the rooms below it.

- `processes/`: the processes of a run, top to bottom: a pod host's part (`pod_host`), the supervisor that runs
  `xmp.spawn` (`supervisor`), each worker (`worker`), TorchTPU's process per chip (`chip_ranks`), and the
  program a worker runs (`programs`).
- `trainer/`: what changes in a Hugging Face `Trainer` (and TRL's) inside a worker.
- `mends/`: what changes in other libraries inside a worker so their defaults work there.
- `cell_api/`: what the user's cell calls: `report()` (`reporting`) and the `--spmd` helpers.
- `checkpoints/` (saved, checked, resumed) and `stalls/` (the watchdog, stack dumps).
- `doctor/`: the XLA doctor.
- `readings/`: what a worker reads of its device and its batches without waiting on the device.
- `cell_output/`: what the cell shows: printed output and the user's tracebacks.

Everything reaches the kernel through `tpu_nb.wire`. Nothing here imports `tpu_nb.kernel`.
"""
