"""TRL's trainers, unchanged and with TRL's own defaults, under `%%tpu_train` in a real kernel (XLA:CPU).

SFTConfig and DPOConfig turn on gradient checkpointing and bf16 and pad each
batch to its longest sequence: on XLA the first two failed at step one and the
third compiled the step again for each batch. The cells below set only what
a quick start sets (steps, lengths, batch size, a learning rate that moves a
tiny model in a few steps); everything XLA needed is tpu_nb's, said on the
dashboard. The model is a small Llama built from a config, the tokenizer one
trained in the notebook, the data tpu_nb's built-in sentences.
"""

from __future__ import annotations

import re

import nbformat
from support.kernel import Kernel, errors_of, text_of

SETUP = """
import copy, random, tempfile, torch
from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from tpu_nb.recipes.demo_data import demo_examples

examples = demo_examples(480)
texts = [text for text, _ in examples]
raw = Tokenizer(models.WordLevel(unk_token="[UNK]"))
raw.pre_tokenizer = pre_tokenizers.Whitespace()
raw.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]", "[EOS]"]))
tok = PreTrainedTokenizerFast(tokenizer_object=raw, pad_token="[PAD]", unk_token="[UNK]", eos_token="[EOS]")
train = Dataset.from_dict({"text": texts[:400]})
held = texts[400:]

def base_model():
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64))

def held_loss(m):
    m.eval()
    with torch.no_grad():
        batch = tok([text + "[EOS]" for text in held], return_tensors="pt", padding=True)
        return float(m(**batch, labels=batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)).loss)

model = base_model()
before = held_loss(model)
out = tempfile.mkdtemp()
"""


def prepared(kernel: Kernel) -> None:
    """tpu_nb loaded and the setup run, unless this kernel has them (the module's tests share it, in order)."""
    if last_line(kernel.run("print('base_model' in globals())")) != "True":
        kernel.run("%load_ext tpu_nb", allow_errors=False)
        kernel.run(SETUP, allow_errors=False)


def last_line(cell: nbformat.NotebookNode) -> str:
    """The last line the cell printed on stdout (libraries' warnings go to stderr)."""
    printed = "".join(output.text for output in cell.outputs if output.output_type == "stream" and output.name == "stdout")
    return printed.strip().splitlines()[-1]


SFT = """%%tpu_train --return model
from trl import SFTConfig, SFTTrainer
args = SFTConfig(output_dir=out, max_steps=12, max_length=16, per_device_train_batch_size=8, learning_rate=5e-3,
                 logging_steps=4, report_to=[])
trainer = SFTTrainer(model=model, args=args, train_dataset=train, processing_class=tok)
trainer.train()
trainer.state.log_history[-2]
"""


def test_an_unchanged_sft_trainer_with_trls_defaults_learns_compiles_once_and_its_model_comes_back(kernel: Kernel) -> None:
    prepared(kernel)
    kernel.run("model = base_model()", allow_errors=False)
    cell = kernel.run(SFT, timeout=600)
    said = text_of(cell)
    assert not errors_of(cell), said
    assert "activation checkpointing runs through torch_xla's checkpoint" in said  # TRL's default: on
    assert "scaled_dot_product_attention runs in bf16 on XLA" in said  # TRL's default: bf16
    assert "SFTConfig: pad_to_multiple_of='auto' -> 16 on XLA" in said
    assert "stable after warm-up: none of the" in said  # one compilation per graph, whatever each batch's longest text
    assert "Host syncs" not in said  # TRL's per-step metric reads are deferred to its logging steps
    logged = text_of(kernel.run("print(trainer_log := _, flush=True)"))  # the cell's value: the last training log
    assert "'mean_token_accuracy':" in logged and "'num_tokens':" in logged
    before, after = (float(value) for value in last_line(kernel.run("print(before, held_loss(model))")).split())
    assert after < before - 0.5, (before, after)  # the held-out loss, computed in the notebook, drops


