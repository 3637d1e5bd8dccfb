# chexretrieve with CUDA: the same image as cpu.Dockerfile, with a CUDA build of torch so that
# encoders run on the GPU (`--device cuda`). Needs the NVIDIA container toolkit on the host:
#   docker build -f docker/cuda.Dockerfile -t chexretrieve:cuda .
#   docker run --gpus all chexretrieve:cuda encoders check --device cuda
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
RUN pip install torch==2.13.0 --index-url ${TORCH_INDEX}

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
