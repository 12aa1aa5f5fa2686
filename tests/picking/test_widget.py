"""The picker widget without a browser: set values, click buttons, read what it shows and does."""

from __future__ import annotations

import html
import re
import sys
import types
from pathlib import Path
from typing import Any

import ipywidgets as widgets
import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.display import display
from IPython.utils.capture import capture_output
from recipes.recipe_support import xla_runtime_started
from support.uploads import upload_from_browser

from tpu_nb.picking import picker
from tpu_nb.picking.widget import Picker
from tpu_nb.recipes import FineTuning, TrainConfig, code_for


def plain(text: str) -> str:
    """What an HTML widget reads as: tags dropped, entities decoded, spaces collapsed."""
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", text))).strip()


def all_widgets(widget: widgets.Widget) -> list[widgets.Widget]:
    found = [widget]
    for child in getattr(widget, "children", ()):
        found += all_widgets(child)
    return found


@pytest.fixture
def form(notebook_dir: Path, shell: Any) -> Picker:
    return picker(shell, notebook_dir)


def test_it_starts_with_a_local_model_and_the_demo_ready_to_train(form: Picker) -> None:
    assert form.fields["model"].value == "./tiny-bert"
    assert form.fields["model"].options[0] == "./tiny-bert"
    assert "google-bert/bert-base-uncased" in form.fields["model"].options
    assert {"demo", "./reviews.csv"} <= set(form.fields["dataset"].options)
    assert form.config.dataset == "demo" and form.fields["text_column"].options == ("text", "label")
    # The tiny model has 64 positions; the task's default max_length of 128 is the one problem.
    assert [problem.field for problem in form.problems] == ["max_length"]
    form.fields["max_length"].value = 32
    assert form.problems == []
    assert plain(form.problems_html.value) == "✓ Ready to train (4,000 training rows)."


def test_every_problem_shows_at_once(form: Picker) -> None:
    form.fields["per_core_batch_size"].value = 0
    form.fields["learning_rate"].value = -1.0
    form.fields["model"].value = "google-bert/bert-base-uncased"
    shown = plain(form.problems_html.value)
    assert shown.startswith("3 problems to fix:")
    assert "per_core_batch_size : must be a positive number of examples per TPU core, got 0." in shown
    assert "learning_rate : must be positive, e.g. 5e-5 for fine-tuning a pretrained model, got -1.0." in shown
    assert 'model : "google-bert/bert-base-uncased" is not on this machine and the Hugging Face Hub cannot be reached' in shown
    assert "use a model found on this machine: " in shown and "./tiny-bert" in shown


def test_choosing_a_csv_fills_the_column_choosers(form: Picker) -> None:
    form.fields["max_length"].value = 32
    form.fields["dataset"].value = "./reviews.csv"
    assert form.fields["text_column"].options == ("review", "sentiment", "stars")
    assert (form.fields["text_column"].value, form.fields["label_column"].value) == ("review", "sentiment")
    assert form.problems == []
    form.fields["label_column"].value = "review"
    assert [problem.field for problem in form.problems] == []  # 54 distinct short reviews still count as classes
    form.fields["text_column"].value = "stars"
    assert plain(form.problems_html.value).endswith(
        'text_column : "stars" does not hold text; the columns holding text are: review, sentiment.'
    )


