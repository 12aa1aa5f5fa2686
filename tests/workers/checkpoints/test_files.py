"""A checkpoint's directory: staged then renamed, uploaded record last, copied back, pruned; nothing left when a write fails."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import fsspec
import pytest

from tpu_nb.basics.owners import Owner, this_process
from tpu_nb.wire.checkpoints import RECORD
from tpu_nb.workers.checkpoints.files import Staged, local_copy, remove_abandoned, remove_copy, trainer_directory


def test_a_checkpoint_is_staged_as_partial_and_renamed_when_written(tmp_path: Path) -> None:
    with Staged(str(tmp_path / "run"), 7) as staging:
        assert staging == tmp_path / "run" / "checkpoint-7.partial"
        (staging / "state.pt").write_bytes(b"state")
        assert not (tmp_path / "run" / "checkpoint-7").exists()  # never looks like a checkpoint while written
    assert (tmp_path / "run" / "checkpoint-7" / "state.pt").read_bytes() == b"state"
    assert not (tmp_path / "run" / "checkpoint-7.partial").exists()


def test_a_write_that_fails_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(OSError), Staged(str(tmp_path), 3) as staging:
        (staging / "state.pt").write_bytes(b"half")
        raise OSError(28, "No space left on device")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(OSError), Staged("memory://failing/run", 3) as staging:
        remote_staging = staging
        raise OSError(28, "No space left on device")
    assert not remote_staging.parent.exists() and not fsspec.filesystem("memory").exists("/failing/run")


def test_a_url_gets_the_checkpoint_record_last_and_a_resume_copies_it_back() -> None:
    uploads: list[str] = []
    memory = fsspec.filesystem("memory")
    original_put = memory.put_file

    def recording_put(local: str, remote: str, *args: object, **kwargs: object) -> None:
        uploads.append(remote.rsplit("/", 1)[-1])
        original_put(local, remote, *args, **kwargs)

    memory.put_file = recording_put  # type: ignore[method-assign]
    try:
        with Staged("memory://bucket/runs", 5) as staging:
            (staging / RECORD).write_text("{}")
            (staging / "state.pt").write_bytes(b"state")
            (staging / "a.bin").write_bytes(b"a")
    finally:
        del memory.put_file
    assert uploads == ["a.bin", "state.pt", RECORD]
    copy = local_copy("memory://bucket/runs/checkpoint-5", ranks=1)
    assert copy.name == "checkpoint-5" and (copy / "state.pt").read_bytes() == b"state"
    remove_copy("memory://bucket/runs/checkpoint-5", copy)
    assert not copy.parent.exists()


def test_local_paths_and_file_urls_are_used_in_place(tmp_path: Path) -> None:
    assert local_copy(f"file://{tmp_path}", ranks=1) == tmp_path
    assert trainer_directory(f"file://{tmp_path}") == str(tmp_path)
    local = Path(trainer_directory("gs://bucket/run"))  # a Trainer writes locally; tpu_nb uploads each checked checkpoint
    assert local.is_dir() and local != tmp_path
    shutil.rmtree(local)


def test_pruning_removes_staging_left_by_a_cut_write_once_a_later_checkpoint_counts(tmp_path: Path) -> None:
    from tpu_nb.wire.checkpoints import CheckpointRecord
    from tpu_nb.workers.checkpoints.files import prune

    (tmp_path / "checkpoint-3.partial").mkdir()  # the session ended while step 3 was written
    (tmp_path / "checkpoint-9.partial").mkdir()  # being written now
    (tmp_path / "checkpoint-5").mkdir()
    (tmp_path / "checkpoint-5" / "state.pt").write_bytes(b"12345")
    record = CheckpointRecord(5, "loop", "2026-12-01T20:00:00+00:00", 1.0, 0.1, 5, True, None, None, [], {}, {}, {}, {"state.pt": 5})
    (tmp_path / "checkpoint-5" / RECORD).write_text(record.to_json())
    prune(str(tmp_path), keep=2)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["checkpoint-5", "checkpoint-9.partial"]


def saved(directory: Path, step: int, size: int, best: str | None = None, verified: bool = True, trainer: bool = True) -> None:
    """A checkpoint as a Trainer leaves it once tpu_nb checked it: its trainer_state.json names the best one so far (a loop's has none)."""
    import json

    from tpu_nb.wire.checkpoints import CheckpointRecord

    path = directory / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "model.safetensors").write_bytes(b"w" * size)
    if trainer:
        (path / "trainer_state.json").write_text(json.dumps({"global_step": step, "best_model_checkpoint": best}))
    files = {file.name: file.stat().st_size for file in path.iterdir()}
    record = CheckpointRecord(
        step, "trainer", "2026-12-01T20:00:00+00:00", 1.0, 0.1, sum(files.values()), verified, None, None, [], {}, {}, {}, files
    )
    (path / RECORD).write_text(record.to_json())


