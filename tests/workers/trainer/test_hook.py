"""A Trainer in a worker: unchanged under `%%tpu_train --spmd` (FSDPv2 over 4 devices, full weights saved and returned);
under --checkpoint, its checkpoints go there while it keeps its own output_dir, best checkpoint and save_total_limit; its
batches' non-padding tokens counted for tokens/s."""

from __future__ import annotations

import itertools
import os
import tempfile
from pathlib import Path
from types import SimpleNamespace

import fsspec
import pytest
import torch
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

SETUP = """
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments
torch.manual_seed(0)
config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64)
model = LlamaForCausalLM(config)
initial = {name: tensor.clone() for name, tensor in model.state_dict().items()}
ids = torch.randint(0, 128, (64, 16), generator=torch.Generator().manual_seed(0))
data = [{"input_ids": ids[i], "labels": ids[i]} for i in range(64)]
"""

TRAIN = """%%tpu_train --spmd --cores 4 --return model
from tpu_nb.spmd import sharding_of
args = TrainingArguments(OUTPUT, per_device_train_batch_size=16, max_steps=4, learning_rate=1e-3, logging_steps=2,
                         save_strategy="no", report_to=[]{fsdp})
trainer = Trainer(model=model, args=args, train_dataset=data)
trainer.train()
trainer.save_model()
(type(trainer.model).__name__, sharding_of(next(trainer.model.parameters())))
"""

USERS_FSDP = ', fsdp=True, fsdp_config={"xla": True, "xla_fsdp_v2": True, "transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]}'


@pytest.mark.parametrize("fsdp", ["", USERS_FSDP], ids=["unchanged", "users-fsdp-config"])
def test_a_trainer_under_spmd_trains_sharded_and_saves_the_full_weights(ip: InteractiveShell, tmp_path: Path, fsdp: str) -> None:
    from transformers import LlamaForCausalLM

    ip.run_cell(SETUP)
    ip.user_ns["OUTPUT"] = str(tmp_path)
    with capture_output() as captured:
        result = ip.run_cell(TRAIN.replace("{fsdp}", fsdp))
    assert result.success, captured.stderr + str(result.error_in_exec)
    assert result.result == ("SpmdFullyShardedDataParallel", "{devices=[4,1]0,1,2,3}")
    chose_for_the_user = "Trainer under --spmd: FSDPv2, parameters sharded along the mesh's fsdp axis, wrapping LlamaDecoderLayer"
    assert (chose_for_the_user in captured.stderr) == (fsdp == "")

    model = ip.user_ns["model"]  # the notebook's own module, updated in place
    trained = model.state_dict()
    reloaded = LlamaForCausalLM.from_pretrained(tmp_path).state_dict()
    assert set(reloaded) == set(trained)
    assert all(torch.equal(reloaded[name], trained[name]) for name in trained)
    assert any(not torch.equal(trained[name], ip.user_ns["initial"][name]) for name in trained)


LORA_SETUP = """
from peft import LoraConfig, PeftModel, get_peft_model
base_state = {name: tensor.clone() for name, tensor in model.state_dict().items()}
model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
initial = {name: tensor.clone() for name, tensor in model.state_dict().items()}
"""


def test_lora_under_spmd_trains_only_the_adapter_which_reloads_and_merges(ip: InteractiveShell, tmp_path: Path) -> None:
    from peft import PeftModel
    from transformers import LlamaForCausalLM

    ip.run_cell(SETUP + LORA_SETUP)
    ip.user_ns["OUTPUT"] = str(tmp_path)
    with capture_output() as captured:
        result = ip.run_cell(TRAIN.replace("{fsdp}", ""))
    assert result.success, captured.stderr + str(result.error_in_exec)

    model, initial = ip.user_ns["model"], ip.user_ns["initial"]
    changed = {name for name, tensor in model.state_dict().items() if not torch.equal(tensor, initial[name])}
    assert changed and all(".lora_A." in name or ".lora_B." in name for name in changed)
    assert sorted(path.name for path in tmp_path.glob("adapter_*")) == ["adapter_config.json", "adapter_model.safetensors"]

    base = LlamaForCausalLM(ip.user_ns["config"])
    base.load_state_dict(ip.user_ns["base_state"])
    reloaded = PeftModel.from_pretrained(base, tmp_path)
    ids = ip.user_ns["ids"][:4]
    model.eval()
    reloaded.eval()
    with torch.no_grad():
        trained_logits = model(input_ids=ids).logits
        assert torch.allclose(reloaded(input_ids=ids).logits, trained_logits, atol=1e-5)
        merged = reloaded.merge_and_unload()
        assert torch.allclose(merged(input_ids=ids).logits, trained_logits, atol=1e-4)


