# Two commands for users: `make demo` and `make test`. Each installs first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.tpu_nb-installed

.PHONY: install demo test benchmark clean

install: $(STAMP)

# Reinstalls only when the package metadata changed, so a second run takes seconds.
$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[xla,test,models,browser]'
	touch $(STAMP)

demo: install
	$(BIN)/python scripts/demo.py

test: install
	PJRT_DEVICE=CPU $(BIN)/python -m pytest

benchmark: install
	$(BIN)/python benchmarks/return_transfer.py
	PJRT_DEVICE=CPU $(BIN)/python benchmarks/progress_overhead.py

clean:
	rm -rf $(VENV) build *.egg-info
