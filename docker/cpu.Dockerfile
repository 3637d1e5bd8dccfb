# syntax=docker/dockerfile:1
# chexretrieve on CPU: the command line, the case-lookup UI (`serve`) and ingest workers.
# Build from the repository root (docker/compose.yaml does this):
#   docker build -f docker/cpu.Dockerfile -t chexretrieve:cpu .
ARG PYTHON_VERSION=3.11
FROM python:${PYTHON_VERSION}-slim-bookworm

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
# torch from PyTorch's CPU wheel index first: from PyPI a bare `torch` brings CUDA libraries
RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu

# the project: an editable install keeps db/ (migrations) and anchors/ next to the package, where
# the store and the anchor loader look for them
COPY pyproject.toml README.md ./
COPY chexretrieve ./chexretrieve
COPY db ./db
COPY anchors ./anchors
RUN pip install -e '.[scale]' && chexretrieve --version

USER chex
WORKDIR /data
VOLUME ["/data"]
EXPOSE 7860
ENTRYPOINT ["chexretrieve"]
CMD ["--help"]
