# Two commands for users: `make demo` and `make test`. Each installs first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.tpu_nb-installed

.PHONY: install demo test test-tutorials test-compat test-classic-notebook test-torch-tpu benchmark clean

# Tests run side by side in this many pytest-xdist workers: many tests wait (on kernels starting, forked workers, sleeps
# that stand for a TPU's long steps), so three keep a 2-core machine busier than two (make test: 14m04s, was 16m34s with
# two, measured); four were no faster than three (pytest 635.7 s against about 637 on 0f176fe). `make test
# TEST_WORKERS=0` runs them one after another in one process. Work stealing: a worker that
# has run out takes half of what another still has queued (tests/conftest.py deals the longest tests to every worker first).
TEST_WORKERS ?= 3
PARALLEL := -n $(TEST_WORKERS) --dist worksteal

install: $(STAMP)

# Reinstalls only when the package metadata changed, so a second run takes seconds. uv installs (pip bootstraps it):
# the same 186 packages at the same versions as pip, in 49 s instead of about 200 from a fresh clone (measured);
# it looks where pip is configured to look on this machine (scripts/compat_env.py sources), then PyPI.
# --compile-bytecode writes the .pyc files at install, as pip does: uv leaves them to the first import, and where
# PYTHONDONTWRITEBYTECODE is set (this machine, CI) no import ever writes them, so every process compiled torch's
# and transformers' sources again (make test's tests from a fresh clone: 21m27s without them, 12m59s with them).
$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet uv
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python $$($(PYTHON) scripts/compat_env.py sources) \
		--upgrade pip -e '.[xla,test,models,browser,lora,trl,search]'
	touch $(STAMP)

demo: install
	$(BIN)/python scripts/demo.py

# Where Chromium is (tests/browser/servers.py), the quick start runs in JupyterLab with the checks of its headless
# run (accuracy up by more than 0.3, every step done): the headless run is not repeated (36 CPU-seconds).
QUICKSTART_IN_BROWSER := $(if $(wildcard /usr/lib/chromium/chromium),--deselect tests/notebooks/test_notebooks.py::test_quickstart)

# Python writes bytecode during the tests, even where PYTHONDONTWRITEBYTECODE=1 is set (this machine and CI set it):
# else every process compiles tpu_nb's and the tests' sources again (each kernel, simulated pod host and tutorial),
# and every xdist worker rewrites the asserts of every test module (a worker's collection: 14.2 CPU-seconds, 11.4 with them found).
# The files go to __pycache__ (.gitignore), as a user's own runs write them.
# XLA:CPU compiles each graph with LLVM's full optimisation, which is most of what the tests' workers spend: the tests
# check what tpu_nb does, not how fast XLA's CPU code runs, so they compile at level 0 without LLVM's expensive passes
# (tests/real_kernel/test_tpu_train_kernel.py and tests/workers/trainer/test_hook.py: 110 CPU-seconds, 59 with them).
# Benchmarks and `make demo` keep XLA's defaults.
TEST_XLA_FLAGS := --xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true
TEST_ENV := PJRT_DEVICE=CPU PYTHONDONTWRITEBYTECODE= XLA_FLAGS="$(TEST_XLA_FLAGS)"

# The tutorials, executed whole (tests/notebooks: each notebook in a real kernel; the quick start in JupyterLab; the
# README's quick-start cells as printed, tests/test_readme.py), are `make test-tutorials`: a third of the suite's CPU time (400 of 1,240 CPU-seconds measured, in eight tests of 40-160 s, before tutorial 08).
# `make test` is everything else, under 10 minutes; CI (.ci/run) runs both.
TUTORIALS := tests/notebooks tests/browser/test_jupyterlab.py tests/test_readme.py

# Lint, types and the import contract between the rooms (setup.cfg) first: seconds.
test: install
	$(BIN)/ruff check tpu_nb tests scripts benchmarks
	$(BIN)/ruff format --check tpu_nb tests scripts benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(TEST_ENV) $(BIN)/python -m pytest $(PARALLEL) $(TUTORIALS:%=--ignore=%)

