# The commands a newcomer needs (see README.md):
#   make demo   build llama.cpp, fetch the offline pair, run, sweep, report and plot
#   make check  the quick tier: ruff, mypy and the tests that need no binaries, torch or Ray (< 90 s)
#   make test   the whole test suite (builds llama.cpp first if the cache has no build)
#   make test-hub  the hub tests on the newest huggingface_hub (part of make test)
#   make docs   docs/results.md's tables from the recorded sweeps
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
EXPERIMENT ?= smollm2-quicksort
DRAFTS ?= 1,2,4,8,12
# Two installs: llamaspec with its dev tools (enough for the demo), and the convert extra (a CPU
# torch wheel, transformers) on top for the tests that convert Hugging Face checkpoints.
STAMP  := $(VENV)/.installed
CONVERT_STAMP := $(VENV)/.installed-convert

.PHONY: demo check test test-hub lint docs setup setup-convert build models clean-venv

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m compileall -q llamaspec  # bytecode even where PYTHONDONTWRITEBYTECODE is set: faster start
	touch $(STAMP)

$(CONVERT_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[convert,hf,cluster,prompts,dev]'
	touch $(CONVERT_STAMP)

# The hub tests again on the newest huggingface_hub pip takes for llamaspec alone (2.x, httpx2),
# in a venv of their own: the main one holds 0.36, which transformers 4.57 needs. sentencepiece
# and protobuf make the tiny checkpoints, pyarrow reads Alpaca's parquet.
HUB_VENV  ?= .venv-hub
HUB_STAMP := $(HUB_VENV)/.installed
HUB_TESTS := tests/test_hub.py tests/test_models_fetch.py tests/test_hf_models.py tests/test_prompts.py

$(HUB_STAMP): pyproject.toml
	$(PYTHON) -m venv $(HUB_VENV)
	$(HUB_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(HUB_VENV)/bin/python -m pip install --quiet --upgrade -e '.[prompts]' pytest 'sentencepiece>=0.1.98,<0.3.0' 'protobuf>=4.21.0' safetensors
	touch $(HUB_STAMP)

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
	$(MAKE) test-hub

test-hub: $(HUB_STAMP)
	$(HUB_VENV)/bin/python -c 'import huggingface_hub as h; print("huggingface_hub", h.__version__)'
	$(HUB_VENV)/bin/python -m pytest -q -p no:cacheprovider $(HUB_TESTS)

# docs/results.md's tables, from the sweeps recorded in tests/fixtures (tests/test_docs.py checks them).
docs: setup
	$(BIN)/python docs/make_results.py

lint: setup
	$(BIN)/ruff check llamaspec tests benchmarks
	$(BIN)/mypy llamaspec

clean-venv:
	rm -rf $(VENV) $(HUB_VENV)
