"""How a run ended, said once: `run_ending` is where a worker's exception becomes the notebook's error
(`notebook_errors`, with `refused()` for what stops a run before it starts); `out_of_memory` and `autograd_fork`
explain two failures the user can fix; `status` holds the words for each ending.
"""
