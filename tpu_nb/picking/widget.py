"""The picker widget: ipywidgets glue around the form, the checks, the preview and the two actions.

Core widgets only, so Colab renders it without a custom widget manager.
Everything it decides is in `form`, `preview` and `actions`; this module
only moves values between those and the widgets.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import ipywidgets as widgets
from IPython.display import display

from tpu_nb.kernel.endings.notebook_errors import TrainingInterrupted
from tpu_nb.picking.actions import insert_cell, train_now
from tpu_nb.picking.form import (
    PER_TASK_FIELDS,
    SUGGESTED_DATASETS,
    config_from_form,
    data_files_in,
    default_config,
    form_values,
    guess_label_column,
    guess_text_column,
    model_options,
    save_upload,
)
from tpu_nb.picking.preview import make_preview, preview_html
from tpu_nb.picking.uploads import uploaded_files
from tpu_nb.recipes.codegen import code_for
from tpu_nb.recipes.config import CAUSAL_LM, FSDP, STRATEGIES, TASKS, TrainConfig
from tpu_nb.recipes.facts import gather_facts
from tpu_nb.recipes.local_models import find_local_models
from tpu_nb.recipes.memory import estimate_for
from tpu_nb.recipes.sources import DATA_FILE_BUILDERS, display_path
from tpu_nb.recipes.training import FineTuning, TrainingResult
from tpu_nb.recipes.validation import ConfigProblem, DatasetFacts, Facts, ModelFacts, validate
from tpu_nb.runtime import detect

UPLOAD_DIRECTORY = "tpu_nb_uploads"
DEFAULT_NAME = "tuned"
# A preview needs the data and the tokenizer: problems with these fields block it.
_DATA_FIELDS = frozenset({"task", "model", "dataset", "dataset_config", "train_split", "eval_split", "text_column", "label_column"})
_WIDE = widgets.Layout(width="520px")
_STYLE = {"description_width": "150px"}


class Picker:
    """Pick a task, model, dataset and hyperparameters; check, preview, then insert a cell or train now.

    After "Train now", `result` and `fine_tuning` (whose `model` holds the
    trained weights) are set, and the fine-tuning is bound in the notebook
    under the name in the "Name in notebook" box.
    """

    def __init__(self, shell: Any = None, directory: Path | None = None) -> None:
        from IPython import get_ipython

        self.shell = shell if shell is not None else get_ipython()
        self.directory = directory or Path.cwd()
        self.local_models = tuple(model.name for model in find_local_models([self.directory]))
        self.problems: list[ConfigProblem] = []
        self.fine_tuning: FineTuning | None = None
        self.result: TrainingResult | None = None
        self._refreshing = False
        self.fields = self._field_widgets(default_config(TASKS[0], self.local_models))
        self.upload = widgets.FileUpload(accept=",".join(DATA_FILE_BUILDERS), multiple=False, description="Upload data")
        self.problems_html = widgets.HTML()
        self.memory = widgets.HTML()
        self.preview_button = widgets.Button(description="Preview", icon="eye")
        self.insert_button = widgets.Button(description="Insert training cell", icon="plus", layout=widgets.Layout(width="180px"))
        self.train_button = widgets.Button(description="Train now", icon="play", button_style="primary")
        self.name = widgets.Text(value=DEFAULT_NAME, description="Name in notebook", style=_STYLE)
        self.preview_area = widgets.HTML()
        self.note = widgets.HTML()
        self.code = widgets.Textarea(layout=widgets.Layout(width="100%", height="300px", display="none"))
        self.output = widgets.Output()
        self.widget = self._layout()
        self._connect()
        self.refresh()

    def _ipython_display_(self) -> None:
        # Not _repr_mimebundle_: ipywidgets 7 (Colab's 7.7.1) widgets have none;
        # displaying the widget itself works on ipywidgets 7 and 8.
        display(self.widget)

    @property
    def config(self) -> TrainConfig:
        """The configuration the form shows now."""
        return config_from_form({name: "" if widget.value is None else widget.value for name, widget in self.fields.items()})

    def refresh(self) -> None:
        """Re-check the form: reload what changed, fill the column choosers, list every problem."""
        if self._refreshing:
            return  # filling the column choosers fires their observers
        self._refreshing = True
        try:
            self.problems_html.value = "<i>Checking...</i>"
            facts = gather_facts(self.config)
            if isinstance(facts.dataset, DatasetFacts) and self._fill_columns(facts.dataset):
                facts = gather_facts(self.config)  # the label column changed: its classes too
            self._show_problems(validate(self.config, facts), facts)
        finally:
            self._refreshing = False

    def preview(self) -> None:
        self.refresh()
        if any(problem.field in _DATA_FIELDS for problem in self.problems):
            self.preview_area.value = "<i>The preview needs a model and a dataset that load: fix the problems above first.</i>"
            return
        self.preview_area.value = "<i>Loading the data and the tokenizer...</i>"
        self.preview_area.value = preview_html(make_preview(self.config, detect().devices))

    def insert(self) -> None:
        self.refresh()
        if self.problems:
            self.note.value = "<b>Fix the problems above first</b>: the cell would stop at them."
            return
        code = code_for(self.config)
        insertion = insert_cell(code, self.shell)
        self.note.value = html.escape(insertion.note)
        self.code.value = code
        self.code.layout.display = None

    def train(self) -> None:
        self.refresh()
        name = self.name.value.strip()
        if not name.isidentifier():
            self.note.value = f"<b>Name in notebook</b>: {html.escape(name)!r} is not a Python name; use letters, digits and _."
            return
        if self.problems:
            self.note.value = "<b>Fix the problems above first</b>: training would stop at them."
            return
        self.output.clear_output()
        self.note.value = "Training..."
        self.train_button.disabled = True
        try:
            with self.output:
                trained = train_now(self.config)
        # Shown here, whatever it is: a button callback's exception would only reach the kernel's log.
        except (Exception, TrainingInterrupted) as error:  # noqa: BLE001
            self.output.append_stderr(f"{type(error).__name__}: {error}\n")
            self.note.value = f"<b>Training failed</b>: {html.escape(type(error).__name__)} (details below)."
            return
        finally:
            self.train_button.disabled = False
        self.fine_tuning, self.result = trained.fine_tuning, trained.result
        if self.shell is not None:
            self.shell.user_ns[name] = trained.fine_tuning
        self.note.value = (
            f"<b>Trained</b>: {html.escape(str(trained.result))}.<br>"
            f"In the notebook, <code>{name}.model</code> and <code>{name}.tokenizer</code> hold the trained model "
            f'(<code>{name}</code> is the FineTuning); e.g. <code>transformers.pipeline("text-classification", '
            f"model={name}.model, tokenizer={name}.tokenizer)</code>."
        )

    def _field_widgets(self, config: TrainConfig) -> dict[str, widgets.ValueWidget]:
        values = form_values(config)

        def text(name: str, description: str, placeholder: str = "") -> widgets.Text:
            return widgets.Text(
                value=values[name], description=description, placeholder=placeholder, continuous_update=False, style=_STYLE, layout=_WIDE
            )

        def integer(name: str, description: str) -> widgets.IntText:
            return widgets.IntText(value=values[name], description=description, style=_STYLE)

        def number(name: str, description: str) -> widgets.FloatText:
            return widgets.FloatText(value=values[name], description=description, style=_STYLE)

        return {
            "task": widgets.Dropdown(options=TASKS, value=config.task, description="Task", style=_STYLE),
            "model": widgets.Combobox(
                value=config.model,
                options=model_options(config.task, self.local_models),
                description="Model",
                placeholder="Hub id or local directory",
                ensure_option=False,
                continuous_update=False,
                style=_STYLE,
                layout=_WIDE,
            ),
            "dataset": widgets.Combobox(
                value=config.dataset,
                options=self._dataset_options(),
                description="Dataset",
                placeholder='Hub id, local file, or "demo"',
                ensure_option=False,
                continuous_update=False,
                style=_STYLE,
                layout=_WIDE,
            ),
            "dataset_config": text("dataset_config", "Hub configuration", "e.g. sst2 for nyu-mll/glue"),
            "train_split": text("train_split", "Training split"),
            "eval_split": text("eval_split", "Evaluation split", "empty: 'validation' if any, else hold out"),
            "eval_fraction": number("eval_fraction", "Held-out share"),
            "text_column": widgets.Dropdown(
                options=(config.text_column,), value=config.text_column, description="Text column", style=_STYLE
            ),
            "label_column": widgets.Dropdown(
                options=(config.label_column,), value=config.label_column, description="Label column", style=_STYLE
            ),
            "max_length": integer("max_length", "Max length (tokens)"),
            "per_core_batch_size": integer("per_core_batch_size", "Batch per core"),
            "epochs": number("epochs", "Epochs"),
            "max_steps": integer("max_steps", "Max steps (0: epochs)"),
            "learning_rate": number("learning_rate", "Learning rate"),
            "warmup": number("warmup", "Warmup (<1: share)"),
            "weight_decay": number("weight_decay", "Weight decay"),
            "bf16": widgets.Checkbox(value=config.bf16, description="bfloat16", indent=False),
            "strategy": widgets.Dropdown(options=STRATEGIES, value=config.strategy, description="Strategy", style=_STYLE),
            "lora_rank": integer("lora_rank", "LoRA rank (0: none)"),
            "mlm_probability": number("mlm_probability", "Masked share (MLM)"),
            "eval_steps": integer("eval_steps", "Evaluate every (0: end)"),
            "save_steps": integer("save_steps", "Checkpoint every (0: end)"),
            "logging_steps": integer("logging_steps", "Log loss every"),
            "max_train_samples": integer("max_train_samples", "Training rows (0: all)"),
            "max_eval_samples": integer("max_eval_samples", "Evaluation rows (0: all)"),
            "output_dir": text("output_dir", "Output directory"),
            "seed": integer("seed", "Seed"),
        }

    def _layout(self) -> widgets.VBox:
        fields = self.fields
        runtime = detect()
        pages = {
            "Model and data": [
                fields[name] for name in ("task", "model", "dataset", "dataset_config", "train_split", "eval_split", "eval_fraction")
            ]
            + [self.upload, fields["text_column"], fields["label_column"]],
            "Training": [
                fields[name]
                for name in (
                    "max_length",
                    "per_core_batch_size",
                    "epochs",
                    "max_steps",
                    "learning_rate",
                    "warmup",
                    "weight_decay",
                    "bf16",
                    "strategy",
                    "lora_rank",
                )
            ],
            "Evaluation and output": [
                fields[name]
                for name in (
                    "eval_steps",
                    "save_steps",
                    "logging_steps",
                    "max_train_samples",
                    "max_eval_samples",
                    "mlm_probability",
                    "output_dir",
                    "seed",
                )
            ],
        }
        tabs = widgets.Tab(children=[widgets.VBox(children) for children in pages.values()])
        for index, title in enumerate(pages):
            tabs.set_title(index, title)  # not `titles`: ipywidgets 7 has no such trait
        title = widgets.HTML(
            f"<b>Fine-tune a transformer</b> on {html.escape(runtime.label)} ({runtime.devices} XLA device{'s' if runtime.devices != 1 else ''})"
        )
        buttons = widgets.HBox([self.preview_button, self.insert_button, self.train_button, self.name])
        return widgets.VBox([title, tabs, self.problems_html, self.memory, buttons, self.note, self.code, self.preview_area, self.output])

    def _connect(self) -> None:
        self.fields["task"].observe(self._task_changed, names="value")
        for name, widget in self.fields.items():
            if name != "task":
                widget.observe(lambda _change: self.refresh(), names="value")
        self.upload.observe(self._uploaded, names="value")
        self.preview_button.on_click(lambda _button: self.preview())
        self.insert_button.on_click(lambda _button: self.insert())
        self.train_button.on_click(lambda _button: self.train())

    def _task_changed(self, change: dict[str, Any]) -> None:
        task = change["new"]
        self._refreshing = True  # one refresh at the end, not one per field
        try:
            model = self.fields["model"]
            model.options = model_options(task, self.local_models)
            defaults = default_config(task, self.local_models)
            if model.value not in model.options:
                model.value = defaults.model
            for name in PER_TASK_FIELDS:
                self.fields[name].value = getattr(defaults, name)
        finally:
            self._refreshing = False
        self.refresh()

    def _uploaded(self, change: dict[str, Any]) -> None:
        for upload in uploaded_files(change["new"]):
            path = save_upload(upload.name, upload.content, self.directory / UPLOAD_DIRECTORY)
            dataset = self.fields["dataset"]
            dataset.options = self._dataset_options()
            dataset.value = display_path(path)

    def _dataset_options(self) -> tuple[str, ...]:
        uploads = data_files_in(self.directory / UPLOAD_DIRECTORY)
        return tuple(dict.fromkeys((*SUGGESTED_DATASETS, *data_files_in(self.directory), *uploads)))

    def _fill_columns(self, dataset: DatasetFacts) -> bool:
        """Offer the dataset's columns; keep the chosen ones if it has them, else guess. True if a choice changed."""
        changed = False
        guesses = {
            "text_column": guess_text_column(dataset.columns, dataset.text_columns),
            "label_column": guess_label_column(dataset.columns, dataset.text_columns),
        }
        for name, guess in guesses.items():
            chooser = self.fields[name]
            keep = chooser.value if chooser.value in dataset.columns else guess
            if tuple(chooser.options) != dataset.columns:
                chooser.options = dataset.columns
            if chooser.value != keep:
                chooser.value = keep
                changed = True
        return changed

    def _show_problems(self, problems: list[ConfigProblem], facts: Facts) -> None:
        self.problems = problems
        self.memory.value = _memory_html(self.config, facts)
        if not problems:
            rows = "" if not isinstance(facts.dataset, DatasetFacts) else f" ({facts.dataset.train_rows:,} training rows)"
            self.problems_html.value = f"<span style='color:#2e7d32'>&#10003; Ready to train{rows}.</span>"
            return
        items = "".join(f"<li><b>{html.escape(problem.field)}</b>: {html.escape(problem.message)}</li>" for problem in problems)
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        self.problems_html.value = f"<div style='color:#b71c1c'>{count} to fix:</div><ul style='margin-top:0'>{items}</ul>"


def _memory_html(config: TrainConfig, facts: Facts) -> str:
    """The memory estimate per core, and what to choose when a whole replica would not fit."""
    if not isinstance(facts.model, ModelFacts) or facts.model.size is None or config.per_core_batch_size < 1 or config.max_length < 1:
        return ""
    runtime = detect()
    estimate = estimate_for(config, facts.model.size, facts.devices, runtime.tpu.generation if runtime.tpu else None)
    colour = "#b26a00" if estimate.replica_fits is False and config.strategy != FSDP else "#455a64"
    return f"<div style='color:{colour}'>{html.escape(estimate.advice(lora_possible=config.task == CAUSAL_LM))}</div>"