def remaining(directory: Path) -> list[str]:
    return sorted((path.name for path in directory.iterdir()), key=lambda name: int(name.rsplit("-", 1)[-1]))


def test_pruning_never_removes_the_checkpoint_a_trainer_names_its_best(tmp_path: Path) -> None:
    from tpu_nb.workers.checkpoints.files import prune

    for step in (2, 4, 6):
        saved(tmp_path, step, 100, best=str(tmp_path / "checkpoint-2"))
    removed = prune(str(tmp_path), keep=1)
    assert remaining(tmp_path) == ["checkpoint-2", "checkpoint-6"]  # --keep 1: the newest, and the best whatever --keep says
    assert [checkpoint.step for checkpoint in removed] == [4]
    saved(tmp_path, 8, 100, best="/tmp/tpu_nb-trainer-checkpoints-x/checkpoint-8")  # a URL's Trainer writes locally: the name counts
    prune(str(tmp_path), keep=2)
    assert remaining(tmp_path) == ["checkpoint-6", "checkpoint-8"]  # the best is the newest now: --keep 2 keeps the one before


def test_the_best_checkpoint_counts_among_those_kept_and_in_the_budget(tmp_path: Path) -> None:
    from tpu_nb.workers.checkpoints.files import prune

    for step in (2, 4, 6, 8):
        saved(tmp_path, step, 1000, best=str(tmp_path / "checkpoint-2"))
    prune(str(tmp_path), keep=3)
    assert remaining(tmp_path) == ["checkpoint-2", "checkpoint-6", "checkpoint-8"]  # 3 in all, the best among them
    size = sum(file.stat().st_size for file in (tmp_path / "checkpoint-8").iterdir() if file.name != RECORD)
    prune(str(tmp_path), keep=3, budget=int(2.5 * size))
    assert remaining(tmp_path) == ["checkpoint-2", "checkpoint-8"]  # the best took the room checkpoint-6 had
    prune(str(tmp_path), keep=3, budget=size)
    assert remaining(tmp_path) == ["checkpoint-2", "checkpoint-8"]  # over the budget: the best and the newest stay all the same


def test_a_best_checkpoint_that_failed_its_check_is_kept_for_the_trainer_to_load_on_a_url_too() -> None:
    from tpu_nb.workers.checkpoints.files import prune

    memory = fsspec.filesystem("memory")
    local = Path(tempfile.mkdtemp())
    try:
        saved(local, 3, 10, best="checkpoint-3", verified=False)
        for step in (5, 7):
            saved(local, step, 10, best="/tmp/elsewhere/checkpoint-3")
        memory.put(str(local), "/pruning-best/run", recursive=True)
    finally:
        shutil.rmtree(local)
    prune("memory://pruning-best/run", keep=1)
    assert sorted(path.rsplit("/", 1)[-1] for path in memory.ls("/pruning-best/run", detail=False)) == ["checkpoint-3", "checkpoint-7"]


def test_a_loop_checkpoint_names_no_best(tmp_path: Path) -> None:
    from tpu_nb.wire.checkpoints import list_checkpoints
    from tpu_nb.workers.checkpoints.files import kept_checkpoints, trainer_best

    saved(tmp_path, 1, 10)
    for step in (2, 3):
        saved(tmp_path, step, 10, trainer=False)
    checkpoints = list_checkpoints(str(tmp_path))
    assert trainer_best(checkpoints[0]) is None and trainer_best(checkpoints[-1]) is None  # none named; no trainer_state.json
    assert [checkpoint.step for checkpoint in kept_checkpoints(checkpoints, 2, None, None)] == [2, 3]


def test_temporary_directories_are_never_taken_for_a_dead_kernels_pid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tpu_nb.kernel.run.leftovers import private_directory

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    # mkdtemp's random part is letters and digits: sometimes all digits, which kernel/run/leftovers.py once read as a pid.
    monkeypatch.setattr(tempfile, "_get_candidate_names", lambda: iter(f"{number:08d}" for number in range(10**7, 10**8)))
    memory = fsspec.filesystem("memory")
    memory.pipe("/digits/checkpoint-4/state.pt", b"state")
    copy = local_copy("memory://digits/checkpoint-4", ranks=1)
    trainer = Path(trainer_directory("memory://digits"))
    with Staged("memory://digits", 5) as staging:
        private_directory("", tmp_path)  # another kernel clears what dead kernels left
        assert staging.is_dir() and copy.is_dir() and trainer.is_dir()
    me = this_process()
    assert me is not None
    assert copy.parent.name == f"tpu_nb-checkpoint-copy-{me.name}-10000000"
    assert trainer.name.startswith(f"tpu_nb-checkpoint-trainer-{me.name}-1")


