# creditgym: `make run` (the main job) and `make test` (the whole suite) work on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
TORCH  := torch==2.13.0
PIP    := $(BIN)/python -m pip install --quiet --disable-pip-version-check

.PHONY: run test engine install install-dev lint format bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch first, pinned: a CPU build lies on disk; an unpinned resolve would fetch several GB of CUDA wheels.
$(VENV)/.core: $(BIN)/python pyproject.toml
	$(PIP) $(TORCH)
	$(PIP) -e .
	touch $@

$(VENV)/.dev: $(VENV)/.core pyproject.toml
	$(PIP) -e '.[dev,swe,sb3]'
	touch $@

install: $(VENV)/.core
install-dev: $(VENV)/.dev

## The main job: train the bundled tiny model on Math-v0 with the default credit module (grpo), on the CPU.
run: install
	$(BIN)/creditgym train --env creditgym/Math-v0 --credit grpo --model creditgym/tiny --steps 100 --seed 0 --out runs/train-math-grpo

## A Docker engine that answers, and the local base image (Debian's docker.io + debootstrap, no registry).
engine:
	bash .ci/engine.sh

## The whole suite, Docker tests included.
test: install-dev engine
	$(BIN)/python -m pytest

lint: install-dev
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

format: install-dev
	$(BIN)/ruff format . && $(BIN)/ruff check --fix .

bench: install-dev
	$(BIN)/python examples/benchmarks/env_step.py --json runs/bench/env_step.json

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