# Under --checkpoint (issue 31). The eval set is the training set with its labels flipped: the eval loss only rises
# (0.72, 0.77, 0.81 at steps 2, 4, 6), so the best checkpoint (eval_loss) is the first one, never the newest.

STEPS = 6


def train_keeping_the_best(
    output_dir: str, checkpoints: str, steps: int = STEPS, fail_at_start: bool = False, save_total_limit: int | None = None
) -> dict[str, object]:
    """Train a tiny BERT with evaluations and saves every 2 steps and `load_best_model_at_end`; what it kept, and where."""
    import logging

    from safetensors.torch import load
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments

    warnings: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            warnings.append(record.getMessage())

    class FailAtStart(TrainerCallback):
        def on_train_begin(self, args: object, state: object, control: object, **kwargs: object) -> None:
            raise RuntimeError("the cell's own callback failed")

    logging.getLogger("transformers.trainer").addHandler(Collect(logging.WARNING))
    temporary = tempfile.mkdtemp()
    tempfile.tempdir = temporary  # this worker's: whatever tpu_nb fetches or stages goes here
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, max_position_embeddings=16
    )
    ids = torch.randint(0, 64, (32, 8), generator=torch.Generator().manual_seed(0))
    labels = (ids[:, 0] >= 32).long()
    train_data = [{"input_ids": ids[i], "labels": labels[i]} for i in range(32)]
    eval_data = [{"input_ids": ids[i], "labels": 1 - labels[i]} for i in range(32)]
    args = TrainingArguments(
        output_dir,
        per_device_train_batch_size=8,
        per_device_eval_batch_size=8,
        max_steps=steps,
        optim="sgd",  # one graph fewer to compile than AdamW (whose first step makes its state)
        learning_rate=0.5,
        eval_strategy="steps",
        eval_steps=2,
        save_steps=2,
        load_best_model_at_end=True,
        metric_for_best_model="eval_loss",
        save_total_limit=save_total_limit,
        report_to=[],
        seed=0,
    )
    callbacks = [FailAtStart()] if fail_at_start else []
    trainer = Trainer(BertForSequenceClassification(config), args, train_dataset=train_data, eval_dataset=eval_data, callbacks=callbacks)
    try:
        trainer.train()
    except RuntimeError as error:
        return {"error": str(error), "left_in_tmp": os.listdir(temporary)}
    trainer.save_model()
    best = str(trainer.state.best_model_checkpoint)
    filesystem, root = fsspec.core.url_to_fs(checkpoints)
    with filesystem.open(f"{root}/{best.rsplit('/', 1)[-1]}/model.safetensors", "rb") as file:
        best_weights = load(file.read())
    final = {name: tensor.cpu() for name, tensor in trainer.model.state_dict().items()}
    with open(f"{output_dir}/model.safetensors", "rb") as file:
        saved = load(file.read())
    return {
        "best": best,
        "checkpoints": sorted(path.rstrip("/").rsplit("/", 1)[-1] for path in filesystem.ls(root, detail=False)),
        "output_dir": sorted(os.listdir(output_dir)),
        "warnings": warnings,
        "final_is_best": all(torch.equal(final[name], best_weights[name]) for name in best_weights),
        "saved_is_final": all(torch.equal(saved[name], final[name]) for name in saved),
        "left_in_tmp": os.listdir(temporary),
    }