test-tutorials: install
	$(TEST_ENV) $(BIN)/python -m pytest $(PARALLEL) $(TUTORIALS) $(QUICKSTART_IN_BROWSER)

# Colab's and Kaggle's TPU images (compat/*-tpu.txt): each gets a venv with
# the image's packages, tpu_nb installed as users install it (pip must change
# none of the image's packages), then the tests whose behaviour depends on a
# version the image pins run against that install (from build/, so the
# installed copy is imported, not this checkout), and the quick start in a
# real browser on Colab's widget stack (ipywidgets 7.7.1 with its own
# frontend, the classic Notebook of that image). Colab's image runs on
# Python 3.13 (Debian 13's, in .debian13/ through chroot: scripts/debian13.py,
# root and debootstrap needed), Kaggle's on this machine's 3.11 (Kaggle runs
# 3.12, which Debian's registry does not have); .venv-IMAGE/run-python runs either.
# TORCH_WARM_POOL=0: PyPI's torch 2.8.0 brings triton, so importing
# transformers' Trainer starts torch's compile-worker processes; Kaggle's
# torch 2.8.0+cpu has no triton and starts none (nor does torch 2.9).
COMPAT_IMAGES := colab kaggle
# Not run against either image: the browser tests (JupyterLab's runs in `make test`, the classic Notebook's
# below); the pod-slice tests (about 4 minutes of each suite): a pod's hosts run their own packages (a
# Cloud TPU VM's or a GKE node's), never Colab's or Kaggle's, and the notebook's side of a pod run is plain
# Python (gcloud or kubectl, files, host lines), tested in `make test` (every tutorial runs, 05_pod_slice
# too); and TorchTPU's runs, which need torch 2.11 or newer (the images have 2.9 and 2.8): they run in
# `make test` and in TorchTPU's own environment (test-torch-tpu).
NOT_IN_IMAGES := tests/browser tests/kernel/pod tests/real_kernel/test_pod_kernel.py tests/kernel/test_torch_tpu_runs.py
# Colab's image differs from .venv in Python (3.13), IPython, ipykernel, jupyter_client, ipywidgets, numpy and
# transformers: everything else runs there. Kaggle's differs in torch, torch_xla, transformers, accelerate and
# datasets only: its Python, IPython 9.18.1, ipykernel 7.4.0, jupyter_client 8.10.0, ipywidgets 8.1.9, pyzmq,
# tornado and numpy are .venv's (compat_env.py lists them). So the real-kernel tests (tests/real_kernel, a
# third of the image suite's CPU time) stay out of Kaggle's: what they add to the in-process tests of the same
# code (tests/kernel, tests/workers, which run there with Kaggle's torch, torch_xla and transformers) is the
# kernel, here the same versions as in `make test`; the tutorials run there in real kernels all the same. Two
# stay in: torch imported into the kernel between cells (warm imports), and forking a kernel that holds it.
NOT_IN_kaggle := $(filter-out %/test_warm_start_kernel.py %/test_fork_kernel.py,$(wildcard tests/real_kernel/test_*.py))
NOT_IN_colab :=
IMAGE_TESTS := $(COMPAT_IMAGES:%=test-image-%)
.PHONY: $(IMAGE_TESTS)

# In this order, so that CI (.ci/run) can remove each image's venv once nothing else uses it.
test-compat: test-image-colab test-classic-notebook test-image-kaggle test-torch-tpu

test-classic-notebook: install .venv-colab/.image-installed
	TPU_NB_CLASSIC_NOTEBOOK_PYTHON=$(CURDIR)/.venv-colab/run-python PJRT_DEVICE=CPU TORCH_WARM_POOL=0 \
		$(BIN)/python -m pytest tests/browser/test_classic_notebook.py

