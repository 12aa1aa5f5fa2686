"""Adapters a worker injected into a notebook module in place (SFTTrainer's peft_config) are injected into the
notebook's copy, so the trained weights load and the notebook's module computes what the worker's did."""

from __future__ import annotations

import copy

import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

from tpu_nb.kernel.notebook.adapters import adapters_to_add, add_adapters, describe
from tpu_nb.workers.processes.programs import peft_adapters

IDS = torch.tensor([[1, 2, 3, 4, 5]])


def tiny_llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1
    )
    return LlamaForCausalLM(config)


def test_the_notebooks_module_gets_the_workers_adapters_and_then_its_trained_weights() -> None:
    notebook = tiny_llama()
    worker = copy.deepcopy(notebook)  # what the fork holds
    get_peft_model(worker, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))  # in place, as SFTTrainer does
    with torch.no_grad():
        for name, parameter in worker.named_parameters():
            if "lora_B" in name:
                parameter.fill_(0.1)  # "trained": LoRA's B starts at zero
    adapters = peft_adapters(worker)
    assert list(adapters) == ["default"] and adapters["default"]["r"] == 4
    assert sorted(adapters["default"]["target_modules"]) == ["q_proj", "v_proj"]  # a set in peft, a list on the wire

    added = adapters_to_add(notebook, adapters)
    assert added == adapters
    said = add_adapters(notebook, added)
    notebook.load_state_dict(worker.state_dict())  # every key matches: strict
    assert said == "default (LORA, r=4 on q_proj, v_proj)"
    with torch.no_grad():
        assert torch.allclose(notebook(IDS).logits, worker(IDS).logits)
    assert adapters_to_add(notebook, adapters) == {}  # a second return adds nothing


def test_a_module_the_notebook_adapted_itself_gets_nothing_added() -> None:
    notebook = get_peft_model(tiny_llama(), LoraConfig(r=4, target_modules=["q_proj"]))  # get_peft_model in the notebook
    assert adapters_to_add(notebook, peft_adapters(copy.deepcopy(notebook))) == {}
    assert peft_adapters(tiny_llama()) == {}
    assert describe({"peft_type": "LORA"}) == "LORA"
