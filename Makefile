# The two entry points of the README: `make demo` and `make test`.
# Both create or refresh .venv in the checkout and install the project into it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.chexretrieve-installed

.PHONY: setup demo test lint format adversarial containers-test

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# the local CPU wheel first: a bare `torch` would pull a multi-GB CUDA build
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	# the reference implementation of the encoder tests, without torchvision (see pyproject.toml)
	$(PY) -m pip install -q --no-deps open_clip_torch==3.3.0
	touch $(STAMP)

setup: $(STAMP)

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

# every image of docker/ built and the compose stack run end to end as a user would (STOW-RS to
# Orthanc, ingest, search in the app container, the UI in Chromium), then torn down; prints the
# time of every step (docs/deployment.md). Needs root, podman (or docker) and chromium; without a
# registry it builds the base images from Debian packages with debootstrap.
containers-test: setup
	$(PY) docker/containers_test.py $(CONTAINERS_TEST_ARGS)
