"""A pod run's graceful stop: the step every host stops at, and its way there.

The way: `PodRun` picks the step (`stop_step`, here) and its backend
delivers it to every host at once (`backends.tpu_vm`/`gke` `deliver`: the
file `stop` in the host's run directory, `wire.run_directory`); on each host
`workers.processes.pod_host` reads it and hands it to its workers the way a local run
does (`wire.shared_memory_stop`). The step is ahead of the furthest host by
as many steps as run while the stop travels, so every host reaches it after
the stop has arrived: hosts without a collective between steps drift apart,
and a host that stopped one step earlier than another would leave that one
waiting in the next step's collective.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

STOP_AHEAD_SECONDS = 10.0
"""How far ahead of the last step seen a graceful stop aims: the time it takes to reach every host."""


def stop_step(host0_steps: Sequence[tuple[float, int]], furthest: Iterable[tuple[float, int]], started_at: float, now: float) -> int | None:
    """A step every host reaches after the stop does, or None (no step seen yet: each host stops one past its furthest rank).

    `host0_steps`: host 0's recent (time, step), for the rate; `furthest`: each host's furthest (time, step) heard.
    """
    if not host0_steps:
        return None
    (first_time, first_step), (last_time, last_step) = host0_steps[0], host0_steps[-1]
    if last_time - first_time >= 0.5:
        rate = (last_step - first_step) / (last_time - first_time)
    else:  # too few reports yet: the rate since the start (compiling included), doubled to stay ahead
        rate = 2 * (last_step + 1) / max(last_time - started_at, 1e-3)
    heard_at, step = max([(last_time, last_step), *furthest], key=lambda heard: heard[1])
    return step + math.ceil(rate * (now - heard_at + STOP_AHEAD_SECONDS)) + 1
