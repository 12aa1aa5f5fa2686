"""A rank's result through the exchange directory: every part its own file where it fits, checked once written, loaded safely."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest
import torch
from support.mounts import run_with_small_mounts

from tpu_nb.wire.results import (
    ModuleWeights,
    NotTransferable,
    RankResult,
    ResultNotLoaded,
    ResultPlaces,
    check_result_file,
    estimated_bytes,
    index_file,
    load_result,
    save_result,
)


def test_a_result_comes_back_as_it_went(tmp_path: Path) -> None:
    sent = RankResult({"accuracy": 0.9}, True, {"weights": torch.ones(2), "notes": ["a"]}, ("missing",))
    save_result(sent, ResultPlaces(tmp_path), 0)
    back = load_result(tmp_path, 0)
    assert back is not None
    assert back.value == {"accuracy": 0.9} and back.has_value and back.missing == ("missing",) and back.lost == ()
    assert torch.equal(back.returned["weights"], torch.ones(2)) and back.returned["notes"] == ["a"]
    assert not list(tmp_path.glob("*.partial"))


def test_no_value_is_not_a_none_value(tmp_path: Path) -> None:
    save_result(RankResult(returned={"x": 1}), ResultPlaces(tmp_path), 0)
    back = load_result(tmp_path, 0)
    assert back is not None and not back.has_value and back.returned == {"x": 1}


def test_one_unpicklable_part_loses_nothing_else(tmp_path: Path) -> None:
    save_result(RankResult(threading.Lock(), True, {"fine": 3}), ResultPlaces(tmp_path), 1)
    back = load_result(tmp_path, 1)
    assert back is not None
    assert isinstance(back.value, NotTransferable) and back.value.type_name == "lock"
    assert back.returned == {"fine": 3}


def test_a_rank_that_saved_nothing_has_no_result(tmp_path: Path) -> None:
    assert load_result(tmp_path, 0) is None


def test_the_index_is_plain_json_and_module_weights_load_without_unpickling(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    weights = ModuleWeights(torch.nn.Linear(3, 2).state_dict())
    save_result(RankResult(7, True, {"model": weights}), ResultPlaces(tmp_path), 0)
    record = json.loads(index_file(tmp_path, 0).read_text())
    assert [(part["key"], part["kind"]) for part in record["parts"]] == [("return:model", "weights"), ("value", "pickle")]  # weights first
    # Someone who can write the results replaces the weights with a pickle that runs code when loaded.
    weights_file = tmp_path / record["parts"][0]["file"]
    assert weights_file.suffix == ".safetensors"
    torch.save({"weight": _RunsCode()}, weights_file)
    with pytest.raises(ResultNotLoaded, match=r"could not be loaded \(SafetensorError: .*the file was kept there"):
        load_result(tmp_path, 0)
    assert "this ran" not in capfd.readouterr().out


def test_module_weights_keep_the_adapters_a_worker_added_in_the_json_index(tmp_path: Path) -> None:
    adapters = {"default": {"peft_type": "LORA", "r": 4, "target_modules": ["q_proj", "v_proj"]}}
    save_result(RankResult(None, False, {"model": ModuleWeights(torch.nn.Linear(3, 2).state_dict(), adapters)}), ResultPlaces(tmp_path), 0)
    assert json.loads(index_file(tmp_path, 0).read_text())["parts"][0]["adapters"] == adapters  # no pickle carries them
    back = load_result(tmp_path, 0, pickled=False)
    assert back is not None and back.returned["model"].adapters == adapters


def test_an_index_that_cannot_be_read_is_an_error_that_keeps_it(tmp_path: Path) -> None:
    save_result(RankResult(7, True), ResultPlaces(tmp_path), 0)
    index_file(tmp_path, 0).write_bytes(b"\xff{ not json")  # what a failing disk hands back
    with pytest.raises(ResultNotLoaded, match=r"result-0.json could not be loaded \(UnicodeDecodeError"):
        load_result(tmp_path, 0)


class _RunsCode:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (print, ("this ran in the kernel",))


def test_pickled_values_load_only_from_a_place_the_caller_trusts(tmp_path: Path) -> None:
    weights = torch.nn.Linear(3, 2).state_dict()
    save_result(RankResult({"a": 1}, True, {"model": ModuleWeights(weights), "other": [1]}), ResultPlaces(tmp_path), 0)
    back = load_result(tmp_path, 0, pickled=False)
    assert back is not None
    assert isinstance(back.returned["model"], ModuleWeights) and torch.equal(back.returned["model"].state_dict["weight"], weights["weight"])
    assert isinstance(back.value, NotTransferable) and "not a place you named as yours" in back.value.reason
    assert isinstance(back.returned["other"], NotTransferable)


def test_only_the_return_names_asked_for_load_and_the_value_always_does(tmp_path: Path) -> None:
    weights = torch.nn.Linear(3, 2).state_dict()
    save_result(RankResult(5, True, {"model": ModuleWeights(weights), "history": [1, 2]}), ResultPlaces(tmp_path), 0)
    back = load_result(tmp_path, 0, names={"history"})
    assert back is not None and back.value == 5 and dict(back.returned) == {"history": [1, 2]}
    nothing = load_result(tmp_path, 0, names=())
    assert nothing is not None and nothing.value == 5 and dict(nothing.returned) == {}


def test_a_truncated_result_file_is_an_error_that_keeps_it(tmp_path: Path) -> None:
    save_result(RankResult(torch.zeros(1000), True), ResultPlaces(tmp_path), 0)
    [part] = tmp_path.glob("result-0-*.pt")
    part.write_bytes(part.read_bytes()[:2000])
    with pytest.raises(ResultNotLoaded, match=f"{part}"):
        load_result(tmp_path, 0)
    assert part.exists()


def anonymous_bytes() -> int:
    """This process's resident anonymous memory (what a file mapped into it does not count in)."""
    line = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("RssAnon:"))
    return int(line.split()[1]) * 1024