LORA = """%%tpu_train --return model
from peft import LoraConfig
from trl import SFTConfig, SFTTrainer
args = SFTConfig(output_dir=out, max_steps=8, max_length=16, per_device_train_batch_size=8, learning_rate=2e-2, report_to=[])
trainer = SFTTrainer(model=model, args=args, train_dataset=train, processing_class=tok,
                     peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
trainer.train()
trainer.save_model()
"""

RELOADED = """
from peft import PeftModel
reloaded = PeftModel.from_pretrained(base_model(), out)
ids = tok(held[:4], return_tensors="pt", padding=True)["input_ids"]
with torch.no_grad():
    same = torch.allclose(reloaded(ids).logits, model(ids).logits, atol=1e-4)
print(type(model).__name__, sorted(model.peft_config), same, held_loss(model) < before)
"""


def test_lora_through_peft_config_comes_back_adapted_and_the_saved_adapter_reloads(kernel: Kernel) -> None:
    prepared(kernel)
    kernel.run("model = base_model()", allow_errors=False)
    cell = kernel.run(LORA, timeout=600)
    said = text_of(cell)
    assert not errors_of(cell), said
    assert "the run added adapters to `model` in place: default (LORA, r=4 on q_proj, v_proj)" in said
    # The notebook's model is the base model with the trained adapters, as the worker's was; the adapter the
    # Trainer saved loads onto a fresh base model and computes the same.
    assert last_line(kernel.run(RELOADED)).split() == ["LlamaForCausalLM", "['default']", "True", "True"]


SPMD = """%%tpu_train --spmd --cores 4 --return model
from peft import LoraConfig
from trl import SFTConfig, SFTTrainer
args = SFTConfig(output_dir=out, max_steps=6, max_length=16, per_device_train_batch_size=8, learning_rate=2e-2, report_to=[])
trainer = SFTTrainer(model=model, args=args, train_dataset=train, processing_class=tok,
                     peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
trainer.train()
type(trainer.model_wrapped).__name__
"""


def test_sft_with_lora_under_spmd_shards_with_fsdpv2_and_learns(kernel: Kernel) -> None:
    prepared(kernel)
    kernel.run("model = base_model()", allow_errors=False)
    cell = kernel.run(SPMD, timeout=600)
    said = text_of(cell)
    assert not errors_of(cell), said  # transformers' shard_output raised on TRL's fused output without logits
    assert "SpmdFullyShardedDataParallel" in said and "FSDPv2" in said
    assert last_line(kernel.run("print(held_loss(model) < before)")) == "True"


DPO_SETUP = """
model = base_model()
model.save_pretrained(out + "/base")  # DPOTrainer loads its reference model by name, as from the hub
model = LlamaForCausalLM.from_pretrained(out + "/base")
rng = random.Random(0)
good = [text for text, label in examples if label == 1]
bad = [text for text, label in examples if label == 0]
prefs = Dataset.from_dict({"prompt": ["review :"] * 160, "chosen": [" " + rng.choice(good) for _ in range(160)],
                           "rejected": [" " + rng.choice(bad) for _ in range(160)]})

def margin(m):
    m.eval()
    gaps = []
    with torch.no_grad():
        for row in prefs.select(range(24)):
            logps = []
            for side in ("chosen", "rejected"):
                ids = tok(row["prompt"] + row[side], return_tensors="pt")["input_ids"]
                start = len(tok(row["prompt"])["input_ids"])
                logp = m(ids).logits[0, :-1].log_softmax(-1).gather(-1, ids[0, 1:, None])[start - 1:].sum()
                logps.append(float(logp))
            gaps.append(logps[0] - logps[1])
    return sum(gaps) / len(gaps)

margin_before = margin(model)
"""

DPO = """%%tpu_train --return model
from trl import DPOConfig, DPOTrainer
args = DPOConfig(output_dir=out, max_steps=10, max_length=32, per_device_train_batch_size=8, learning_rate=5e-3, report_to=[])
DPOTrainer(model=model, args=args, train_dataset=prefs, processing_class=tok).train()
"""


