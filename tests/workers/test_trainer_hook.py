"""An unchanged Trainer in `%%tpu_train --spmd`: FSDPv2 over 4 devices, full weights saved and returned."""

from __future__ import annotations

from pathlib import Path

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
