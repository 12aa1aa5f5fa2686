"""The dashboard check's baseline: the same small BERT loop under plain `xmp.spawn`, without tpu_nb.

Run as its own process (`python -m tpu_nb.selftest.raw_spawn STEPS WARM_UP OUT`),
so that the kernel never starts the XLA runtime; rank 0 writes its figures to OUT as JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _worker(index: int, steps: int, warm_up: int, out: str) -> None:
    from tpu_nb.selftest.workloads import bert_steps

    figures = bert_steps(steps, warm_up, reporting=False)
    if index == 0:
        Path(out).write_text(json.dumps(figures), encoding="utf-8")


def main(arguments: list[str]) -> None:
    import torch_xla.distributed.xla_multiprocessing as xmp

    steps, warm_up, out = int(arguments[0]), int(arguments[1]), arguments[2]
    xmp.spawn(_worker, args=(steps, warm_up, out), start_method="fork")


if __name__ == "__main__":
    main(sys.argv[1:])
