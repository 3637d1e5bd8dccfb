# chexretrieve with CUDA: the same image as cpu.Dockerfile, with a CUDA build of torch so that
# encoders run on the GPU (`--device cuda`). Needs the NVIDIA container toolkit on the host:
#   docker build -f docker/cuda.Dockerfile -t chexretrieve:cuda .
#   docker run --gpus all chexretrieve:cuda encoders check --device cuda
# Build arguments:
#   CUDA_IMAGE   the base: any Debian/Ubuntu image with apt (the CUDA runtime image by default;
#                PyPI's torch wheels bring their own CUDA libraries, so a plain Debian base works
#                too: docker/containers_test.py --cuda builds it on Debian bookworm)
#   TORCH_INDEX  the wheel index of a CUDA build of torch; empty = pip's own configuration
# No GPU is needed to build it; the build fails if a CPU-only torch was installed.
ARG CUDA_IMAGE=nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04
FROM ${CUDA_IMAGE}

# the PyTorch wheel index matching the CUDA runtime above
ARG TORCH_INDEX=https://download.pytorch.org/whl/cu128

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    CHEXRETRIEVE_DB=sqlite:////data/chexretrieve.sqlite \
    XDG_CACHE_HOME=/data/cache \
    PATH=/opt/venv/bin:$PATH

RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/venv \
    && useradd --create-home --uid 10001 chex && mkdir -p /data && chown chex /data

WORKDIR /opt/chexretrieve
RUN pip install torch==2.13.0 ${TORCH_INDEX:+--index-url "$TORCH_INDEX"} \
    && python -c "exit(0 if __import__('torch').version.cuda else 'a CPU-only torch was installed')"

# the dependencies in a layer of their own (see cpu.Dockerfile)
COPY pyproject.toml ./
RUN mkdir chexretrieve && touch README.md chexretrieve/__init__.py \
    && pip install -e '.[scale]' && rm -r chexretrieve README.md

COPY README.md ./
COPY chexretrieve ./chexretrieve
COPY db ./db
COPY anchors ./anchors
RUN pip install --no-deps -e . && chexretrieve --version

USER chex
WORKDIR /data
VOLUME ["/data"]
EXPOSE 7860
HEALTHCHECK --interval=10s --timeout=6s --start-period=90s --retries=10 \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:7860/', timeout=5)"
ENTRYPOINT ["chexretrieve"]
CMD ["--help"]
