# Two commands on a fresh machine (Python >= 3.10):
#   make demo   set up .venv, then prepare + train + evaluate on the bundled click log
#   make test   set up .venv, then run the test suite
# TORCH picks the PyTorch build (also for the fresh venv of the wheel test), e.g.
#   make demo TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin

.PHONY: setup demo test test-quick lint gpu-check

# the demo needs the core packages only; the tests add the dev extra (pytest, Dask, Optuna, ...)
$(VENV)/.core: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet $(TORCH)
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.dev: $(VENV)/.core
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $@

setup: $(VENV)/.dev

demo: $(VENV)/.core
	$(BIN)/recsys-train

# the suite includes tests/test_wheel.py: build the wheel, install it into a fresh venv, run it
test: setup
	RECSYS_SEQ_TORCH='$(TORCH)' $(BIN)/python -m pytest

# the tests not marked slow (no end-to-end runs): a developer's loop, a few minutes
test-quick: setup
	$(BIN)/python -m pytest -m "not slow" -q

lint: setup
	$(BIN)/ruff check recsys_seq data_prep tests

# on a node with GPUs (and the shared files for the benchmark): training throughput on one GPU
# and under DDP on all of them, fp32 and bf16, with the data-wait share; then the demo trained
# under DDP in bf16 on every GPU, end to end
gpu-check: setup
	$(BIN)/recsys-bench task=throughput device=cuda output=outputs/bench/gpu_throughput.json
	$(BIN)/recsys-train trainer=ddp hydra.run.dir=outputs/gpu-check/ddp
