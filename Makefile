# Every target sets itself up: `make run` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install run test test-fast test-engines lint bench data chromium clean

install: $(STAMP)

# CPU torch goes in first: a bare `torch` requirement would otherwise pull a multi-GB CUDA build.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev,data]'
	touch $(STAMP)

# The quick start: fixed context C vs additive attention on one task, then the comparison table.
run: install
	dir=outputs/quickstart/$$(date +%Y-%m-%d_%H-%M-%S) && \
	$(BIN)/attnx train -m experiment=quickstart hydra.sweep.dir=$$dir && \
	$(BIN)/attnx report $$dir

# Both in random order (pytest-randomly; the last line of the output names the seed to repeat it), on two
# worker processes (pytest-xdist; an idle worker steals queued tests): the end-to-end runs use one torch
# thread each, so two cores run two. The `engines` tests (Inductor's compiles, SLURM, DDP, launcher
# worker pools) are `test-engines`': CI runs both.
test: install
	$(BIN)/python -m pytest -n 2 --dist worksteal -m "not engines"

# What drives an engine beyond the test process, tens of seconds a test: Inductor's C++ compile, a SLURM
# cluster (skipped without one), DDP's two processes, joblib's and submitit's worker processes.
test-engines: install
	$(BIN)/python -m pytest -n 2 --dist worksteal -m engines

# The unit tests only: no CLI runs, Lightning fits, subprocesses or learning runs (markers in pyproject.toml),
# on the same two workers.
test-fast: install
	$(BIN)/python -m pytest -n 2 --dist worksteal -m "not e2e and not slow"

# ruff over the repository; mypy over the package, as [tool.mypy] in pyproject.toml configures it.
lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy

data: install
	$(BIN)/python -m attnx.tasks

bench: install
	$(BIN)/attnx bench

# Debian's Chromium for the browser tests, which skip without it (as root: CI runs this in .ci/run).
chromium:
	command -v chromium >/dev/null || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null)

clean:
	rm -rf $(VENV) outputs multirun
