"""Training end to end on XLA:CPU: static shapes, a model that learns, and the trained model in the notebook."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from recipe_support import xla_runtime_started
from transformers import AutoModelForSequenceClassification, TrainerCallback, pipeline

from tpu_nb.recipes import TrainConfig
from tpu_nb.recipes.demo_data import demo_dataset

WARM_STEP = 15


def compile_count() -> int:
    import torch_xla.debug.metrics as met

    data = met.metric_data("CompileTime")
    return 0 if data is None else int(data[0])


class CompileProbe(TrainerCallback):  # type: ignore[misc]
    """Inside the worker: the XLA compilations after warm-up and at the end, and the arguments in use."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.arguments: dict[str, Any] = {}

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        names = (
            "optim",
            "dataloader_drop_last",
            "dataloader_num_workers",
            "report_to",
            "eval_accumulation_steps",
            "per_device_train_batch_size",
        )
        self.arguments = {name: str(getattr(getattr(args, name), "value", getattr(args, name))) for name in names}

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == WARM_STEP:
            self.counts["warm"] = compile_count()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.counts["end"] = compile_count()


PREPARE = """
from tpu_nb.recipes import prepare
fine_tuning = prepare(config)
model, tokenizer = fine_tuning.model, fine_tuning.tokenizer
untrained = {name: tensor.clone() for name, tensor in model.state_dict().items()}
"""

TRAIN = """%%tpu_train --return model result compile_counts arguments
probe = CompileProbe()
result = fine_tuning.train(evaluate_first=True, callbacks=[probe])
compile_counts, arguments = probe.counts, probe.arguments
"""


def sentiment_accuracy(model: Any, tokenizer: Any, rows: int = 64) -> float:
    validation = demo_dataset()["validation"].select(range(rows))
    classify = pipeline("text-classification", model=model, tokenizer=tokenizer)
    predicted = [prediction["label"] for prediction in classify(list(validation["text"]))]
    names = validation.features["label"].names
    return sum(name == names[label] for name, label in zip(predicted, validation["label"], strict=True)) / rows


def test_classification_learns_on_xla_with_few_compilations(ip: InteractiveShell, tiny_bert: Path, tmp_path: Path) -> None:
    config = TrainConfig(
        model=str(tiny_bert), max_length=32, per_core_batch_size=128, max_steps=60, learning_rate=3e-3, warmup=0.1, weight_decay=0.0,
        eval_steps=30, logging_steps=10, max_eval_samples=256, output_dir=str(tmp_path / "out"),
    )  # fmt: skip
    ip.user_ns.update(config=config, CompileProbe=CompileProbe)
    assert ip.run_cell(PREPARE).success
    with capture_output() as captured:
        cell = ip.run_cell(TRAIN)
    assert cell.success, captured.stdout + captured.stderr
    namespace = ip.user_ns
    result = namespace["result"]

    # Static shapes: nothing compiles after warm-up (evaluation graphs compiled with evaluate_first).
    counts = namespace["compile_counts"]
    assert counts["warm"] == counts["end"] <= 20, counts
    assert namespace["arguments"] == {
        "optim": "adamw_torch", "dataloader_drop_last": "True", "dataloader_num_workers": "0", "report_to": "[]",
        "eval_accumulation_steps": "1", "per_device_train_batch_size": "128",
    }  # fmt: skip

    # It learned: from chance to clearly better, on held-out sentences.
    assert result.steps == 60 and math.isfinite(result.train_loss)
    before, after = result.metrics_before["accuracy"], result.metrics["accuracy"]
    assert before < 0.6 and after > before + 0.15, (before, after)
    assert set(result.metrics) >= {"accuracy", "macro_f1", "loss"}

    # --return model: the notebook's own model object now holds rank 0's trained weights.
    assert "updated `model` in place" in captured.stdout
    model = namespace["model"]
    assert model is namespace["fine_tuning"].model
    assert any(not torch.equal(namespace["untrained"][name], tensor) for name, tensor in model.state_dict().items())
    assert sentiment_accuracy(model, namespace["tokenizer"]) > 0.65

    # The output directory holds the same model and its tokenizer, ready for a pipeline.
    saved = AutoModelForSequenceClassification.from_pretrained(result.output_dir)
    assert saved.config.id2label == {0: "negative", 1: "positive"}
    assert all(torch.equal(tensor, model.state_dict()[name]) for name, tensor in saved.state_dict().items())
    assert (Path(result.output_dir) / "tokenizer.json").is_file()
    assert not xla_runtime_started()


# The pretrained MiniLM fine-tuned end to end (with predictions through a
# pipeline) is tests/notebooks/test_notebooks.py::test_finetune_text_classification.


def test_threads_sharing_a_process_train_their_own_copy(tiny_bert: Path) -> None:
    from tpu_nb.recipes.training import model_for_this_device

    model = AutoModelForSequenceClassification.from_pretrained(tiny_bert, num_labels=2)
    assert model_for_this_device(model, devices_in_process=1) is model  # v4 and later, and XLA:CPU
    copy = model_for_this_device(model, devices_in_process=2)  # TPU v2/v3: two device threads per process
    assert copy is not model
    assert all(torch.equal(tensor, model.state_dict()[name]) for name, tensor in copy.state_dict().items())
    assert all(mine.data_ptr() != theirs.data_ptr() for mine, theirs in zip(copy.parameters(), model.parameters(), strict=True))


def fsdp_lora_config(tiny_llama: Path, output_dir: Path) -> TrainConfig:
    return TrainConfig(
        model=str(tiny_llama),
        task="causal-lm",
        dataset="demo",
        max_length=32,
        per_core_batch_size=2,
        max_steps=4,
        learning_rate=1e-2,
        warmup=0.0,
        logging_steps=2,
        max_train_samples=400,
        max_eval_samples=64,
        strategy="fsdp",
        lora_rank=4,
        output_dir=str(output_dir),
    )


def test_fsdp_with_lora_trains_the_adapter_and_loads_it_merged(tiny_llama: Path, tmp_path: Path) -> None:
    import tpu_nb
    from tpu_nb.recipes import prepare

    fine_tuning = prepare(fsdp_lora_config(tiny_llama, tmp_path / "out"))
    before = {name: tensor.clone() for name, tensor in fine_tuning.model.state_dict().items()}
    result = tpu_nb.launch(fine_tuning.train, spmd=True, cores=4, progress=False)
    assert result.steps == 4 and math.isfinite(result.metrics["perplexity"])
    assert (tmp_path / "out" / "adapter_config.json").exists() and (tmp_path / "out" / "adapter_model.safetensors").exists()
    assert not xla_runtime_started()
    model = fine_tuning.load_trained()
    changed = [name for name, tensor in model.state_dict().items() if not torch.equal(tensor, before[name])]
    # Merged into the attention projections peft adapts for Llama; nothing else moved.
    assert changed and all(name.endswith(("q_proj.weight", "v_proj.weight")) for name in changed), changed


def test_fsdp_needs_an_spmd_run_and_says_how(tiny_llama: Path, tmp_path: Path) -> None:
    import pytest

    import tpu_nb
    from tpu_nb.kernel.endings.notebook_errors import WorkerError
    from tpu_nb.recipes import prepare

    fine_tuning = prepare(fsdp_lora_config(tiny_llama, tmp_path / "out").replace(lora_rank=None))
    with pytest.raises(WorkerError, match=r"strategy \"fsdp\" trains in an SPMD run.*tpu_nb.launch\(fine_tuning.train, spmd=True\)"):
        tpu_nb.launch(fine_tuning.train, progress=False)
