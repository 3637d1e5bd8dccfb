# The two entry points of the README: `make demo` and `make test`.
# Both create or refresh .venv in the checkout and install the project into it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
RUNTIME := $(VENV)/.chexretrieve-runtime
STAMP := $(VENV)/.chexretrieve-installed
# the OHIF Viewer `serve` hosts under /viewer (npm @ohif/app, pinned; never fetched at run time)
OHIF_VERSION := 3.13.2
OHIF_DIR := $(VENV)/ohif/$(OHIF_VERSION)

.PHONY: setup demo test lint format adversarial docs containers-test

# `make demo` installs what the application needs (RUNTIME); `make test` adds the test and docs
# tools (STAMP): a newcomer's first `make demo` does not wait for Ray, MkDocs or Playwright.
# --no-compile: pip's byte-compiling of every module it installs was most of its CPU time
# (torch: 19 s of 24 s); Python compiles the modules actually imported, once, on first use
$(RUNTIME): pyproject.toml Makefile
	@echo "setup 1/3: virtual environment $(VENV) and a current pip (a few seconds)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@t=$$(date +%s); $(PY) -m pip install -q --upgrade pip; echo "  done in $$(( $$(date +%s) - t )) s"
	@# the local CPU wheel first: a bare `torch` would pull a multi-GB CUDA build
	@echo "setup 2/3: torch 2.13.0, the CPU wheel on local disk (about half a minute)"
	@t=$$(date +%s); $(PY) -m pip install -q --no-compile torch==2.13.0; echo "  done in $$(( $$(date +%s) - t )) s"
	@echo "setup 3/3: chexretrieve and what it needs to run (about a minute)"
	@t=$$(date +%s); $(PY) -m pip install -q --no-compile -e '.[demo]'; echo "  done in $$(( $$(date +%s) - t )) s"
	@touch $(RUNTIME)
	@echo "setup complete: the command line is $(VENV)/bin/chexretrieve"

$(STAMP): $(RUNTIME)
	@echo "setup (tests): the test and docs tools (about a minute)"
	@t=$$(date +%s); $(PY) -m pip install -q -e '.[dev]'; echo "  done in $$(( $$(date +%s) - t )) s"
	@# the reference implementation of the encoder tests, without torchvision (see pyproject.toml)
	@echo "setup (tests): open_clip_torch 3.3.0 without dependencies, the encoder tests' reference"
	@t=$$(date +%s); $(PY) -m pip install -q --no-deps open_clip_torch==3.3.0; echo "  done in $$(( $$(date +%s) - t )) s"
	@touch $(STAMP)

$(OHIF_DIR)/dist/index.html: | $(RUNTIME)
	@echo "setup: installing the OHIF Viewer $(OHIF_VERSION) (npm pack @ohif/app@$(OHIF_VERSION), about 50 MB, SHA-1 checked) into $(OHIF_DIR)"
	$(PY) -m chexretrieve.viewer_web.install --into $(OHIF_DIR)

setup: $(STAMP) $(OHIF_DIR)/dist/index.html

demo: $(RUNTIME) $(OHIF_DIR)/dist/index.html
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

# the documentation site (MkDocs, material theme) into site/, offline; --strict as in the tests
docs: setup
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict
	@echo "open site/index.html"

format: setup
	$(PY) -m ruff format chexretrieve tests benchmarks
	$(PY) -m ruff check --fix chexretrieve tests benchmarks

# every image of docker/ built and the compose stack run end to end as a user would (STOW-RS to
# Orthanc, ingest, search in the app container, the UI in Chromium), then torn down; prints the
# time of every step (docs/deployment.md). Needs root, podman (or docker) and chromium; without a
# registry it builds the base images from Debian packages with debootstrap.
containers-test: setup
	$(PY) docker/containers_test.py $(CONTAINERS_TEST_ARGS)