def test_module_weights_load_mapped_from_their_file_not_copied_into_memory(tmp_path: Path) -> None:
    weights = {f"layer{n}.weight": torch.full((1024, 1024), float(n)) for n in range(16)}  # 64 MiB
    save_result(RankResult(returned={"model": ModuleWeights(weights)}), ResultPlaces(tmp_path), 0)
    before = anonymous_bytes()
    back = load_result(tmp_path, 0)
    grown = anonymous_bytes() - before
    assert back is not None
    state = back.returned["model"].state_dict
    assert list(state) == list(weights) and all(torch.equal(state[name], tensor) for name, tensor in weights.items())
    assert grown < 8 << 20, f"loading 64 MiB of weights took {grown / 2**20:.0f} MiB of the kernel's memory"


def test_a_tensor_under_two_names_is_sent_once_and_comes_back_under_both(tmp_path: Path) -> None:
    embedding = torch.randn(1000, 256)  # 1 MB, tied to the head as Llama's and Gemma's embeddings are
    sent = {"embed.weight": embedding, "head.weight": embedding, "head.bias": torch.zeros(1000)}
    save_result(RankResult(returned={"model": ModuleWeights(sent)}), ResultPlaces(tmp_path), 0)
    [part] = json.loads(index_file(tmp_path, 0).read_text())["parts"]
    assert (tmp_path / part["file"]).stat().st_size < 1_500_000  # not two copies (2 MB)
    back = load_result(tmp_path, 0)
    assert back is not None
    state = back.returned["model"].state_dict
    assert list(state) == list(sent) and state["embed.weight"] is state["head.weight"]
    assert torch.equal(state["head.weight"], embedding) and torch.equal(state["head.bias"], torch.zeros(1000))


def test_weights_in_a_dtype_safetensors_lacks_still_come_back(tmp_path: Path) -> None:
    sent = {"weight": torch.ones(2, 2, dtype=torch.complex64), "step": torch.tensor(3)}
    save_result(RankResult(returned={"model": ModuleWeights(sent)}), ResultPlaces(tmp_path), 0)
    back = load_result(tmp_path, 0, pickled=False)  # loaded with weights_only=True all the same
    assert back is not None
    state = back.returned["model"].state_dict
    assert torch.equal(state["weight"], sent["weight"]) and torch.equal(state["step"], sent["step"])


