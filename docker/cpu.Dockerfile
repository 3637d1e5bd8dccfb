# chexretrieve on CPU: the command line, the case-lookup UI (`serve`) and ingest workers.
# Build from the repository root (docker/compose.yaml does this):
#   docker build -f docker/cpu.Dockerfile -t chexretrieve:cpu .
# Build arguments:
#   BASE_IMAGE   a Debian bookworm image with Python 3.11 and pip first on PATH
#                (docker/containers_test.py passes one built from Debian packages when no
#                registry is reachable: docker/debian-python.Dockerfile)
#   TORCH_INDEX  the wheel index of the CPU build of torch; empty = pip's own configuration
#                (a bare `torch` from PyPI brings CUDA libraries, so keep a CPU index or a local
#                CPU wheel in pip's find-links)
# No secret is baked in: passwords come from the environment at run time (docker/compose.yaml).
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    CHEXRETRIEVE_DB=sqlite:////data/chexretrieve.sqlite \
    XDG_CACHE_HOME=/data/cache

RUN useradd --create-home --uid 10001 chex && mkdir -p /data && chown chex /data

WORKDIR /opt/chexretrieve
RUN pip install torch==2.13.0 ${TORCH_INDEX:+--index-url "$TORCH_INDEX"} \
    && python -c "exit('a CUDA build of torch: set TORCH_INDEX' if __import__('torch').version.cuda else 0)"

# the dependencies first, from pyproject.toml alone (an empty package stands in for the code), so
# that a change to the code rebuilds only the last, quick layers
COPY pyproject.toml ./
RUN mkdir chexretrieve && touch README.md chexretrieve/__init__.py \
    && pip install -e '.[scale]' && rm -r chexretrieve README.md

# the project: an editable install keeps db/ (migrations) and anchors/ next to the package, where
# the store and the anchor loader look for them
COPY README.md ./
COPY chexretrieve ./chexretrieve
COPY db ./db
COPY anchors ./anchors
RUN pip install --no-deps -e . && chexretrieve --version

USER chex
WORKDIR /data
VOLUME ["/data"]
EXPOSE 7860
# the UI answers on / (docker honours this; podman keeps it with --format docker; compose.yaml
# repeats it per service)
HEALTHCHECK --interval=10s --timeout=6s --start-period=60s --retries=10 \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:7860/', timeout=5)"
ENTRYPOINT ["chexretrieve"]
CMD ["--help"]