def assert_kept_the_best(found: dict[str, object], best: str, newest: int = STEPS) -> None:
    assert found["best"] == best  # the eval loss only rises: the best is not the newest
    assert found["checkpoints"] == ["checkpoint-2", f"checkpoint-{newest}"]  # --keep 1: the newest, and the best whatever it says
    assert not [warning for warning in found["warnings"] if "best" in str(warning)], found["warnings"]  # "Could not locate the best model"
    assert found["final_is_best"]  # load_best_model_at_end loaded it
    assert found["saved_is_final"] and "model.safetensors" in found["output_dir"]  # save_model() wrote into the user's output_dir
    assert not [name for name in found["output_dir"] if name.startswith("checkpoint-")]  # the checkpoints went to --checkpoint
    assert found["left_in_tmp"] == []


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    """A run under `--checkpoint DIR --every 2steps --keep 1` (a local DIR), and what its worker found."""
    import tpu_nb

    root = tmp_path_factory.mktemp("trained")
    found = tpu_nb.launch(
        train_keeping_the_best, str(root / "out"), str(root / "checkpoints"), checkpoint=str(root / "checkpoints"), every="2steps", keep=1
    )
    return root, found


def test_a_trainer_keeps_its_best_checkpoint_under_keep_1_and_saves_into_its_own_output_dir(
    trained: tuple[Path, dict[str, object]],
) -> None:
    root, found = trained
    assert_kept_the_best(found, str(root / "checkpoints" / "checkpoint-2"))


def test_the_same_with_a_url_checkpoint_directory_and_save_total_limit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import tpu_nb

    url = f"memory://trainer-keeps/{tmp_path.name}"
    found = tpu_nb.launch(train_keeping_the_best, str(tmp_path / "out"), url, STEPS, False, 1, checkpoint=url, every="2steps")
    assert_kept_the_best(found, f"{url}/checkpoint-2")  # best_model_checkpoint: where it is kept; --keep 2, but save_total_limit=1
    said = capsys.readouterr().err
    assert "Trainer: save_total_limit=1, stricter than --keep 2: tpu_nb keeps the 1 newest verified checkpoint" in said
    assert f"save_model() still writes to output_dir ({tmp_path / 'out'})" in said
    # transformers' own bars reach the cell as text (each save writes its shards); its training bar is the dashboard's.
    assert "Writing model shards: 100%|██████████| 1/1" in said, said
    assert f"/{STEPS} [" not in said, said


def uploaded(local: Path, url: str) -> None:
    """The checkpoints of a local run, as if that run had saved them to `url` (gs://), in this process's memory filesystem."""
    fsspec.filesystem("memory").put(str(local), fsspec.core.url_to_fs(url)[1], recursive=True)


def test_a_resume_from_a_url_fetches_the_best_checkpoint_too_and_removes_both_copies(
    trained: tuple[Path, dict[str, object]], tmp_path: Path
) -> None:
    import tpu_nb

    url = f"memory://trainer-resumes/{tmp_path.name}"
    uploaded(trained[0] / "checkpoints", url)
    # One step more, then the best checkpoint loaded, which only the URL holds: it was fetched with the one resumed from.
    found = tpu_nb.launch(
        train_keeping_the_best, str(tmp_path / "out"), url, STEPS + 1, checkpoint=url, resume=True, keep=1, progress=False
    )
    assert_kept_the_best(found, f"{url}/checkpoint-2", newest=STEPS + 1)  # and both copies fetched are gone


def test_a_resume_from_a_url_that_fails_leaves_no_copy(trained: tuple[Path, dict[str, object]], tmp_path: Path) -> None:
    import tpu_nb

    url = f"memory://trainer-fails/{tmp_path.name}"
    uploaded(trained[0] / "checkpoints", url)
    found = tpu_nb.launch(train_keeping_the_best, str(tmp_path / "out"), url, STEPS, True, checkpoint=url, resume=True, progress=False)
    assert found == {"error": "the cell's own callback failed", "left_in_tmp": []}


