# The two entry points of the README: `make demo` and `make test`.
# Both create or refresh .venv in the checkout and install the project into it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.chexretrieve-installed
# the OHIF Viewer `serve` hosts under /viewer (npm @ohif/app, pinned; never fetched at run time)
OHIF_VERSION := 3.13.2
OHIF_DIR := $(VENV)/ohif/$(OHIF_VERSION)

.PHONY: setup demo test lint format adversarial

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# the local CPU wheel first: a bare `torch` would pull a multi-GB CUDA build
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	# the reference implementation of the encoder tests, without torchvision (see pyproject.toml)
	$(PY) -m pip install -q --no-deps open_clip_torch==3.3.0
	touch $(STAMP)

$(OHIF_DIR)/dist/index.html: | $(STAMP)
	@echo "setup: installing the OHIF Viewer $(OHIF_VERSION) (npm pack @ohif/app@$(OHIF_VERSION), about 50 MB, SHA-1 checked) into $(OHIF_DIR)"
	$(PY) -m chexretrieve.viewer_web.install --into $(OHIF_DIR)

setup: $(STAMP) $(OHIF_DIR)/dist/index.html

demo: setup
	$(PY) -m chexretrieve demo $(if $(PORT),--port $(PORT))

test: setup
	$(PY) -m ruff check chexretrieve tests benchmarks
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(PY) -m pytest -q $(PYTEST_ARGS)

lint: setup
	$(PY) -m ruff check chexretrieve tests benchmarks
	$(PY) -m ruff format --check chexretrieve tests benchmarks

# the hardening suite (tests/adversarial): a table of cases tried / passed per category at the end,
# the same numbers in test-artifacts/adversarial-summary.json
adversarial: setup
	mkdir -p test-artifacts
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
	CHEXRETRIEVE_ADV_SUMMARY=test-artifacts/adversarial-summary.json \
	$(PY) -m pytest tests/adversarial -q -p no:cacheprovider $(PYTEST_ARGS)

format: setup
	$(PY) -m ruff format chexretrieve tests benchmarks
	$(PY) -m ruff check --fix chexretrieve tests benchmarks
