"""Hub kernels off XLA: models loaded by transformers >= 5.25 (kernelized by default) train in a forked worker."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import BertConfig, BertForSequenceClassification

import tpu_nb
from tpu_nb.workers.mends.hub_kernels import HUB_KERNELS_SWITCH


@pytest.fixture
def saved_model(tmp_path: Path) -> Path:
    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    BertForSequenceClassification(config).save_pretrained(tmp_path / "tiny")
    return tmp_path / "tiny"


def train_a_step(model: Any, path: Path) -> tuple[float, float, str | None]:
    """In the worker: a model from the notebook and one loaded here, each switched to training and stepped on XLA."""
    import torch_xla

    device = torch_xla.device()
    losses = []
    for each in (model, BertForSequenceClassification.from_pretrained(path)):
        each.to(device).train()  # kernelizes for the device where hub kernels are on: 'xla' is unknown to `kernels`
        loss = each(
            input_ids=torch.ones(2, 8, dtype=torch.long, device=device), labels=torch.zeros(2, dtype=torch.long, device=device)
        ).loss
        loss.backward()
        each.eval()
        losses.append(float(loss.detach().cpu()))
    return losses[0], losses[1], os.environ.get(HUB_KERNELS_SWITCH)


def test_a_model_the_notebook_loaded_and_one_the_cell_loads_both_train_on_xla(saved_model: Path) -> None:
    model = BertForSequenceClassification.from_pretrained(saved_model)  # in the notebook: kernelized for the CPU where on
    first, second, switch = tpu_nb.launch(train_a_step, model, saved_model, progress=False, timeout=300)
    assert first > 0 and second > 0
    assert switch == "NO"  # in the worker only
    assert os.environ.get(HUB_KERNELS_SWITCH) != "NO"  # the notebook's process is left as it was