def test_save_total_limit_and_keep_the_stricter_is_kept_and_said() -> None:
    from tpu_nb.workers.trainer.trainer_checkpoints import Keeping, kept_count

    assert kept_count(2, None) == kept_count(2, 2) == kept_count(2, 0) == Keeping(2, None)  # 0: transformers keeps all
    fewer = kept_count(3, 1)
    assert fewer.count == 1 and fewer.notice is not None
    assert "save_total_limit=1, stricter than --keep 3: tpu_nb keeps the 1 newest verified checkpoint (and the best one" in fewer.notice
    more = kept_count(2, 5)
    assert more.count == 2 and more.notice is not None and "give --keep 5 to keep 5" in more.notice


def test_a_url_checkpoint_directory_is_staged_locally_until_the_run_ends(tmp_path: Path) -> None:
    from tpu_nb.workers.trainer.trainer_checkpoints import TrainerCheckpoints

    here = TrainerCheckpoints(str(tmp_path), keep=2)
    assert here.local() == str(tmp_path) and here.url_of("/anywhere/checkpoint-4") == f"{tmp_path}/checkpoint-4"
    here.clean()
    assert tmp_path.is_dir()  # the checkpoint directory itself stays, of course
    there = TrainerCheckpoints("gs://bucket/run/", keep=2)
    staging = Path(there.local())
    assert staging.is_dir() and there.local() == str(staging)  # made once, at the first save
    assert there.url_of(f"{staging}/checkpoint-4") == "gs://bucket/run/checkpoint-4"
    (staging / "checkpoint-4").mkdir()  # an upload that failed
    there.clean()
    assert not staging.exists()


def test_load_best_model_at_end_keeps_a_save_at_each_evaluation_whatever_every_says() -> None:
    from tpu_nb.wire.checkpoints import Every
    from tpu_nb.workers.trainer.trainer_checkpoints import SaveSchedule, save_schedule

    assert save_schedule(Every(steps=4), "steps", 500, "steps", 2, True) == SaveSchedule("steps", 4, "every 4 steps")
    assert save_schedule(Every(steps=3), "steps", 500, "no", None, False) == SaveSchedule("steps", 3, "every 3 steps")
    assert save_schedule(Every(seconds=900), "steps", 500, "steps", 2, False) == SaveSchedule("no", 500, "every 15m00s")
    by_time = save_schedule(Every(seconds=900), "steps", 10, "steps", 2, True)  # --every's default, which matched no evaluation
    assert (by_time.strategy, by_time.steps, by_time.when) == ("steps", 10, "every 10 steps")
    assert by_time.notice == (
        "Trainer: load_best_model_at_end compares checkpoints saved at its evaluations: it saves as its arguments say "
        "(every 10 steps), not every 15m00s; give --every a multiple of eval_steps (2 steps) to choose"
    )
    by_epoch = save_schedule(Every(steps=3), "epoch", 500, "epoch", None, True)
    assert (by_epoch.strategy, by_epoch.when) == ("epoch", "at each epoch's end") and by_epoch.notice is not None
    assert "eval_steps" not in by_epoch.notice


def train_at_a_pace(output_dir: str, checkpoints: str) -> list[str]:
    """A Trainer whose steps take 0.4 s, saving by the clock (`--every 1s`): the checkpoints it left."""
    import time

    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments

    class Pace(TrainerCallback):
        def on_step_end(self, args: object, state: object, control: object, **kwargs: object) -> None:
            time.sleep(0.4)

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, max_position_embeddings=16
    )
    ids = torch.randint(0, 64, (32, 8), generator=torch.Generator().manual_seed(0))
    data = [{"input_ids": ids[i], "labels": int(ids[i, 0] >= 32)} for i in range(32)]
    args = TrainingArguments(output_dir, per_device_train_batch_size=8, max_steps=10, optim="sgd", report_to=[], seed=0)
    Trainer(BertForSequenceClassification(config), args, train_dataset=data, callbacks=[Pace()]).train()
    return sorted(os.listdir(checkpoints))


