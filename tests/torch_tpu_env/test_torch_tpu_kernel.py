"""tpu_nb in the TorchTPU environment (torch 2.14.1, torch_tpu 0.2.0, libtpu 0.0.52), on a machine without a TPU.

Runs only there (`make test-torch-tpu`, see conftest.py beside this file and tests/conftest.py).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from nbformat import NotebookNode
from support.kernel import Kernel, errors_of, text_of

PINNED = {"torch": "2.14.1", "torch-tpu": "0.2.0", "libtpu": "0.0.52"}
TCMALLOC_WARNING = "UserWarning: <TorchTpu/Performance/TcMalloc/> tcmalloc is not loaded"


def run_python(python: str, code: str) -> subprocess.CompletedProcess[str]:
    """`python -c code` from / (so this checkout is not importable), as a user's shell runs it (torch's autoloading on)."""
    env = {name: value for name, value in os.environ.items() if name not in ("PJRT_DEVICE", "TORCH_DEVICE_BACKEND_AUTOLOAD")}
    return subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300, env=env, cwd="/")


def test_the_environment_holds_the_pinned_stack_and_no_torch_xla(torch_tpu_python: str) -> None:
    done = run_python(
        torch_tpu_python,
        "from importlib import metadata, util\n"
        "for name in ('torch', 'torch-tpu', 'libtpu'): print(name, metadata.version(name))\n"
        "print('torch_xla', util.find_spec('torch_xla'))",
    )
    assert done.returncode == 0, done.stderr
    # PyPI's torch 2.14.1 is the CUDA build, reporting itself as 2.14.1+cu130.
    assert done.stdout.splitlines() == [*(f"{name} {version}" for name, version in PINNED.items()), "torch_xla None"]


def test_torch_tpu_imports_without_a_tpu_and_registers_no_device(torch_tpu_python: str) -> None:
    done = run_python(
        torch_tpu_python,
        "import torch, torch_tpu\n"
        "print('autoloaded', torch_tpu._loader._LOADED)\n"
        "print('devices', torch.accelerator.device_count())\n"
        "try:\n"
        "    torch.device('tpu')\n"
        "except RuntimeError as error:\n"
        "    print('no tpu device:', str(error).split(',')[0])",
    )
    assert done.returncode == 0, done.stderr
    # libtpu is installed, so no "libtpu not found."; without a TPU the backend loads nothing:
    # `_loader.load()` registers the "tpu" device only when libtpu counts a chip.
    assert done.stdout.splitlines() == ["autoloaded False", "devices 0", "no tpu device: Expected one of cpu"]
    # What every process that imports torch here prints on stderr (torch's backend autoload imports torch_tpu).
    assert TCMALLOC_WARNING in done.stderr
    assert "GetPjrtApi was found for TPU at" in done.stderr


def test_without_libtpu_importing_torch_prints_libtpu_not_found_and_exits(torch_tpu_python: str) -> None:
    # libtpu made unimportable: torch_tpu's own message, then absl's fatal check, so any `import torch` dies there.
    done = run_python(torch_tpu_python, "import sys\nsys.modules['libtpu'] = None\nimport torch\nprint('imported')")
    assert done.stdout == "libtpu not found.\n"
    assert done.returncode != 0
    assert "Environment variable TPU_LIBRARY_PATH is not set. Can't load PJRT plugin TPU." in done.stderr


def test_load_ext_keeps_torch_tpu_out_tpu_info_names_the_stack_and_tpu_train_is_refused_for_want_of_a_tpu(
    kernel: Kernel, torch_tpu_python: str
) -> None:
    where = kernel.run("import sys, tpu_nb\nprint(sys.executable)\nprint(tpu_nb.__file__)", allow_errors=False)
    executable, package = text_of(where).splitlines()
    assert Path(executable) == Path(torch_tpu_python)
    assert "site-packages" in Path(package).parts  # the installed copy, not this checkout

    loaded = kernel.run("%load_ext tpu_nb")
    assert errors_of(loaded) == [] and stderr_of(loaded) == "", text_of(loaded)
    # %load_ext turned torch's backend autoloading off: importing torch now leaves torch_tpu (and libtpu) out.
    imported = kernel.run("import os, torch\nprint(os.environ['TORCH_DEVICE_BACKEND_AUTOLOAD'], 'torch_tpu' in sys.modules)")
    assert text_of(imported).split() == ["0", "False"] and TCMALLOC_WARNING not in stderr_of(imported), text_of(imported)

    info = kernel.run("%tpu_info")
    assert errors_of(info) == [] and stderr_of(info) == "", text_of(info)
    shown = text_of(info)
    assert "TPU stack    torch_tpu 0.2.0: TorchTPU is the stack that works with torch 2.14.1" in shown
    assert "Other stack  torch_xla: not installed" in shown and "Install      pip install tpu_nb\n" in shown
    assert "[torch_tpu_needs_tpu] No TPU attached, and TorchTPU (torch_tpu) has no CPU mode" in shown
    assert "Not ready: fix 1 error before %%tpu_train." in shown

    refused = kernel.run("%%tpu_train\nprint('never runs')")
    [error] = errors_of(refused)
    assert error.ename == "LaunchRefused" and "TorchTPU (torch_tpu) has no CPU mode" in error.evalue
    assert "tpu_nb[xla]" in error.evalue and "never runs" not in text_of(refused)
    launched = kernel.run("tpu_nb.launch(print, 'never runs', progress=False)")
    [error] = errors_of(launched)
    assert error.ename == "LaunchRefused" and "has no CPU mode" in error.evalue
    assert "torch_tpu" not in text_of(kernel.run("print(sorted(name for name in sys.modules if name.startswith('torch_tpu')))"))


def stderr_of(cell: NotebookNode) -> str:
    return "".join(output.text for output in cell.outputs if output.output_type == "stream" and output.name == "stderr")
