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
- `findings`: pure rules from those readings to `Diagnosis`es and compile causes.
- `probe`: the XLA glue (counters, memory, the compilation cache), run from
  the heartbeat thread, never on the training step.
"""