def test_a_trainer_saves_by_the_clock_at_a_step_every_rank_agrees_on(tmp_path: Path) -> None:
    import tpu_nb

    checkpoints = tmp_path / "checkpoints"
    left = tpu_nb.launch(
        train_at_a_pace, str(tmp_path / "out"), str(checkpoints), checkpoint=str(checkpoints), every="1s", keep=20, progress=False
    )
    steps = [
        int(name.removeprefix("checkpoint-"))
        for name in left
        if name.startswith("checkpoint-") and name.removeprefix("checkpoint-").isdigit()
    ]
    assert 10 in steps and [step for step in steps if step < 10], left  # saved along the way by the clock, not only at the end


REAL_TOKENS, LENGTH, BATCH = 5, 16, 8
"""Every sample: 5 tokens, then padding to 16 (so non-padding and all tokens differ); batches of 8."""


def train_counting_tokens(output_dir: str) -> int:
    """A Trainer on a model it can count (`num_parameters`, as a PreTrainedModel has), its steps of a steady length; the
    parameters its FLOPs estimate counts."""
    import time

    from transformers import Trainer, TrainerCallback, TrainingArguments

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed, self.head = torch.nn.Embedding(64, 8), torch.nn.Linear(8, 2)

        def num_parameters(self, exclude_embeddings: bool = False) -> int:
            return sum(parameter.numel() for parameter in (self.head if exclude_embeddings else self).parameters())

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
            hidden = (self.embed(input_ids) * attention_mask.unsqueeze(-1)).sum(1)
            return {"loss": torch.nn.functional.cross_entropy(self.head(hidden), labels)}

    class Steady(TrainerCallback):
        def on_step_end(self, args: object, state: object, control: object, **kwargs: object) -> None:
            time.sleep(0.05)

    torch.manual_seed(0)
    ids, mask = torch.zeros(32, LENGTH, dtype=torch.long), torch.zeros(32, LENGTH, dtype=torch.long)
    ids[:, :REAL_TOKENS], mask[:, :REAL_TOKENS] = torch.randint(1, 64, (32, REAL_TOKENS)), 1
    data = [{"input_ids": ids[i], "attention_mask": mask[i], "labels": i % 2} for i in range(32)]
    args = TrainingArguments(
        output_dir, per_device_train_batch_size=BATCH, max_steps=24, optim="sgd", report_to=[], save_strategy="no", logging_steps=8
    )
    model = Tiny()
    Trainer(model, args, train_dataset=data, callbacks=[Steady()]).train()
    return model.num_parameters(exclude_embeddings=True)


def test_a_trainers_tokens_per_second_is_the_non_padding_tokens_it_trained_on_over_the_measured_time(tmp_path: Path) -> None:
    from tpu_nb.kernel.history.log import read_log
    from tpu_nb.kernel.launching import launch_observed
    from tpu_nb.kernel.progress.recompilation import WARMUP_STEPS
    from tpu_nb.wire.events import Event, Progress

    events: list[Event] = []
    observer = SimpleNamespace(on_event=events.append)
    dense = launch_observed(train_counting_tokens, (str(tmp_path / "out"),), {"run_log": str(tmp_path), "progress": False}, [observer])
    counted = [(event.step, event.counted) for event in events if isinstance(event, Progress) and event.counted is not None]
    assert len(counted) > 3 and counted[-1][0] == 24
    for step, count in counted:  # every step's batch, as the Trainer counts non-padding tokens, never read per step
        assert (count.tokens, count.samples, count.flops_per_token) == (step * BATCH * REAL_TOKENS, step * BATCH, 6 * dense)
    pairs = [(before, after) for (step, before), (_, after) in itertools.pairwise(counted) if step >= WARMUP_STEPS]
    tokens = sum(after.tokens - before.tokens for before, after in pairs)
    seconds = sum(after.seconds - before.seconds for before, after in pairs)
    [record] = read_log(tmp_path).records
    assert record.tokens_per_second == pytest.approx(tokens / seconds)
