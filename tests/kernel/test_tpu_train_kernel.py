"""What users do in a real Jupyter kernel: %tpu_info, a normal run, a failing worker."""

from __future__ import annotations

from support.kernel import Kernel, errors_of, plain, text_of
from support.processes import descendants


def test_tpu_info_then_training_in_the_same_kernel(kernel: Kernel) -> None:
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    info = kernel.run("%tpu_info", allow_errors=False)
    [output] = info.outputs
    assert "text/html" in output.data
    assert "CPU" in output.data["text/plain"] and "1 worker" in output.data["text/plain"]

    kernel.run("import torch\nweights = torch.nn.Linear(3, 1)\nstart = weights.weight.detach().clone()", allow_errors=False)
    cell = kernel.run(
        "%%tpu_train --return weights\n"
        "import torch_xla.core.xla_model as xm\n"
        "weights.to(device)\n"
        "opt = torch.optim.SGD(weights.parameters(), lr=0.5)\n"
        "for step in range(3):\n"
        "    loss = weights(torch.ones(4, 3, device=device)).pow(2).mean()\n"
        "    loss.backward(); xm.optimizer_step(opt); opt.zero_grad(); xm.mark_step()\n"
        "    print('step', step)\n"
        "f'rank {rank} of {world_size} on {device}'\n",
        allow_errors=False,
    )
    text = text_of(cell)
    assert "step 2" in text
    assert "'rank 0 of 1 on xla:0'" in text
    changed = kernel.run("print(bool((weights.weight != start).any()), weights.weight.device)", allow_errors=False)
    assert text_of(changed).strip() == "True cpu"
    assert not descendants(kernel.pid)


def test_a_failing_worker_fails_the_cell_with_its_traceback(kernel: Kernel) -> None:
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    cell = kernel.run("%%tpu_train\nprint('before')\nvalues = {}\nvalues['missing']\n")
    [error] = errors_of(cell)
    assert error.ename == "WorkerError"
    assert "rank 0 of 1 raised KeyError: 'missing'" in error.evalue
    traceback = plain("\n".join(error.traceback))
    assert "values['missing']" in traceback and "line 4" in traceback
    assert "before" in text_of(cell)
    assert not descendants(kernel.pid)
    again = kernel.run("%%tpu_train\n21 * 2", allow_errors=False)
    assert "42" in text_of(again)