$(IMAGE_TESTS): test-image-%: install .venv-%/.image-installed
	$(PYTHON) scripts/compat_env.py install $*
	mkdir -p build/compat-$*
	cd build/compat-$* && $(TEST_ENV) TORCH_WARM_POOL=0 ../../.venv-$*/run-python -P -m pytest -c ../../setup.cfg \
		--rootdir ../.. $(PARALLEL) ../../tests $(addprefix --ignore=../../,$(NOT_IN_IMAGES) $(NOT_IN_$*))

# TorchTPU (torch_tpu 0.2.0, torch 2.14.1, libtpu 0.0.52: compat/torch-tpu-tpu.txt), which no hosted
# image ships yet, on this machine's Python 3.11 and without a TPU: tpu_nb installed as users install it
# (pip must change none of the pins), then tests/torch_tpu_env, whose real kernels run on that venv's
# Python (TPU_NB_TORCH_TPU_PYTHON), and the TorchTPU tests of the main suite (the launch path on the
# CPU/gloo stand-in, the stack choice, the doctor's parsers, report()'s device reads), here with that
# torch and no torch_xla. TPU_NB_TORCH_TPU_ENV=1 lets pytest collect tests/torch_tpu_env, which
# tests/conftest.py keeps out of every other run; TORCH_DEVICE_BACKEND_AUTOLOAD=0 keeps torch_tpu out of
# pytest's own process, as %load_ext tpu_nb does in a notebook's. The venv takes about 7 GB: PyPI's torch
# 2.14.1 is the CUDA build, which does not import without its nvidia-* libraries.
TORCH_TPU_TESTS := tests/kernel/test_torch_tpu_runs.py tests/kernel/tpu/test_torch_tpu_guard.py tests/workers/processes/test_chip_ranks.py \
	tests/workers/cell_api/test_reporting.py tests/workers/readings/test_device_readings.py tests/workers/doctor/test_torch_tpu_readings.py tests/runtime/test_tpu_software.py tests/torch_tpu_env

test-torch-tpu: install .venv-torch-tpu/.image-installed
	$(PYTHON) scripts/compat_env.py install torch-tpu
	mkdir -p build/compat-torch-tpu
	cd build/compat-torch-tpu && TPU_NB_TORCH_TPU_ENV=1 TPU_NB_TORCH_TPU_PYTHON=$(CURDIR)/.venv-torch-tpu/bin/python \
		TORCH_DEVICE_BACKEND_AUTOLOAD=0 ../../.venv-torch-tpu/run-python -P -m pytest -c ../../setup.cfg --rootdir ../.. \
		$(TORCH_TPU_TESTS:%=../../%)

# uv, which installs the pins, is the dev venv's.
.venv-%/.image-installed: compat/%-tpu.txt scripts/compat_env.py scripts/debian13.py | $(STAMP)
	$(PYTHON) scripts/compat_env.py image $*
	touch $@

benchmark: install
	$(BIN)/python benchmarks/return_transfer.py
	PJRT_DEVICE=CPU $(BIN)/python benchmarks/launch_latency.py
	PJRT_DEVICE=CPU $(BIN)/python benchmarks/progress_overhead.py
	PJRT_DEVICE=CPU $(BIN)/python benchmarks/spmd_memory.py
	PJRT_DEVICE=CPU $(BIN)/python benchmarks/host_sync.py
	PJRT_DEVICE=CPU $(BIN)/python benchmarks/checkpoint_overhead.py
	PJRT_DEVICE=CPU $(BIN)/python benchmarks/watchdog_overhead.py
	PJRT_DEVICE=CPU $(BIN)/python benchmarks/trials_side_by_side.py
	PJRT_DEVICE=CPU $(BIN)/python benchmarks/sweep_return_memory.py
	PJRT_DEVICE=CPU $(BIN)/python benchmarks/search_pruning.py
	PJRT_DEVICE=CPU $(BIN)/python benchmarks/scale.py

clean:
	rm -rf $(VENV) $(COMPAT_IMAGES:%=.venv-%) .venv-torch-tpu .debian13 build *.egg-info
