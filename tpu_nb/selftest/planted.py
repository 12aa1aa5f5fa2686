"""Faults planted on purpose, for the doctor and the watchdog to find at their lines.

torch and torch_xla are imported inside the functions: only the workers
touch a device. The doctor and the watchdog name places in the user's code and pass over
tpu_nb's own files, so these loops are compiled from source under a file name
of their own (kept in `linecache`, as IPython keeps a cell's): a finding then
reads "tpu_nb_selftest_planted.py, line 15: value = loss.item()".
"""

from __future__ import annotations

import linecache
from collections.abc import Callable
from typing import Any

FILE_NAME = "tpu_nb_selftest_planted.py"

SOURCE = """\
import time

import tpu_nb
from tpu_nb.selftest.workloads import train_step


def host_read_loop(steps):
    import torch, torch_xla

    device = torch_xla.device()
    layer = torch.nn.Linear(8, 2).to(device)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    for step in range(1, steps + 1):
        loss = train_step(layer, optimizer, torch.randn(16, 8, device=device))
        value = loss.item()  # planted: a host read every step
        tpu_nb.report(step=step, loss=loss, max_steps=steps)
        time.sleep(0.05)
    return value


def shape_change_loop(steps):
    import torch, torch_xla

    device = torch_xla.device()
    layer = torch.nn.Linear(64, 8).to(device)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    for step in range(1, steps + 1):
        x = torch.randn(8 + step % 6, 64).to(device)  # planted: the batch's shape changes
        loss = train_step(layer, optimizer, x)
        tpu_nb.report(step=step, loss=loss, max_steps=steps)


def stalled_loop(stall_rank, stall_step):
    import torch, torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr

    device = torch_xla.device()
    rank = xr.global_ordinal()
    for step in range(1, 100000):
        total = xm.all_reduce(xm.REDUCE_SUM, torch.ones(4, device=device))
        torch_xla.sync()
        if rank == stall_rank and step == stall_step:
            time.sleep(3600)  # planted: one rank stalls here
        tpu_nb.report(step=step, loss=total.sum())
        time.sleep(0.05)
"""

_LINES = SOURCE.splitlines(keepends=True)
linecache.cache[FILE_NAME] = (len(SOURCE), None, _LINES, FILE_NAME)  # no mtime: linecache.checkcache keeps it
_NAMESPACE: dict[str, Any] = {"__name__": "tpu_nb_selftest_planted"}
exec(compile(SOURCE, FILE_NAME, "exec"), _NAMESPACE)  # our own source, under its own file name

host_read_loop: Callable[[int], float] = _NAMESPACE["host_read_loop"]
shape_change_loop: Callable[[int], None] = _NAMESPACE["shape_change_loop"]
stalled_loop: Callable[[int, int], None] = _NAMESPACE["stalled_loop"]


def line_of(marker: str) -> int:
    """The line (from 1) of the planted fault whose comment holds `marker`."""
    return next(number for number, line in enumerate(_LINES, start=1) if f"# planted: {marker}" in line)


def place_of(marker: str) -> str:
    """How the doctor and the watchdog name that line: "tpu_nb_selftest_planted.py, line 20"."""
    return f"{FILE_NAME}, line {line_of(marker)}"
