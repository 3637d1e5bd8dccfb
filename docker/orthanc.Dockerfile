# syntax=docker/dockerfile:1
# A small Orthanc PACS with the DICOMweb plugin: Debian's packages, the ones the tests run.
# Build context: this folder (docker/).
FROM debian:bookworm-slim

RUN apt-get update \
    && apt-get install -y --no-install-recommends orthanc orthanc-dicomweb curl \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /var/lib/orthanc/db && chown -R orthanc:orthanc /var/lib/orthanc

COPY orthanc.json /etc/orthanc/chexretrieve.json

USER orthanc
EXPOSE 8042 4242
VOLUME ["/var/lib/orthanc/db"]
ENTRYPOINT ["Orthanc"]
CMD ["/etc/orthanc/chexretrieve.json"]
