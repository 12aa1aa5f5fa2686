"""The XLA doctor, in each worker: why a run is slow, where in the user's code, and what to change.

- `analysis_log`: reads torch_xla's compilation analysis (PT_XLA_DEBUG_LEVEL=1,
  one file per rank): why and where each graph was compiled.
- `input_watch`: how long a rank's training thread waits for its next batch,
  and the batches' shapes.
- `places`: a frame of the user's code, named the way the notebook names it.
- `transfers`: the shapes the user's code moves to the device, by the calling line.
- `input_shapes`: which input changed shape, from batches or those moves.
- `step_source`: the lines of the loop around a compilation that make sizes (on the
  device, a slice, a data-dependent op), read from its source.
- `span`: the steps and seconds a rate was measured over, and how rough it is.
- `host_reads`: where the user's code reads XLA tensors' values on the host (`.item()`, `.tolist()`).
- `trl_padding`: how a TRL trainer pads its batches, and the config line that makes every step's shapes the same.
- `findings`: pure rules from those readings to `Diagnosis`es and compile causes.
- `probe`: the XLA glue (counters, memory, the compilation cache), run from
  the heartbeat thread, never on the training step.
- `torch_tpu_readings` (torch_tpu's cache statistics, cache misses, errors, parsed) and `torch_tpu_doctor`:
  the doctor on TorchTPU, from torch_tpu's own readings.
"""
