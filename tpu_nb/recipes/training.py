"""Training a prepared fine-tuning in a TPU worker, and getting the trained model back in the notebook.

`TrainingArguments` and `Trainer` are built here, inside the worker only: in
transformers 5 with torch_xla installed, building either (or reading
`args.device`) starts the XLA runtime, and a kernel that did that can no
longer start workers.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tpu_nb
from tpu_nb.recipes.config import CAUSAL_LM, FSDP, MASKED_LM, TEXT_CLASSIFICATION, TrainConfig
from tpu_nb.workers.trainer.hook import XLA_SAFE_OPTIM

if TYPE_CHECKING:
    from datasets import Dataset
    from transformers import PreTrainedModel, PreTrainedTokenizerBase, Trainer, TrainerCallback, TrainingArguments

_TIMING_KEYS = ("runtime", "samples_per_second", "steps_per_second")
# Trainer adds its own set-up time to the first evaluation's metrics; it says nothing about the model.
_NOT_METRICS = ("eval_model_preparation_time",)


ADAPTER_CONFIG = "adapter_config.json"


class NotInWorker(RuntimeError):
    """`FineTuning.train()` was called in the notebook's own process."""


class WrongLaunch(RuntimeError):
    """`FineTuning.train()` runs in a kind of run its strategy cannot use."""


@dataclass(frozen=True, slots=True)
class TrainingResult:
    """What a training run gives back (rank 0's): small, so it travels back to the notebook cheaply."""

    metrics: Mapping[str, float]
    """Final evaluation: accuracy and macro_f1 (classification) or loss and perplexity (language modelling)."""
    metrics_before: Mapping[str, float] | None
    """The same evaluation before training, when asked for with `evaluate_first=True`."""
    train_loss: float
    steps: int
    seconds: float
    output_dir: str
    """Where the trained model and tokenizer were saved (load with `from_pretrained`)."""

    def __str__(self) -> str:
        shown = ", ".join(f"{name} {value:.4g}" for name, value in self.metrics.items() if name not in (*_TIMING_KEYS, "epoch"))
        return f"trained {self.steps} steps in {self.seconds:.0f}s; {shown}; saved to {self.output_dir}"


