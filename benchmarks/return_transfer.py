"""How should a worker send trained weights back to the kernel? Measured in one run.

Compares, for state dicts of several sizes, sending from a forked child:
- pipe: pickled bytes through a multiprocessing Pipe (what a naive launcher does);
- file: `torch.save` to a file in /dev/shm, `torch.load` in the parent
  (what tpu_nb does: tpu_nb.wire.results).
Prints seconds for each and the ratio pipe/file.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import tempfile
import time

import torch


def state_dict(megabytes: int) -> dict[str, torch.Tensor]:
    tensors = max(1, megabytes // 4)
    return {f"layer{n}.weight": torch.randn(1024, 1024) for n in range(tensors)}  # 4 MB each


def through_pipe(state: dict[str, torch.Tensor]) -> float:
    reader, writer = multiprocessing.get_context("fork").Pipe(duplex=False)
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        writer.send_bytes(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))
        os._exit(0)
    received = pickle.loads(reader.recv_bytes())
    os.waitpid(pid, 0)
    assert len(received) == len(state)
    return time.perf_counter() - started


def through_file(state: dict[str, torch.Tensor], directory: str) -> float:
    path = os.path.join(directory, "result.pt")
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        torch.save(state, path)
        os._exit(0)
    os.waitpid(pid, 0)
    received = torch.load(path, weights_only=False)
    assert len(received) == len(state)
    os.remove(path)
    return time.perf_counter() - started


def main() -> None:
    directory = tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    print(f"results directory: {directory}")
    print(f"{'state dict':>10} | {'pipe (s)':>8} | {'shm file (s)':>12} | pipe/file")
    for megabytes in (16, 128, 512):
        state = state_dict(megabytes)
        pipe = min(through_pipe(state) for _ in range(3))
        file = min(through_file(state, directory) for _ in range(3))
        print(f"{megabytes:>7} MB | {pipe:8.3f} | {file:12.3f} | {pipe / file:.2f}x")
    os.rmdir(directory)


if __name__ == "__main__":
    main()
