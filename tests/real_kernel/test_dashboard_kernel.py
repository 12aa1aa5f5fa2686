"""The live dashboard in a real kernel, as nbclient stores it (store_widget_state=True)."""

from __future__ import annotations

import base64
from typing import Any

from support.kernel import Kernel, errors_of, text_of

TRAINER_SETUP = """
import tempfile, torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments
torch.manual_seed(0)
config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=32, num_labels=2)
model = BertForSequenceClassification(config)
ids = torch.randint(0, 100, (512, 16), generator=torch.Generator().manual_seed(0))
labels = (ids[:, 0] > 50).long()
train_data = [{"input_ids": ids[i], "labels": labels[i]} for i in range(448)]
eval_data = [{"input_ids": ids[i], "labels": labels[i]} for i in range(448, 512)]
output_dir = tempfile.mkdtemp()
"""

TRAINER_CELL = """%%tpu_train --return model
args = TrainingArguments(output_dir, per_device_train_batch_size=16, max_steps=24, logging_steps=4,
                         eval_strategy="steps", eval_steps=12, report_to=[], save_strategy="no")
trainer = Trainer(model=model, args=args, train_dataset=train_data, eval_dataset=eval_data)
trainer.train().global_step
"""


def widgets(kernel: Kernel, model_name: str) -> list[dict[str, Any]]:
    return [state for state in kernel.client.widget_state.values() if state.get("_model_name") == model_name]


def test_a_default_trainer_reports_live_and_ends_with_a_static_summary(kernel: Kernel) -> None:
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    kernel.run(TRAINER_SETUP, allow_errors=False)
    cell = kernel.run(TRAINER_CELL, timeout=300)
    assert not errors_of(cell), text_of(cell)
    assert "24" in text_of(cell)

    [bar] = widgets(kernel, "IntProgressModel")
    assert bar["value"] == bar["max"] == 24
    assert bar["bar_style"] == "success"
    [chart_id] = [comm for comm, state in kernel.client.widget_state.items() if state.get("_model_name") == "ImageModel"]
    [png] = kernel.client.widget_buffers[chart_id].values()
    assert base64.b64decode(png["data"]).startswith(b"\x89PNG")
    html = "\n".join(state["value"] for state in widgets(kernel, "HTMLModel"))
    assert "Training Loss" in html and "Validation Loss" in html
    assert "fused AdamW fails on XLA" in html  # the default optimizer was made XLA-safe, and said so

    summaries = [output for output in cell.outputs if "image/png" in output.get("data", {})]
    assert len(summaries) == 1
    # The summary took the dashboard's place: the saved cell holds one view of the run, no widget.
    assert not [output for output in cell.outputs if "application/vnd.jupyter.widget-view+json" in output.get("data", {})]
    summary = summaries[0].data
    assert "done" in summary["text/plain"] and "24/24" in summary["text/plain"]
    assert "<table" in summary["text/html"]


def test_printed_text_goes_below_the_run_summary(kernel: Kernel) -> None:
    kernel.run("%load_ext tpu_nb\nimport time, torch", allow_errors=False)
    cell = kernel.run(
        "%%tpu_train --all-ranks-output\n"
        "for step in range(1, 31):\n"
        "    print(f'line {step}')\n"
        "    report(step=step, loss=1.0 / step, max_steps=30)\n"
        "    time.sleep(0.02)\n",
        timeout=300,
    )
    assert not errors_of(cell), text_of(cell)
    kinds = [
        "summary" if "tpu-nb-summary" in output.get("data", {}).get("text/html", "") else output.output_type for output in cell.outputs
    ]
    assert kinds[0] == "summary" and kinds.count("summary") == 1, kinds
    assert set(kinds[1:]) == {"stream"}
    assert "line 30" in text_of(cell)