def test_a_dpo_trainer_with_trls_defaults_moves_the_preference_margin_the_right_way(kernel: Kernel) -> None:
    prepared(kernel)
    kernel.run(DPO_SETUP, allow_errors=False)
    cell = kernel.run(DPO, timeout=600)
    said = text_of(cell)
    assert not errors_of(cell), said
    assert "DPOConfig: pad_to_multiple_of='auto' -> 32 on XLA" in said
    before, after = (float(value) for value in last_line(kernel.run("print(margin_before, margin(model))")).split())
    assert after > before + 0.5, (before, after)


TRIALS = """%%tpu_train --trials "learning_rate=2e-3,2e-2" --return-best model --return trained --trials-metric loss
from peft import LoraConfig
from trl import SFTConfig, SFTTrainer
args = SFTConfig(output_dir=f"{out}/trial-{trial['learning_rate']}", max_steps=6, max_length=16, per_device_train_batch_size=8,
                 learning_rate=trial["learning_rate"], logging_steps=2, report_to=[])
SFTTrainer(model=model, args=args, train_dataset=train, processing_class=tok,
           peft_config=LoraConfig(r=4, target_modules=["q_proj", "v_proj"])).train().training_loss
"""


def test_two_lora_trials_side_by_side_and_the_best_comes_back_adapted(kernel: Kernel) -> None:
    prepared(kernel)
    kernel.run("model = base_model()\ntrained = model  # --return trained: a copy of it per trial", allow_errors=False)
    cell = kernel.run(TRIALS, timeout=600)
    said = text_of(cell)
    assert not errors_of(cell), said
    assert re.search(r"--return-best: model from trial #\d", said), said
    assert "the run added adapters to `model` in place" in said
    assert last_line(kernel.run("print(sorted(model.peft_config), held_loss(model) < before)")).split() == ["['default']", "True"]
    # --return of a module: a copy per trial, each with its trial's adapters and weights
    assert last_line(
        kernel.run("print(*[sorted(each.peft_config) for each in trained], held_loss(trained[1]) != held_loss(trained[0]))")
    ) == ("['default'] ['default'] True")


BF16 = """%%tpu_train --return model --checkpoint {checkpoints} --every 3steps {resume}
from trl import SFTConfig, SFTTrainer
args = SFTConfig(output_dir=out, max_steps={steps}, max_length=16, per_device_train_batch_size=8, learning_rate=5e-3, report_to=[])
SFTTrainer(model=model, args=args, train_dataset=train, processing_class=tok).train().global_step
"""

SAVED_DTYPES = """
import glob
from safetensors import safe_open
newest = max(glob.glob(checkpoints + "/checkpoint-*/model.safetensors"), key=lambda path: int(path.split("-")[-1].split("/")[0]))
with safe_open(newest, "pt") as saved:
    print(model.dtype, sorted({str(saved.get_tensor(key).dtype) for key in saved.keys()}), newest.split("/")[-2])
"""


def test_a_bf16_model_trains_checkpoints_and_resumes_in_bf16(kernel: Kernel) -> None:
    prepared(kernel)
    kernel.run("model = base_model().to(torch.bfloat16)\ncheckpoints = tempfile.mkdtemp()", allow_errors=False)
    first = kernel.run(BF16.format(checkpoints="{checkpoints}", resume="", steps=6), timeout=600)
    assert not errors_of(first), text_of(first)
    assert last_line(kernel.run(SAVED_DTYPES)) == "torch.bfloat16 ['torch.bfloat16'] checkpoint-6"
    resumed = kernel.run(BF16.format(checkpoints="{checkpoints}", resume="--resume", steps=9), timeout=600)
    said = text_of(resumed)
    assert not errors_of(resumed), said
    assert "resumed from" in said and "(step 6)" in said
    assert last_line(kernel.run(SAVED_DTYPES)) == "torch.bfloat16 ['torch.bfloat16'] checkpoint-9"
