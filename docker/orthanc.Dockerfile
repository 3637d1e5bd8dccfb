# A small Orthanc PACS with the DICOMweb plugin: Debian's packages, the ones the tests run.
# Build context: this folder (docker/). BASE_IMAGE: any Debian bookworm image
# (docker/containers_test.py passes one made by debootstrap when no registry is reachable).
# The user and password come from ORTHANC_USER / ORTHANC_PASSWORD at run time (orthanc.json
# reads them), never from the image.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}

RUN apt-get update \
    && apt-get install -y --no-install-recommends orthanc orthanc-dicomweb curl \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /var/lib/orthanc/db && chown -R orthanc:orthanc /var/lib/orthanc

COPY orthanc.json /etc/orthanc/chexretrieve.json

USER orthanc
EXPOSE 8042 4242
HEALTHCHECK --interval=5s --timeout=3s --retries=30 \
    CMD curl -fsS -u "$ORTHANC_USER:$ORTHANC_PASSWORD" http://127.0.0.1:8042/system || exit 1
VOLUME ["/var/lib/orthanc/db"]
ENTRYPOINT ["Orthanc"]
CMD ["/etc/orthanc/chexretrieve.json"]