@dataclass(frozen=True, slots=True, repr=False)
class FineTuning:
    """A model, its tokenizer and tokenized data, prepared in the notebook by `prepare(config)`.

    Train it on every TPU core, either way:

        result = tpu_nb.launch(fine_tuning.train)
        model = fine_tuning.load_trained()          # the saved weights, into fine_tuning.model in place

        %%tpu_train --return model                  # with `model = fine_tuning.model` in the notebook:
        result = fine_tuning.train()                # `model` is updated in place afterwards
    """

    config: TrainConfig
    tokenizer: PreTrainedTokenizerBase
    model: PreTrainedModel
    train_dataset: Dataset
    eval_dataset: Dataset
    labels: tuple[str, ...]
    """Class names in id order (classification); empty for language modelling."""

    def __repr__(self) -> str:
        config = self.config
        classes = f", {len(self.labels)} classes ({', '.join(self.labels[:5])})" if self.labels else ""
        unit = "examples" if config.task == TEXT_CLASSIFICATION else "blocks"
        return (
            f"FineTuning({config.task} of {config.model} on {config.dataset}: {len(self.train_dataset)} training and "
            f"{len(self.eval_dataset)} evaluation {unit} of {config.max_length} tokens{classes})"
        )

    def train(self, evaluate_first: bool = False, callbacks: Sequence[TrainerCallback] = ()) -> TrainingResult:
        """Train, evaluate and save to `config.output_dir`; runs in a TPU worker (see the class docstring).

        `evaluate_first` also evaluates the untrained model (into
        `metrics_before`); `callbacks` are added to the Trainer.
        """
        _refuse_outside_workers()
        batch_devices = _check_strategy(self.config)
        devices_in_process, first_in_process = _devices_of_this_process()
        model: Any = model_for_this_device(self.model, devices_in_process)
        if self.config.lora_rank is not None:
            model = with_lora(model, self.config.lora_rank)
        trainer = self._trainer(model, callbacks, batch_devices)
        before = _evaluate(trainer, self.config) if evaluate_first else None
        started = time.monotonic()
        output = trainer.train()
        seconds = time.monotonic() - started
        metrics = _evaluate(trainer, self.config)
        # Every rank calls it: on XLA it meets the others at a rendezvous and only the master writes.
        trainer.save_model()
        if self.config.lora_rank is not None:
            # The adapter is saved; merged into the weights it was trained with, `model`
            # (this worker's copy of the notebook's) is the trained model for --return.
            model = model.merge_and_unload()
        if model is not self.model and first_in_process:
            self.model.load_state_dict({name: tensor.cpu() for name, tensor in model.state_dict().items()})
        return TrainingResult(
            metrics=metrics,
            metrics_before=before,
            train_loss=float(output.training_loss),
            steps=int(output.global_step),
            seconds=seconds,
            output_dir=str(Path(self.config.output_dir).absolute()),
        )

    def load_trained(self) -> PreTrainedModel:
        """In the notebook after training: load the saved weights into `self.model` in place and return it.

        A LoRA adapter is merged into the base weights (of a copy: `self.model` keeps its own modules).
        """
        import copy

        import torch

        from tpu_nb.recipes.local_models import is_model_directory

        output_dir = Path(self.config.output_dir).absolute()
        if (output_dir / ADAPTER_CONFIG).exists():
            from peft import PeftModel

            trained = PeftModel.from_pretrained(copy.deepcopy(self.model), output_dir).merge_and_unload()
        elif is_model_directory(output_dir):
            trained = type(self.model).from_pretrained(output_dir, dtype=torch.float32)
        else:
            raise FileNotFoundError(f'no trained model in "{output_dir}" yet: train first, with {launch_line(self.config)}.')
        self.model.load_state_dict(trained.state_dict())
        return self.model

    def _trainer(self, model: PreTrainedModel, callbacks: Sequence[TrainerCallback], batch_devices: int) -> Trainer:
        from transformers import DataCollatorForLanguageModeling, Trainer, default_data_collator

        from tpu_nb.recipes.metrics import classification_metrics

        config = self.config
        if config.task == MASKED_LM:
            collator: Any = DataCollatorForLanguageModeling(self.tokenizer, mlm_probability=config.mlm_probability)
        else:
            collator = default_data_collator  # every example already has the same length
        return Trainer(
            model=model,
            args=training_arguments(config, batch_devices),
            data_collator=collator,
            train_dataset=self.train_dataset,
            eval_dataset=self.eval_dataset,
            processing_class=self.tokenizer,
            # Language models are judged by their loss (and perplexity): no logits are gathered for them.
            compute_metrics=classification_metrics(len(self.labels)) if config.task == TEXT_CLASSIFICATION else None,
            callbacks=list(callbacks),
        )