def test_the_size_estimate_counts_each_storage_once() -> None:
    tensor = torch.zeros(1_000_000)  # 4 MB
    model = torch.nn.Linear(1000, 1000)  # 4 MB of weights
    assert 8_000_000 <= estimated_bytes({"a": tensor, "same": tensor, "view": tensor[:10], "model": model}) <= 8_200_000


# In a private mount namespace (root only): small tmpfs mounts stand in for a container's /dev/shm and a full disk.

SAVE_AND_LOAD = """
import json, sys, torch
from pathlib import Path
from tpu_nb.wire.results import ModuleWeights, RankResult, ResultPlaces, index_file, load_result, save_result
exchange_dir, spill = Path(sys.argv[1]), Path(sys.argv[2])
model = torch.nn.Linear(100, 100)
value = torch.arange(5_000_000, dtype=torch.float32)  # 20 MB (19.1 MiB)
save_result(RankResult(value, True, {"model": ModuleWeights(model.state_dict())}), ResultPlaces(exchange_dir, (spill,)), 0)
back = load_result(exchange_dir, 0)
record = json.loads(index_file(exchange_dir, 0).read_text())
print(json.dumps({
    "value_back": back.value is not None and torch.equal(back.value, value),
    "weights_back": torch.equal(back.returned["model"].state_dict["weight"], model.weight),
    "files": [part.get("file") for part in record["parts"]],
    "lost": [lost.explain() for lost in back.lost],
    "partials": [str(path) for place in (exchange_dir, spill) for path in place.glob("*.partial")],
}))
"""


def save_and_load(tmp_path: Path, run_dir_size: str, spill_size: str) -> dict[str, object]:
    exchange_dir, spill = tmp_path / "shm", tmp_path / "disk"
    done = run_with_small_mounts(
        {exchange_dir: run_dir_size, spill: spill_size}, [sys.executable, "-c", SAVE_AND_LOAD, str(exchange_dir), str(spill)]
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def test_a_part_too_big_for_the_run_dir_goes_to_disk_and_comes_back(tmp_path: Path) -> None:
    found = save_and_load(tmp_path, "24m", "64m")
    assert found["value_back"] and found["weights_back"] and found["lost"] == [] and found["partials"] == []
    weights_file, value_file = found["files"]  # type: ignore[misc]
    assert value_file == str(tmp_path / "disk" / "result-0-1.pt")  # spilled: named by its path
    assert weights_file == "result-0-0.safetensors"  # small: in the exchange directory, named relative to it


def test_a_part_no_place_can_hold_is_said_with_the_sizes_and_the_rest_comes_back(tmp_path: Path) -> None:
    found = save_and_load(tmp_path, "4m", "8m")
    assert not found["value_back"] and found["weights_back"] and found["partials"] == []
    [lost] = found["lost"]  # type: ignore[misc]
    assert lost.startswith("the value (19.1 MiB) could not be sent back: no place had room for it (")
    assert str(tmp_path / "disk") in lost and "MiB free): [Errno 28] No space left on device" in lost
    assert "Free space there, or send back less" in lost


def test_the_check_finds_a_file_cut_short(tmp_path: Path) -> None:
    # What a write into a full filesystem leaves when the writer does not notice.
    path = tmp_path / "result.pt"
    torch.save({"w": torch.zeros(100_000)}, path)
    check_result_file(path)
    path.write_bytes(path.read_bytes()[:50_000])
    with pytest.raises(zipfile.BadZipFile):
        check_result_file(path)


def test_the_mount_helper_really_limits_space(tmp_path: Path) -> None:
    done = run_with_small_mounts({tmp_path / "small": "1m"}, ["sh", "-c", f"dd if=/dev/zero of={tmp_path / 'small' / 'x'} bs=1M count=2"])
    assert done.returncode != 0 and "No space left on device" in done.stderr
    assert subprocess.run(["mountpoint", "-q", str(tmp_path / "small")]).returncode != 0  # gone with the namespace
