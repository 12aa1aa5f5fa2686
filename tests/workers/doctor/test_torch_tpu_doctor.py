"""The doctor on TorchTPU: compilations after warm-up said once, with the trace's reasons and the lines of the user's code."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tpu_nb.workers.doctor.torch_tpu_doctor import RECOMPILING, TorchTpuDoctor
from tpu_nb.workers.readings.device_readings import CompileReading


def miss(source: Path, line: int, reason: str = "item()") -> str:
    """A traced cache miss, as torch 2.14.1 and torch_tpu 0.2.0 write it (see test_torch_tpu_readings.py)."""
    payload = f"# Graph: 1 ops, 1 inputs, reason: {reason}\n%0: f32[8] = input\n%1: f32[8] = relu.default(%0)    # {source}:{line} in step\nreturn %1"
    metadata = {
        "artifact": {"name": "torchtpu_eager_aten_graph", "encoding": "string", "op_name": "torchtpu_eager/kRelu"}
        | {"cache_hit": False, "compile_failed": False, "reason": reason},
        "has_payload": hashlib.md5(payload.encode(), usedforsecurity=False).hexdigest(),
    }
    lines = "".join(f"\n\t{text}" for text in payload.split("\n"))
    return f"V1201 12:00:00.000001 4242 torch_tpu/_internal/tracing/__init__.py:83] {json.dumps(metadata)}{lines}\n"


class Compiles:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> CompileReading:
        return CompileReading(self.count, 2.0 * self.count, self.count, self.count)


def test_a_step_that_compiles_again_after_warm_up_is_said_once_with_its_reasons_and_lines(tmp_path: Path) -> None:
    source = tmp_path / "train.py"
    source.write_text("for x in batches:\n    loss = model(x).relu().sum()\n    print(loss.item())\n")
    trace = tmp_path / "trace"
    trace.mkdir()
    log = trace / "dedicated_log_torch_trace_rank_0_x.log"
    compiles = Compiles()
    doctor = TorchTpuDoctor(0, compiles, trace)
    compiles.count = 3
    log.write_text(miss(source, 2) + miss(source, 3))  # warm-up's compilations
    assert doctor.check(2, 0).diagnoses == ()
    assert doctor.check(6, 0).diagnoses == ()  # warm-up ends: its compilations are the baseline
    with log.open("a") as appending:
        appending.write(miss(source, 2, ".cpu()") + miss(source, 3))  # a new batch shape at step 9: compiled again
    compiles.count = 5
    checkup = doctor.check(10, 0, final=True)
    [diagnosis] = checkup.diagnoses
    assert diagnosis.key == RECOMPILING and diagnosis.step == 10
    assert diagnosis.evidence == (
        "2 graph(s) compiled after warm-up (step 5), by step 10: 1 after a tensor moved with .cpu(); 1 after a value read with .item()"
    )
    assert diagnosis.places == ("train.py, line 2: loss = model(x).relu().sum()", "train.py, line 3: print(loss.item())")
    assert "pad or bucket" in diagnosis.fix and "report(loss=...)" in diagnosis.fix
    assert [cause.place for cause in checkup.causes] == list(diagnosis.places)
    compiles.count = 6
    assert doctor.check(12, 0).diagnoses == ()  # said once


def test_without_a_trace_the_statistics_alone_say_it(tmp_path: Path) -> None:
    compiles = Compiles()
    doctor = TorchTpuDoctor(1, compiles, None)
    compiles.count = 2
    doctor.check(5, 0)
    assert doctor.check(8, 0).diagnoses == ()  # nothing new
    compiles.count = 4
    [diagnosis] = doctor.check(9, 0).diagnoses
    assert diagnosis.rank == 1 and diagnosis.evidence == "2 graph(s) compiled after warm-up (step 5), by step 9" and diagnosis.places == ()