def test_preview_shows_steps_for_the_detected_cores(form: Picker, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CPU_NUM_DEVICES", "4")  # detect(): four XLA:CPU devices
    form.fields["max_length"].value = 32
    form.fields["per_core_batch_size"].value = 16
    form.preview_button.click()
    shown = plain(form.preview_area.value)
    assert (
        "4,000 training examples (4,000 rows); global batch 64 = 16 per core x 4 TPU cores: 62 steps per epoch , 62 steps in all." in shown
    )
    assert "of the tokens at max_length 32 are padding" in shown
    assert re.search(r"negative [\d,]+ positive [\d,]+", shown)
    assert "[CLS]" in shown
    assert not xla_runtime_started()


def test_preview_waits_for_a_loadable_dataset(form: Picker) -> None:
    form.fields["dataset"].value = "./missing.csv"
    form.preview_button.click()
    assert plain(form.preview_area.value) == "The preview needs a model and a dataset that load: fix the problems above first."


def test_insert_puts_the_training_cell_next_and_shows_it(form: Picker, shell: Any) -> None:
    form.fields["max_length"].value = 32
    form.fields["max_steps"].value = 50
    form.insert_button.click()
    expected = code_for(TrainConfig(model="./tiny-bert", max_length=32, max_steps=50))
    assert shell.next_inputs == [(expected, False)]
    assert form.code.value == expected and form.code.layout.display is None
    assert plain(form.note.value) == "The cell is at your next prompt (also below, to copy):"


def test_insert_refuses_a_configuration_with_problems(form: Picker, shell: Any) -> None:
    form.insert_button.click()  # max_length 128 > the tiny model's 64 positions
    assert shell.next_inputs == []
    assert plain(form.note.value) == "Fix the problems above first : the cell would stop at them."


def test_changing_the_task_resets_its_defaults(form: Picker) -> None:
    form.fields["learning_rate"].value = 0.1
    form.fields["task"].value = "causal-lm"
    assert (form.config.max_length, form.config.per_core_batch_size, form.config.learning_rate) == (256, 8, 5e-5)
    assert form.fields["model"].value == "./tiny-bert"  # still offered for the new task
    assert form.fields["model"].options[-4:] == (
        "openai-community/gpt2",
        "distilbert/distilgpt2",
        "EleutherAI/pythia-160m",
        "HuggingFaceTB/SmolLM2-135M",
    )


def test_an_upload_becomes_the_dataset(form: Picker, notebook_dir: Path) -> None:
    content = b"sentence,label\n" + b"".join(b"a fine film,1\na poor film,0\n" for _ in range(20))
    upload_from_browser(form.upload, "my reviews.csv", content)
    assert (notebook_dir / "tpu_nb_uploads" / "my_reviews.csv").read_bytes() == content
    assert form.fields["dataset"].value == "./tpu_nb_uploads/my_reviews.csv"
    assert form.fields["text_column"].value == "sentence"


def test_colab_needs_no_custom_widget_manager(notebook_dir: Path, shell: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    colab, output = types.ModuleType("google.colab"), types.ModuleType("google.colab.output")
    output.enable_custom_widget_manager = lambda: calls.append("enable_custom_widget_manager")  # type: ignore[attr-defined]
    colab.output = output  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "google", types.ModuleType("google"))
    monkeypatch.setitem(sys.modules, "google.colab", colab)
    monkeypatch.setitem(sys.modules, "google.colab.output", output)
    monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab-20250101")
    form = picker(shell, notebook_dir)
    InteractiveShell.instance()  # display() publishes through the shell
    with capture_output() as captured:
        display(form)
    [shown] = captured.outputs
    assert shown.data["application/vnd.jupyter.widget-view+json"]["model_id"] == form.widget.model_id
    assert calls == []
    # Colab renders core widgets itself: everything in the picker comes from ipywidgets.
    assert {type(widget).__module__.split(".")[0] for widget in all_widgets(form.widget)} == {"ipywidgets"}


def test_train_now_trains_and_binds_the_model_in_the_notebook(form: Picker, shell: Any, notebook_dir: Path) -> None:
    form.fields["max_length"].value = 32
    form.fields["max_steps"].value = 4
    form.fields["max_train_samples"].value = 200
    form.fields["max_eval_samples"].value = 48
    form.name.value = "sentiment"
    form.train_button.click()
    assert form.result is not None, plain(form.note.value)
    assert form.result.steps == 4 and "accuracy" in form.result.metrics
    trained = shell.user_ns["sentiment"]
    assert isinstance(trained, FineTuning) and trained is form.fine_tuning
    assert Path(form.result.output_dir) == notebook_dir / "tpu_nb_output"
    note = plain(form.note.value)
    assert note.startswith("Trained : trained 4 steps in")
    assert "sentiment.model and sentiment.tokenizer hold the trained model" in note
    assert not form.train_button.disabled and not xla_runtime_started()


def test_train_now_refuses_a_name_that_is_not_python(form: Picker, shell: Any) -> None:
    form.name.value = "my model"
    form.train_button.click()
    assert plain(form.note.value) == "Name in notebook : 'my model' is not a Python name; use letters, digits and _."
    assert shell.user_ns == {}


def test_the_training_page_offers_the_strategy_and_lora_and_shows_the_memory_estimate(form: Picker) -> None:
    tabs = form.widget.children[1]
    assert [tabs.get_title(index) for index in range(3)] == ["Model and data", "Training", "Evaluation and output"]
    assert form.fields["strategy"].options == ("data-parallel", "fsdp")
    form.fields["strategy"].value = "fsdp"
    form.fields["lora_rank"].value = 0
    assert form.config.strategy == "fsdp" and form.config.lora_rank is None
    # The tiny local BERT, on this machine without a TPU: the figures, and nothing to compare them with.
    assert plain(form.memory.value).startswith("Memory per core (estimate): ")
    assert plain(form.memory.value).endswith("(no TPU here to compare with).")


def test_the_inserted_cell_for_fsdp_launches_an_spmd_run(form: Picker, shell: Any) -> None:
    form.fields["task"].value = "causal-lm"
    form.fields["max_length"].value = 32  # the tiny model has 64 positions
    form.fields["strategy"].value = "fsdp"
    form.insert_button.click()
    [(code, _replace)] = shell.next_inputs
    assert "result = tpu_nb.launch(fine_tuning.train, spmd=True)" in code.splitlines()
