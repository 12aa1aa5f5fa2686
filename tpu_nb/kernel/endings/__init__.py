"""How a run ended, said once: `run_ending` is where a worker's exception becomes the notebook's error (`notebook_errors`)."""
