# The commands a newcomer needs (see README.md):
#   make demo   build llama.cpp, fetch the offline pair, run, sweep, report and plot
#   make check  the quick tier: ruff, mypy and the tests that need no binaries, torch or Ray (< 90 s)
#   make test   the whole test suite (builds llama.cpp first if the cache has no build)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
EXPERIMENT ?= smollm2-quicksort
DRAFTS ?= 1,2,4,8,12
# Two installs: llamaspec with its dev tools (enough for the demo), and the convert extra (a CPU
# torch wheel, transformers) on top for the tests that convert Hugging Face checkpoints.
STAMP  := $(VENV)/.installed
CONVERT_STAMP := $(VENV)/.installed-convert

.PHONY: demo check test lint setup setup-convert build models clean-venv

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m compileall -q llamaspec  # bytecode even where PYTHONDONTWRITEBYTECODE is set: faster start
	touch $(STAMP)

$(CONVERT_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[convert,hf,cluster,prompts,dev]'
	touch $(CONVERT_STAMP)

setup: $(STAMP)

setup-convert: $(CONVERT_STAMP)

build: setup
	$(BIN)/llamaspec source fetch
	$(BIN)/llamaspec build

models: build
	$(BIN)/llamaspec models fetch smollm2-135m

# The demo ends with the answer: the adaptive sweep's recommendation, how sure it is, and the
# command that deploys it.
demo: models
	$(BIN)/llamaspec run $(EXPERIMENT) --repeats 5
	$(BIN)/llamaspec report $(EXPERIMENT) --no-plot
	$(BIN)/llamaspec sweep $(EXPERIMENT) --draft $(DRAFTS)

# What the quick tier leaves out, by marker (pyproject.toml says what each needs).
QUICK := not llamacpp and not slow and not convert and not hf and not cluster

# The quick tests run in 4 processes (pytest-xdist): most of their time is waiting on child
# processes, sockets and locks, so 4 fit 2 cores. The tests that run the real binaries, servers and
# Ray run one at a time, as they measure and start servers of their own.
WORKERS ?= 4

check: setup
	$(BIN)/ruff check llamaspec tests benchmarks
	$(BIN)/mypy llamaspec
	$(BIN)/python -m pytest -q -n $(WORKERS) -m "$(QUICK)" --durations=5

test: setup-convert build
	$(BIN)/python -m pytest -q -n $(WORKERS) -m "$(QUICK)"
	$(BIN)/python -m pytest -q -m "not ($(QUICK))" --durations=10

lint: setup
	$(BIN)/ruff check llamaspec tests benchmarks
	$(BIN)/mypy llamaspec

clean-venv:
	rm -rf $(VENV)
