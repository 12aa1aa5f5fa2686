"""The XLA doctor in a real kernel: a finding names the cell's line as the notebook numbers it, live and in the summary."""

from __future__ import annotations

import nbformat
from support.kernel import Kernel, errors_of, summary_of, text_of

LOOP = """%%tpu_train
layer = torch.nn.Linear(8, 2).to(device)
optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
for step in range(1, 61):
    loss = layer(torch.randn(16, 8, device=device)).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    torch_xla.sync()
    READ
    report(step=step, loss=loss, max_steps=60)
    time.sleep(0.05)
"""


def test_a_per_step_item_is_named_by_its_cell_line_live_and_in_the_summary(kernel: Kernel) -> None:
    kernel.run("%load_ext tpu_nb\nimport time, torch, torch_xla", allow_errors=False)
    cell = kernel.run(LOOP.replace("READ", "value = loss.item()"), timeout=300)
    assert not errors_of(cell), text_of(cell)
    place = f"In [{cell.execution_count}], line 10: value = loss.item()"  # line 1 is the %%tpu_train line, as in tracebacks
    live = "\n".join(state["value"] for state in kernel.client.widget_state.values() if state.get("_model_name") == "HTMLModel")
    assert "Host syncs" in live and place in live
    summary = summary_of(cell)
    assert "Host syncs" in summary["text/html"] and place in summary["text/html"]
    assert f"At {place}" in summary["text/plain"]


def test_a_clean_cell_shows_no_finding(kernel: Kernel) -> None:
    kernel.run("%load_ext tpu_nb\nimport time, torch, torch_xla", allow_errors=False)
    cell = kernel.run(LOOP.replace("READ", "pass"), timeout=300)
    assert not errors_of(cell), text_of(cell)
    assert "XLA doctor" not in summary_of(cell)["text/plain"]
    assert "tpu-nb-doctor" not in summary_of(cell)["text/html"]


CYCLING = """%%tpu_train
layer = torch.nn.Linear(64, 8).to(device)
optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
for step in range(1, 41):
    x = torch.randn(8 + step % 6, 64).to(device)
    loss = layer(x).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    torch_xla.sync()
    report(step=step, loss=loss)
"""


def test_a_step_compiled_per_batch_size_in_warm_up_is_named_by_its_cell_lines(kernel: Kernel) -> None:
    kernel.run("%load_ext tpu_nb\nimport torch, torch_xla", allow_errors=False)
    cell = kernel.run(CYCLING, timeout=300)
    assert not errors_of(cell), text_of(cell)
    text = summary_of(cell)["text/plain"]
    assert "XLA doctor: Compiled once per input shape: the step's graph was compiled 6 times for 6 input shapes" in text
    at = f"In [{cell.execution_count}]"
    assert f"{at}, line 10: torch_xla.sync() (6 graphs); {at}, line 5: x = torch.randn(8 + step % 6, 64).to(device) (6 shapes)" in text


STEP_LOOP = """%%tpu_train
layer = torch.nn.Linear(8, 2).to(device)
optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
for step in range(1, STEPS + 1):
    x = torch.randn(ROWS, 8, device=device)
    loss = layer(x).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    torch_xla.sync()
    report(step=step, loss=loss)
"""

NONZERO = """%%tpu_train
layer = torch.nn.Linear(8, 2).to(device)
optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
for step in range(1, 21):
    x = torch.randn(16, 8, device=device)
    keep = (x[:, 0] > 0).nonzero().squeeze(1)
    loss = layer(x[keep]).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    torch_xla.sync()
    report(step=step, loss=loss)
"""

