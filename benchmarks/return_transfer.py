"""How should a worker send trained weights back to the kernel? Measured in one run.

Compares, for state dicts of several sizes, sending from a forked child:
- pipe: pickled bytes through a multiprocessing Pipe (what a naive launcher does);
- file: `torch.save` to a file in /dev/shm, `torch.load` in the parent;
- tpu_nb: the same through `tpu_nb.wire.results` (free space checked, the file
  written through a recording writer and its zip directory checked, loaded
  with weights_only=True).
Prints seconds for each and the ratios pipe/tpu_nb and tpu_nb/file (the cost of the checks).
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import tempfile
import time
from pathlib import Path

import torch

from tpu_nb.wire.results import ModuleWeights, RankResult, ResultPlaces, load_result, save_result


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


def through_tpu_nb(state: dict[str, torch.Tensor], directory: str) -> float:
    places = ResultPlaces(Path(directory))
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        save_result(RankResult(returned={"model": ModuleWeights(state)}), places, 0)
        os._exit(0)
    os.waitpid(pid, 0)
    received = load_result(places.exchange_dir, 0)
    assert received is not None and len(received.returned["model"].state_dict) == len(state)
    for path in places.exchange_dir.iterdir():
        path.unlink()
    return time.perf_counter() - started


def main() -> None:
    directory = tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    print(f"results directory: {directory}")
    print(f"{'state dict':>10} | {'pipe (s)':>8} | {'shm file (s)':>12} | {'tpu_nb (s)':>10} | pipe/tpu_nb | tpu_nb/file")
    for megabytes in (16, 128, 512):
        state = state_dict(megabytes)
        pipe = min(through_pipe(state) for _ in range(3))
        file = min(through_file(state, directory) for _ in range(3))
        ours = min(through_tpu_nb(state, directory) for _ in range(3))
        print(f"{megabytes:>7} MB | {pipe:8.3f} | {file:12.3f} | {ours:10.3f} | {pipe / ours:10.2f}x | {ours / file:10.2f}x")
    os.rmdir(directory)


if __name__ == "__main__":
    main()
