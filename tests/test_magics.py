"""%tpu_info and %%tpu_train in a real IPython InteractiveShell (workers on XLA:CPU)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from support.kernel import plain
from support.read_only import refuse_writes_in
from support.tracebacks import arrow_line, cell_frame_header

import tpu_nb
from tpu_nb import selftest
from tpu_nb.kernel.endings.notebook_errors import LaunchRefused, WorkerError
from tpu_nb.kernel.history.log import read_log
from tpu_nb.kernel.progress.text import format_count_rate, format_mfu
from tpu_nb.kernel.progress.throughput import STAND_IN_PEAK


def run(shell: InteractiveShell, cell: str):  # type: ignore[no-untyped-def]
    with capture_output() as captured:
        result = shell.run_cell(cell)
    return result, captured


def test_unload_removes_the_magics(ip: InteractiveShell) -> None:
    assert "tpu_train" in ip.magics_manager.magics["cell"]
    ip.run_line_magic("unload_ext", "tpu_nb")
    assert "tpu_train" not in ip.magics_manager.magics["cell"]
    assert "tpu_info" not in ip.magics_manager.magics["line"]
    assert "tpu_runs" not in ip.magics_manager.magics["line"]
    ip.run_line_magic("load_ext", "tpu_nb")


def test_tpu_info_reports_this_machine_without_starting_xla(ip: InteractiveShell) -> None:
    result, captured = run(ip, "%tpu_info")
    assert result.success
    [output] = captured.outputs
    text = output.data["text/plain"]
    assert "CPU" in text and "1 worker" in text
    assert "<table" in output.data["text/html"]
    torch_xla = sys.modules.get("torch_xla")
    assert torch_xla is None or not torch_xla._XLAC._xla_runtime_is_initialized()
    result, _ = run(ip, "%%tpu_train\nimport torch\n(torch.ones(2, device=device) + 1).sum().item()")
    assert result.result == 4.0


TINY_BERT = """
import torch
from transformers import BertConfig, BertForSequenceClassification
torch.manual_seed(0)
config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=32, num_labels=2)
model = BertForSequenceClassification(config)
before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
ids = torch.randint(0, 64, (64, 16))
labels = (ids[:, 0] > 32).long()
"""

TRAIN = """%%tpu_train --return model rank0_weights losses
import torch_xla.core.xla_model as xm
model.to(device).train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
losses = []
for step in range(6):
    batch = slice(step * 8, step * 8 + 8)
    loss = model(input_ids=ids[batch].to(device), labels=labels[batch].to(device)).loss
    loss.backward()
    xm.optimizer_step(optimizer)
    optimizer.zero_grad()
    xm.mark_step()  # cut the graph each step, or it grows and recompiles forever
    losses.append(loss.item())
    print(f"step {step} loss {losses[-1]:.3f}")
rank0_weights = {name: tensor.cpu() for name, tensor in model.state_dict().items()}
len(losses)
"""


def test_training_a_tiny_transformer_updates_the_notebook_model_in_place(ip: InteractiveShell) -> None:
    assert ip.run_cell(TINY_BERT).success
    notebook_model = ip.user_ns["model"]
    result, captured = run(ip, TRAIN)
    assert result.success, captured.stdout + captured.stderr
    assert result.result == 6
    assert "step 5 loss" in captured.stdout
    assert "updated `model` in place" in captured.stdout
    assert ip.user_ns["model"] is notebook_model
    assert len(ip.user_ns["losses"]) == 6
    after = notebook_model.state_dict()
    before, rank0 = ip.user_ns["before"], ip.user_ns["rank0_weights"]
    assert any(not torch.equal(before[name], after[name]) for name in after)
    assert all(torch.equal(rank0[name], after[name]) for name in after)
    assert next(notebook_model.parameters()).device.type == "cpu"


WATCHED_RETURN = """%%tpu_train --return model --no-progress --run-log off
import ctypes, os, threading, time
model.to(device)
ctypes.CDLL(None).malloc_trim(0)  # what moving the model freed is not there for the return to reuse
def watch(path, page=os.sysconf("SC_PAGE_SIZE")):
    # This worker's resident memory above what it holds now (the weights on the device), sampled every millisecond
    # until it exits: through its hand-back of `model`.
    resident = lambda: int(open("/proc/self/statm").read().split()[1]) * page
    start, peak = resident(), 0
    while True:
        if resident() - start > peak:
            peak = resident() - start
            open(path + ".new", "w").write(str(peak))
            os.replace(path + ".new", path)  # whole, whenever the worker exits
        time.sleep(0.001)