PADDED_TO_THE_LONGEST = """%%tpu_train
from torch.utils.data import DataLoader
sequences = [list(range(1, 4 + (7 * i) % 29)) for i in range(160)]  # token ids of 3 to 31 tokens
def pad_to_longest(batch):  # what a tokenizer's padding=True does: each batch as long as its longest
    longest = max(len(ids) for ids in batch)
    return torch.tensor([ids + [0] * (longest - len(ids)) for ids in batch])
embedding = torch.nn.Embedding(32, 8).to(device)
optimizer = torch.optim.SGD(embedding.parameters(), lr=0.1)
for step, ids in enumerate(DataLoader(sequences, batch_size=8, collate_fn=pad_to_longest), start=1):
    ids = ids.to(device)
    loss = embedding(ids).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    torch_xla.sync()
    report(step=step, loss=loss)
"""

SLEEPING_IN_A_FUNCTION = """%%tpu_train --background --name run
def sleeping():
    time.sleep(3600)
report(step=1, loss=1.0)
sleeping()
"""


def step_loop(rows: str, steps: int) -> str:
    return STEP_LOOP.replace("ROWS", rows).replace("STEPS", str(steps))


def where(cell: nbformat.NotebookNode) -> str:
    """How the doctor names a cell: by its number in this kernel's history."""
    return f"In [{cell.execution_count}]"


def health_of(cell: object) -> str:
    return summary_of(cell)["text/plain"]  # type: ignore[arg-type]


def test_compile_health_is_judged_step_by_step_and_a_stack_names_the_cell_functions_it_is_in(kernel: Kernel) -> None:
    """Loops of 3 to 40 steps whose sizes change in each way the doctor tells apart, a clean one, and a stuck function."""
    kernel.run("%load_ext tpu_nb\nimport time, torch, torch_xla", allow_errors=False)
    growing = kernel.run(step_loop("4 + step", 14), timeout=300)
    assert not errors_of(growing), text_of(growing)
    text = health_of(growing)
    assert "compiled again at 9 of 9 steps after warm-up (step 5), first at step 6 (rank 0)" in text, text
    assert (
        f"a tensor made on the device at a size that changes between steps at {where(growing)}, line 5: x = torch.randn(4 + step, 8" in text
    )
    live = "\n".join(state["value"] for state in kernel.client.widget_state.values() if state.get("_model_name") == "HTMLModel")
    assert "tpu-nb-xla-warning" in live and "recompiling: " in live

    cycling = kernel.run(step_loop("4 + step % 6", 40), timeout=300)  # six sizes, the sixth at step 6
    text = health_of(cycling)
    assert "compiled again at 1 of 35 steps after warm-up (step 5), first at step 6 (rank 0)" in text, text
    assert f"{where(cycling)}, line 5: x = torch.randn(4 + step % 6, 8, device=device)" in text

    nonzero = kernel.run(NONZERO, timeout=300)
    text = health_of(nonzero)
    assert "compiled again at " in text and "a data-dependent op (.nonzero())" in text, text
    assert f"{where(nonzero)}, line 6: keep = (x[:, 0] > 0).nonzero().squeeze(1)" in text

    padded = kernel.run(PADDED_TO_THE_LONGEST, timeout=300)
    text = health_of(padded)
    assert "compiled again at " in text and "Why: input shape changed (length " in text, text
    assert f"at {where(padded)}, line 10: ids = ids.to(device). Fix: pad every batch to one length" in text

    clean = kernel.run(step_loop("16", 20), timeout=300)
    assert "stable after warm-up: none of the 15 steps after it compiled" in health_of(clean), health_of(clean)
    short = kernel.run(step_loop("16", 3), timeout=300)
    assert "3 steps: too short to judge" in health_of(short) and "stable" not in health_of(short), health_of(short)

    sleeping = kernel.run(SLEEPING_IN_A_FUNCTION, allow_errors=False)
    answer = kernel.run(
        "while not run.metrics and run.status == 'running': time.sleep(0.2)\ntime.sleep(0.5)\nprint(run.stacks().ranks[0].where)",
        allow_errors=False,
        timeout=120,
    )
    assert f"{where(sleeping)}, line 5: sleeping(); line 3, in sleeping: time.sleep(3600)" in text_of(answer), text_of(answer)
    kernel.run("run.kill()", timeout=60)
