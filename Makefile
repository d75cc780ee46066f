# The commands a newcomer needs (see README.md):
#   make demo   build llama.cpp, fetch the offline pair, run it once, then one answer for a mixed workload
#   make check  the quick tier: ruff, mypy and the tests that need no binaries, torch or Ray (< 90 s)
#   make test   the whole test suite (builds llama.cpp first if the cache has no build, and what
#               its slow tier needs in the background while the quick tier runs)
#   make test-loaded  make test while another process keeps one core busy (tests/stress.sh)
#   make test-hub  the hub tests on the newest huggingface_hub, the hf tests on transformers 5 (part of make test)
#   make docs   docs/results.md's tables from the recorded sweeps
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
EXPERIMENT ?= smollm2-quicksort
PAIR   ?= models/smollm2-135m
# Two installs: llamaspec with its dev tools (enough for the demo), and the convert extra (a CPU
# torch wheel, transformers) on top for the tests that convert Hugging Face checkpoints.
STAMP  := $(VENV)/.installed
CONVERT_STAMP := $(VENV)/.installed-convert

.PHONY: demo check test test-loaded test-hub lint docs setup setup-convert build models clean-venv

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
# and the transformers backend's tests on the newest transformers 5.x (with the 2.13.0 CPU torch
# wheel), in a venv of their own: the main one holds transformers 4.57.6 (the convert extra's pin,
# which the pinned tree's convert_hf_to_gguf.py needs) and with it huggingface_hub 0.36. The
# converting tests (marker convert) run in the main venv only. sentencepiece and protobuf make the
# tiny checkpoints, pyarrow reads Alpaca's parquet.
HUB_VENV  ?= .venv-hub
HUB_STAMP := $(HUB_VENV)/.installed
HUB_TESTS := tests/test_hub.py tests/test_models_fetch.py tests/test_hf_models.py tests/test_prompts.py tests/test_adhoc.py
HF_TESTS  := tests/test_hf_runner.py tests/test_hf_cli.py tests/test_hf_experiments.py tests/test_hf_models.py tests/test_deploy.py

$(HUB_STAMP): pyproject.toml
	$(PYTHON) -m venv $(HUB_VENV)
	$(HUB_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(HUB_VENV)/bin/python -m pip install --quiet --upgrade -e '.[prompts,hf]' 'torch==2.13.0' 'transformers>=5,<6' pytest 'sentencepiece>=0.1.98,<0.3.0' 'protobuf>=4.21.0' safetensors
	touch $(HUB_STAMP)

setup: $(STAMP)

setup-convert: $(CONVERT_STAMP)

build: setup
	$(BIN)/llamaspec source fetch
	$(BIN)/llamaspec build

models: build
	$(BIN)/llamaspec models fetch smollm2-135m

# The demo: the write-up's form first (one prompt, one setting, paired runs), then the question a
# user asks, in llama.cpp's words: for this pair, on this machine, over a mixed workload, what should
# I run? It ends with one answer (a draft length, an n-gram mode or the target alone), its
# per-category verdicts, how sure it is, and the command that deploys it.
demo: models
	$(BIN)/llamaspec run $(EXPERIMENT) --repeats 5
	$(BIN)/llamaspec sweep -m $(PAIR)/ggml-model-f32.gguf -md $(PAIR)/ggml-model-q4_1.gguf

# What the quick tier leaves out, by marker (pyproject.toml says what each needs).
QUICK := not llamacpp and not slow and not convert and not hf and not cluster

# The quick tests run in 4 processes (pytest-xdist): most of their time is waiting on child
# processes, sockets and locks, so 4 fit 2 cores. The tests that run the real binaries, servers and
# Ray run in 2 processes, whole files each (tests/make_test.sh).
WORKERS ?= 4

check: setup
	$(BIN)/ruff check llamaspec tests benchmarks
	$(BIN)/mypy llamaspec
	$(BIN)/python -m pytest -q -n $(WORKERS) -m "$(QUICK)" --durations=5

# make test: the quick tier, the slow tier, then the hub tests; what the slow tier
# needs (llama-server, the older llama.cpp generations) is built in the background from the start
# (tests/make_test.sh says how; a failed build fails make test with one line naming its log).
BUILDS_LOG ?= $(VENV)/llamacpp-builds.log

test: setup build
	BIN=$(BIN) WORKERS=$(WORKERS) QUICK="$(QUICK)" HUB_STAMP=$(HUB_STAMP) BUILDS_LOG=$(BUILDS_LOG) tests/make_test.sh

# The whole suite again, while a busy loop keeps one core busy: no verdict may depend on an idle machine.
test-loaded: setup build
	MAKE="$(MAKE)" PYTHON=$(PYTHON) tests/stress.sh

test-hub: $(HUB_STAMP)
	$(HUB_VENV)/bin/python -c 'import huggingface_hub as h, transformers as t; print("huggingface_hub", h.__version__, "transformers", t.__version__)'
	$(HUB_VENV)/bin/python -m pytest -q -p no:cacheprovider -m "not convert and not hf" $(HUB_TESTS)
	$(HUB_VENV)/bin/python -m pytest -q -p no:cacheprovider -m "hf and not convert" $(HF_TESTS)

# docs/results.md's tables, from the sweeps recorded in tests/fixtures (tests/test_docs.py checks them).
docs: setup
	$(BIN)/python docs/make_results.py

lint: setup
	$(BIN)/ruff check llamaspec tests benchmarks
	$(BIN)/mypy llamaspec

clean-venv:
	rm -rf $(VENV) $(HUB_VENV)
