# A stand-in for python:3.11-slim-bookworm built from Debian's packages alone, for hosts that
# reach no image registry (docker/containers_test.py builds it on an image made by debootstrap):
#   podman build -f docker/debian-python.Dockerfile --build-arg BASE_IMAGE=localhost/debian:bookworm-slim \
#       -t localhost/chexretrieve-python:3.11-bookworm docker
# Debian bookworm's python3 is 3.11, the version the project images use.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}

ENV DEBIAN_FRONTEND=noninteractive \
    PATH=/opt/venv/bin:$PATH

RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/venv \
    && /opt/venv/bin/python -c "import sys; assert sys.version_info[:2] == (3, 11), sys.version"

CMD ["python"]
