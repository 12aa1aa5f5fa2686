# Two commands for users: `make demo` and `make test`. Each installs first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.tpu_nb-installed

.PHONY: install demo test test-compat benchmark clean

install: $(STAMP)

# Reinstalls only when the package metadata changed, so a second run takes seconds.
$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[xla,test,models,browser,lora]'
	touch $(STAMP)

demo: install
	$(BIN)/python scripts/demo.py

# Lint, types and the import contract between the rooms (setup.cfg) first: seconds.
test: install
	$(BIN)/ruff check tpu_nb tests scripts benchmarks
	$(BIN)/ruff format --check tpu_nb tests scripts benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports
	PJRT_DEVICE=CPU $(BIN)/python -m pytest

# Colab's and Kaggle's TPU images (compat/*-tpu.txt): each gets a venv with
# the image's packages, tpu_nb installed as users install it (pip must change
# none of the image's packages), then the test suite run against that install
# (from build/, so the installed copy is imported, not this checkout), and the
# quick start in a real browser on Colab's widget stack (ipywidgets 7.7.1 with
# its own frontend, the classic Notebook of that image). Colab's image runs on
# Python 3.13 (Debian 13's, in .debian13/ through chroot: scripts/debian13.py,
# root and debootstrap needed), Kaggle's on this machine's 3.11 (Kaggle runs
# 3.12, which Debian's registry does not have); .venv-IMAGE/run-python runs either.
# TORCH_WARM_POOL=0: PyPI's torch 2.8.0 brings triton, so importing
# transformers' Trainer starts torch's compile-worker processes; Kaggle's
# torch 2.8.0+cpu has no triton and starts none (nor does torch 2.9).
COMPAT_IMAGES := colab kaggle

test-compat: install $(COMPAT_IMAGES:%=.venv-%/.image-installed)
	set -e; for image in $(COMPAT_IMAGES); do \
		$(PYTHON) scripts/compat_env.py install $$image; \
		mkdir -p build/compat-$$image; \
		cd build/compat-$$image; \
		PJRT_DEVICE=CPU TORCH_WARM_POOL=0 ../../.venv-$$image/run-python -P -m pytest -c ../../setup.cfg --rootdir ../.. \
			../../tests --ignore=../../tests/browser; \
		cd ../..; \
	done
	TPU_NB_CLASSIC_NOTEBOOK_PYTHON=$(CURDIR)/.venv-colab/run-python PJRT_DEVICE=CPU TORCH_WARM_POOL=0 \
		$(BIN)/python -m pytest tests/browser/test_classic_notebook.py

.venv-%/.image-installed: compat/%-tpu.txt scripts/compat_env.py scripts/debian13.py
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

clean:
	rm -rf $(VENV) $(COMPAT_IMAGES:%=.venv-%) .debian13 build *.egg-info