threading.Thread(target=watch, args=(PEAK_FILE,), daemon=True).start()
time.sleep(0.05)
"""


def test_a_returned_module_crosses_to_the_host_a_tensor_at_a_time(ip: InteractiveShell, tmp_path: Path) -> None:
    # 128 MiB of weights in 4 MiB tensors. Copied to the host whole before being written, they took 1.5 times their size
    # of the worker's memory (190 MiB, measured); a tensor at a time, about 40 MiB whatever the model's size.
    ip.run_cell("import torch\nmodel = torch.nn.Sequential(*(torch.nn.Linear(1024, 1024) for _ in range(32)))")
    ip.user_ns["PEAK_FILE"] = str(tmp_path / "peak")
    trained = {name: tensor.clone() for name, tensor in ip.user_ns["model"].state_dict().items()}
    result, captured = run(ip, WATCHED_RETURN)
    assert result.success, captured.stdout + captured.stderr
    assert all(torch.equal(tensor, trained[name]) for name, tensor in ip.user_ns["model"].state_dict().items())
    peak = int((tmp_path / "peak").read_text()) if (tmp_path / "peak").exists() else 0
    assert peak < 64 << 20, f"the worker's memory grew by {peak / 2**20:.0f} MiB while sending 128 MiB of weights back"


def test_a_worker_exception_points_into_the_cell(ip: InteractiveShell) -> None:
    result, _ = run(ip, "%%tpu_train\nx = 1\ny = 0\nz = x / y\n")
    assert isinstance(result.error_in_exec, WorkerError)
    assert result.error_in_exec.rank == 0
    rendered = plain("\n".join(result.error_in_exec._render_traceback_()))
    assert cell_frame_header(ip.execution_count, 4).search(rendered), rendered
    assert arrow_line(4, "z = x / y").search(rendered), rendered
    assert "ZeroDivisionError: division by zero" in rendered
    assert "rank 0 of 1" in rendered


def test_missing_return_names_are_a_usage_error(ip: InteractiveShell) -> None:
    result, _ = run(ip, "%%tpu_train --return found missing\nfound = 41 + 1\n")
    assert isinstance(result.error_in_exec, UsageError)
    assert "--return missing: the cell did not define `missing` on rank 0" in str(result.error_in_exec)
    assert ip.user_ns["found"] == 42


def test_a_value_that_cannot_come_back_is_shown_as_text(ip: InteractiveShell) -> None:
    result, _ = run(ip, "%%tpu_train\n(n for n in range(3))")
    assert result.success
    assert "generator" in repr(result.result) and "could not be sent back" in repr(result.result)


@pytest.mark.parametrize(
    "line, message",
    [
        ("--cores two", "invalid int value"),
        ("--frobnicate", "unrecognized arguments"),
        ("--cores 0", "cores=0: give a positive number"),
        ("--timeout -5", "timeout=-5.0: give a positive number"),
        ("--stop-grace 0", "stop_grace=0.0: give a positive number of seconds"),
        ("--background --name 1st", "--name 1st: give a Python identifier"),
        ("--cores-per-trial 2 --return-best model", "cores_per_trial and return_best are for a sweep: give trials too"),
        ("--trials folds=3 --background", "trials with background: a sweep runs in the foreground"),
        ("--trials 'lr=1 lr=2'", "lr is given twice"),
        ("--trials folds=3 --trials-metric acc:best", "--trials-metric 'acc:best'"),
        ("--trials missing_grid", "'missing_grid' is not NAME=VALUE"),
        ("--n-trials 8 --space space", "n_trials and space are for a sweep: give trials too (--trials SPEC in the magic)"),
        ("--trials 'lr=1,2' --n-trials 8", "--n-trials and --space are for a search: --trials 'lr=1,2' is not an optuna.Study"),
        ("--trials folds=2 --return model tok --return-best model", "--return model and --return-best model: a name is every trial's"),
    ],
)
def test_bad_options_are_usage_errors_that_start_nothing(ip: InteractiveShell, line: str, message: str) -> None:
    result, _ = run(ip, f"%%tpu_train {line}\nprint('ran')\n")
    assert isinstance(result.error_in_exec, UsageError)
    assert message in str(result.error_in_exec)


REFUSAL = re.compile(r"(tpu_nb|tpu_nb's selftest|%%?tpu_\w+) did not [^:\n]+:(\n- [^\n]+)+")
"""How every refusal reads: who did not do what, then each problem with its fix (`refused()`'s words)."""


@pytest.mark.parametrize(
    "cell",
    [
        "%%tpu_train --name 1st\nprint('ran')",
        "%%tpu_train --cores-per-trial 2\nprint('ran')",
        "%%tpu_train --trials folds=2 --background\nprint('ran')",
        "%%tpu_train --trials folds=2 --pod my-slice\nprint('ran')",
        "%%tpu_train\nprint('ran')\ndef broken(:\n",
        "%%tpu_train --pod my-slice --backend export\n!echo ran",
        "%%tpu_train --pod my-slice --backend export\nprint('ran', notebook_only)",
        "%%tpu_train --pod my-slice --backend export\nprint('ran')\ndef broken(:\n",
        "%%tpu_prepare\n!echo ran",
        "%%tpu_prepare\nraise ValueError('failed on purpose')",
        "%tpu_checkpoints",
        "%tpu_runs --last 0",
        "%tpu_runs 4 --log {tmp}/log",
        "%tpu_release --grace -1",
        "%tpu_release 0",
        "%tpu_selftest --out {tmp}/a-file",
    ],
)
def test_every_refusal_of_a_magic_is_worded_as_one(ip: InteractiveShell, tmp_path: Path, cell: str) -> None:
    (tmp_path / "a-file").write_text("")
    ip.user_ns["notebook_only"] = 1
    result, captured = run(ip, cell.format(tmp=tmp_path))
    assert isinstance(result.error_in_exec, UsageError)
    assert REFUSAL.fullmatch(str(result.error_in_exec)), str(result.error_in_exec)
    assert "ran" not in captured.stdout.splitlines()  # nothing ran: no line "ran" printed


@pytest.mark.parametrize(
    "line, keywords",
    [
        ("--cores-per-trial 2 --trials-metric acc", {"cores_per_trial": 2, "trials_metric": "acc"}),
        ("--trials folds=2 --background", {"trials": "folds=2", "background": True}),
    ],
)
def test_the_magic_and_launch_refuse_a_sweeps_options_in_the_same_words(ip: InteractiveShell, line: str, keywords: dict[str, Any]) -> None:
    result, _ = run(ip, f"%%tpu_train {line}\nprint('ran')")
    with pytest.raises(LaunchRefused) as refusal:
        tpu_nb.launch(print, **keywords)
    assert str(result.error_in_exec) == str(refusal.value)


def test_a_syntax_error_starts_nothing(ip: InteractiveShell) -> None:
    result, captured = run(ip, "%%tpu_train\nprint('ran')\ndef broken(:\n")
    assert isinstance(result.error_in_exec, UsageError)
    assert "syntax error (line 3)" in str(result.error_in_exec)
    assert "ran" not in captured.stdout


def test_help_documents_the_options(ip: InteractiveShell) -> None:
    doc = ip.magics_manager.magics["cell"]["tpu_train"].__doc__
    for option in ("--cores", "--timeout", "--return", "--all-ranks-output", "--no-progress", "--no-doctor", "--compile-cache"):
        assert option in doc


def test_help_gives_every_default_that_is_a_value(ip: InteractiveShell) -> None:
    """A default of 1 is a value to give (`1 == True` made `1 in (None, False, True, ())` hide it), a switch's is not."""
    doc = " ".join(ip.magics_manager.magics["cell"]["tpu_train"].__doc__.split())
    assert re.search(r"--cores-per-trial K\s.*?\bDefault: 1\.", doc), doc
    assert "Default: True" not in doc and "Default: False" not in doc


SYNCING_LOOP = """%%tpu_train OPTIONS
import time, torch_xla
layer = torch.nn.Linear(4, 1).to(device)
for step in range(1, 61):
    loss = layer(torch.ones(2, 4, device=device)).sum()
    torch_xla.sync()
    value = loss.item()
    report(step=step)
    time.sleep(0.05)
"""


@pytest.mark.parametrize("options, diagnosed", [("", True), ("--no-doctor --compile-cache off", False)])
def test_no_doctor_turns_the_findings_off(ip: InteractiveShell, options: str, diagnosed: bool) -> None:
    ip.run_cell("import torch")
    result, captured = run(ip, SYNCING_LOOP.replace("OPTIONS", options))
    assert result.success, captured.stderr
    assert ("XLA doctor: Host syncs" in captured.stderr) is diagnosed


def test_tpu_runs_lists_the_logged_runs_and_says_which_numbers_exist(ip: InteractiveShell, tmp_path: Path) -> None:
    result, _ = run(ip, f"%%tpu_train --run-log {tmp_path} --cores 1\nreport(step=0, loss=3.0)\nreport(step=1, loss=2.0)\n")
    assert result.success
    with capture_output() as shown:
        ip.run_line_magic("tpu_runs", f"--log {tmp_path}")
    [table] = shown.outputs
    assert table.data["text/plain"].startswith("#1 %%tpu_train") and "loss=2" in table.data["text/plain"]
    assert "<img" in table.data["text/html"]
    with pytest.raises(UsageError, match=r"has no run 4 \(its runs: 1 to 1\)"):
        ip.run_line_magic("tpu_runs", f"4 --log {tmp_path}")
    with pytest.raises(UsageError, match="--last 0"):
        ip.run_line_magic("tpu_runs", f"--last 0 --log {tmp_path}")


def test_tpu_runs_shows_each_runs_tokens_per_second_and_mfu_and_overlays_its_speed(
    ip: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(STAND_IN_PEAK, "1e8")  # FLOP/s for the device's "chip": XLA:CPU has no peak
    cell = "%%tpu_train --run-log {} --cores 1 --flops-per-token 6e3\nimport time\nfor step in range(1, 13):\n"
    cell += "    report(step=step, loss=1 / step, tokens=1000)\n    time.sleep(0.1)\n"
    result, captured = run(ip, cell.format(tmp_path))
    assert result.success, captured.stderr
    [record] = read_log(tmp_path).records
    assert record.tokens_per_second == pytest.approx(10_000, rel=0.3)  # 1,000 tokens a 0.1 s step
    assert record.mfu == pytest.approx(record.tokens_per_second * 6e3 / 1e8)
    with capture_output() as shown:
        ip.run_line_magic("tpu_runs", f"--log {tmp_path} --metric tokens_per_second")
    [table] = shown.outputs
    assert f"tokens/s={format_count_rate(record.tokens_per_second)} MFU={format_mfu(record.mfu)}" in table.data["text/plain"]
    assert ">tokens/s</th>" in table.data["text/html"] and ">MFU</th>" in table.data["text/html"] and "<img" in table.data["text/html"]


def test_tpu_runs_lists_the_good_records_of_a_damaged_log_and_says_how_many_lines_it_passed_over(
    ip: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_fields = '"started": 1700000000.0, "seconds": 5.0, "status": "done"'
    (tmp_path / "runs.jsonl").write_bytes(
        f'{{"number": 1, "title": "first", {run_fields}, "final": {{"loss": 0.5}}, "curves": {{"loss": [[0, 1.0], [1, 0.5]]}}}}\n'.encode()
        + b'["a list", "not a record"]\n'
        + f'{{"number": 2, "title": "curves not a dict", {run_fields}, "curves": [[0, 1.0]]}}\n'.encode()
        + f'{{"number": 3, "title": "a string metric", {run_fields}, "final": {{"loss": "low"}}}}\n'.encode()
        + b"\xff\xfe{ damaged bytes\n"
        + b'{"number": 1e999, "title": "x"}\n'
        + b'{"number": 4, "title": "cut sh'  # the disk filled
    )
    with capture_output() as shown:
        ip.run_line_magic("tpu_runs", f"1 2 3 --log {tmp_path}")
    [table] = shown.outputs
    listed = table.data["text/plain"].splitlines()
    assert [line.split("  ")[0] for line in listed] == ["#1 first", "#2 curves not a dict", "#3 a string metric"]
    assert "loss=0.5" in listed[0] and "<img" in table.data["text/html"]
    assert f"tpu_nb: {tmp_path / 'runs.jsonl'}: passed over 4 lines (no run's record" in shown.stderr
    assert "and 2 values in the records" in shown.stderr

    def refused(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("tpu_nb.kernel.history.log.open", refused, raising=False)  # the OS refusing the file
    with pytest.raises(UsageError, match=r"runs.jsonl cannot be read \(\[Errno 13\] Permission denied\): name another log"):
        ip.run_line_magic("tpu_runs", f"--log {tmp_path}")


def test_tpu_selftest_refuses_an_out_directory_it_cannot_write_to_before_any_check(
    ip: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refuse_writes_in(tmp_path, monkeypatch)
    with capture_output() as shown, pytest.raises(UsageError) as refusal:
        ip.run_line_magic("tpu_selftest", f"--quick --out {tmp_path}")
    assert str(refusal.value) == (
        f"tpu_nb's selftest did not start the run:\n- --out {tmp_path}: cannot write the report there (Read-only file system): "
        "give a directory you can write to."
    )
    assert shown.outputs == []  # no table: nothing ran
    with pytest.raises(LaunchRefused, match=r"tpu_nb's selftest did not start the run:\n- out='.*': cannot write the report there"):
        selftest.run(quick=True, out=tmp_path)  # the Python API, the same
