"""Trials side by side, one world of the host's chips each: a sweep (`--trials`: folds, grids, lists) or a search
(`--trials STUDY`: Optuna asks, prunes and is told).

`spec` reads the trials; `sweep` runs them, each a fault domain, with
`sweep_start` (each trial's options, resume), `sweep_record` (sweep.json),
`trial_record` (trial.json: what trained DIR/trial-N), `sweep_returns` and
`sweep_result` (what comes back: `SweepResult`); `comparison` and `board`
compare them. `search_plan` (Optuna-free checks), `search` and `studies`
(`tpu_nb.study`) are the search.
"""