def training_arguments(config: TrainConfig, batch_devices: int = 1) -> TrainingArguments:
    """TrainingArguments that work on XLA devices with transformers 5 (build them in a worker only).

    `batch_devices`: how many cores one process feeds (under FSDP, one SPMD
    process feeds them all, so its batch is the per-core batch times them).
    """
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=config.output_dir,
        optim=XLA_SAFE_OPTIM,
        per_device_train_batch_size=config.per_core_batch_size * batch_devices,
        per_device_eval_batch_size=config.per_core_batch_size * batch_devices,
        num_train_epochs=config.epochs,
        max_steps=-1 if config.max_steps is None else config.max_steps,
        learning_rate=config.learning_rate,
        warmup_steps=config.warmup,
        weight_decay=config.weight_decay,
        bf16=config.bf16,
        eval_strategy="no" if config.eval_steps is None else "steps",
        eval_steps=config.eval_steps,
        save_strategy="no" if config.save_steps is None else "steps",
        save_steps=config.save_steps or 500,
        logging_steps=config.logging_steps,
        # A smaller last batch would have a shape of its own, hence a graph compiled for it alone.
        dataloader_drop_last=True,
        # DataLoader processes forked from an XLA worker are not safe; the data is tokenized already.
        dataloader_num_workers=0,
        dataloader_pin_memory=False,  # pinned memory is for CUDA; on XLA it only warns
        # Move predictions to the CPU after every evaluation step: concatenated on the
        # device they grow by a batch per step, and every new shape compiles a new graph.
        eval_accumulation_steps=1,
        report_to=[],  # tpu_nb's dashboard shows progress; loggers would run in every forked worker
        disable_tqdm=True,
        seed=config.seed,
    )


def with_lora(model: PreTrainedModel, rank: int) -> Any:
    """`model` with LoRA adapters of `rank` on the layers peft picks for its architecture (in the worker)."""
    from peft import LoraConfig, TaskType, get_peft_model

    return get_peft_model(model, LoraConfig(task_type=TaskType.CAUSAL_LM, r=rank, lora_alpha=2 * rank, lora_dropout=0.0))


def launch_line(config: TrainConfig) -> str:
    """How to train this configuration from the notebook."""
    return "tpu_nb.launch(fine_tuning.train, spmd=True)" if config.strategy == FSDP else "tpu_nb.launch(fine_tuning.train)"


def _check_strategy(config: TrainConfig) -> int:
    """How many cores this process feeds: all of them under FSDP (which needs an SPMD run), else one."""
    import torch_xla.runtime as xr

    spmd = xr.is_spmd()
    if config.strategy == FSDP and not spmd:
        raise WrongLaunch(
            'strategy "fsdp" trains in an SPMD run, where one process drives every core: call '
            "tpu_nb.launch(fine_tuning.train, spmd=True), or use a %%tpu_train --spmd cell."
        )
    return int(xr.global_runtime_device_count()) if spmd else 1


def _evaluate(trainer: Trainer, config: TrainConfig) -> dict[str, float]:
    """Evaluation metrics without their "eval_" prefix (which the live dashboard keys on)."""
    from tpu_nb.recipes.metrics import with_perplexity

    metrics = trainer.evaluate()
    if config.task in (MASKED_LM, CAUSAL_LM):
        metrics = with_perplexity(metrics)
    return {name.removeprefix("eval_"): float(value) for name, value in metrics.items() if name not in _NOT_METRICS}


def model_for_this_device(model: PreTrainedModel, devices_in_process: int) -> PreTrainedModel:
    """The model this device trains: the forked one, or a copy when threads share it.

    On TPU v2/v3 one worker process drives two devices from two threads, and
    both see the same forked model object; each Trainer moves its model to its
    own device, so each thread needs its own copy. The copies are made before
    anything moves; the first device's thread later puts its trained weights
    back into the shared object (for `%%tpu_train --return model`).
    """
    import copy

    return model if devices_in_process == 1 else copy.deepcopy(model)


def _devices_of_this_process() -> tuple[int, bool]:
    """How many XLA devices this worker process drives, and whether this thread has the first."""
    import torch_xla.runtime as xr

    devices = xr.addressable_device_count()
    # Local ordinals number the host's devices; a process drives a consecutive run of them.
    return devices, xr.local_ordinal() % devices == 0


def _refuse_outside_workers() -> None:
    if not tpu_nb.in_worker():
        raise NotInWorker(
            "FineTuning.train() runs on the TPU cores: call it as tpu_nb.launch(fine_tuning.train) or inside a "
            "%%tpu_train cell. Run here, it would start the XLA runtime in the notebook, and then no TPU worker could start."
        )
