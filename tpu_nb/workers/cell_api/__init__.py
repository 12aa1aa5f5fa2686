"""What the user's cell calls inside a worker: `tpu_nb.report()` (`reporting`) and the `--spmd` helpers
(`spmd_helpers`, `tpu_nb.spmd`).
"""
