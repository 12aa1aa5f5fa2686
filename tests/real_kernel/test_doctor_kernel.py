"""The XLA doctor in a real kernel: a finding names the cell's line as the notebook numbers it, live and in the summary."""

from __future__ import annotations

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
    place = "In [2], line 10: value = loss.item()"  # line 1 is the %%tpu_train line, as in tracebacks
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
    assert "In [2], line 10: torch_xla.sync() (6 graphs); In [2], line 5: x = torch.randn(8 + step % 6, 64).to(device) (6 shapes)" in text