def test_only_directories_whose_owner_is_provably_gone_are_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A /tmp shared with another container holds its live run's directories under pids that are dead here."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    me = this_process()
    assert me is not None
    dead_here = Owner(2**22 - 3, 5, me.place)  # no such pid runs: made by a process of this boot and namespace, gone
    reused = Owner(me.pid, me.started + 1, me.place)  # this pid, but another process's start: the pid was reused
    elsewhere = Owner(2**22 - 3, 5, "0123456789ab")  # another pid namespace's: not ours to judge
    for owner in (dead_here, reused, elsewhere):
        (tmp_path / f"tpu_nb-checkpoint-copy-{owner.name}-x1y2z3").mkdir()
    (tmp_path / "tpu_nb-checkpoint-copy-1234-x1y2z3").mkdir()  # named by an older tpu_nb: a pid alone, left alone
    remove_abandoned(tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
        [f"tpu_nb-checkpoint-copy-{elsewhere.name}-x1y2z3", "tpu_nb-checkpoint-copy-1234-x1y2z3"]
    )


def test_a_failed_upload_leaves_no_temporary_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    memory = fsspec.filesystem("memory")

    def refused(*args: object, **kwargs: object) -> None:
        raise PermissionError(403, "the bucket refused the upload")

    monkeypatch.setattr(memory, "put_file", refused)
    with pytest.raises(PermissionError), Staged("memory://refusing/run", 6) as staging:
        (staging / "state.pt").write_bytes(b"state")
    assert list(tmp_path.iterdir()) == []


def take_copy(url: str, ranks: int, results: Path, rank: int, all_took: Any) -> None:
    copy = local_copy(url, ranks=ranks)
    (results / f"{rank}.txt").write_text(f"{copy}\n{(copy / 'state.pt').read_text()}\n{(copy / 'state.pt').stat().st_nlink}")
    # A rank lives on through its run: one that ended before the last took its copy would leave a shared fetch no live
    # process needs, which the next rank rightly removes and fetches again.
    all_took.wait()
    shutil.rmtree(copy.parent)


def test_a_url_is_fetched_once_per_host_for_all_ranks_and_nothing_is_left(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import multiprocessing

    import fsspec.implementations.local

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    (tmp_path / "bucket" / "checkpoint-8").mkdir(parents=True)
    (tmp_path / "bucket" / "checkpoint-8" / "state.pt").write_text("the state")
    (tmp_path / "bucket" / "checkpoint-8" / RECORD).write_text("{}")
    fetches = tmp_path / "fetches.txt"
    original_get = fsspec.implementations.local.LocalFileSystem.get_file

    def counted_get(self: object, source: str, target: str, *args: object, **kwargs: object) -> None:
        with fetches.open("a") as said:
            said.write(f"{source}\n")
        original_get(self, source, target, *args, **kwargs)

    monkeypatch.setattr(fsspec.implementations.local.LocalFileSystem, "get_file", counted_get)
    url = f"local://{tmp_path}/bucket/checkpoint-8"  # a URL (like gs://) that processes forked from this one can all read
    results = tmp_path / "results"
    results.mkdir()
    context = multiprocessing.get_context("fork")
    all_took = context.Barrier(3, timeout=120)  # a rank that failed before it breaks the barrier: nothing waits forever
    ranks = [context.Process(target=take_copy, args=(url, 3, results, rank, all_took)) for rank in range(3)]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join()
    assert [process.exitcode for process in ranks] == [0, 0, 0]
    said = [(results / f"{rank}.txt").read_text().splitlines() for rank in range(3)]
    assert len({copy for copy, _state, _links in said}) == 3 and all(state == "the state" for _copy, state, _links in said)
    assert sorted(Path(line).name for line in fetches.read_text().splitlines()) == ["state.pt", RECORD]  # fetched once
    assert list((tmp_path / "tmp").iterdir()) == []  # the shared fetch went with the last rank, each copy with its rank


def test_what_a_killed_worker_left_is_removed_by_the_next_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import multiprocessing

    from tpu_nb.workers.checkpoints.files import temporary_directory

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    memory = fsspec.filesystem("memory")
    memory.pipe("/killed/checkpoint-2/state.pt", b"state")
    context = multiprocessing.get_context("fork")
    # A rank that fetched a checkpoint for 2 ranks and made a staging directory, then died (SIGKILL: no cleanup ran).
    killed = context.Process(
        target=lambda: (local_copy("memory://killed/checkpoint-2", ranks=2), temporary_directory("tpu_nb-checkpoint-staging-"), os._exit(0))
    )
    killed.start()
    killed.join()
    left = sorted(path.name.split("-")[2] for path in tmp_path.iterdir())
    assert left == ["copy", "fetch", "fetch", "staging"]  # the fetch for 2 ranks, and its lock file
    mine = temporary_directory("tpu_nb-checkpoint-staging-")
    assert list(tmp_path.iterdir()) == [mine]
