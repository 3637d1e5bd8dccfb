# A stand-in for the postgres:15-bookworm image built from Debian's postgresql-15 package, for
# hosts that reach no image registry (docker/containers_test.py and docker/compose.test.yaml use
# it; docker/compose.yaml keeps postgres:15-bookworm for deployments). It honours the official
# image's variables: POSTGRES_USER (default postgres), POSTGRES_PASSWORD (required),
# POSTGRES_DB (default = the user), PGDATA (default /var/lib/postgresql/data).
#   podman build -f docker/postgres.Dockerfile -t localhost/chexretrieve-postgres:15 docker
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}

ENV DEBIAN_FRONTEND=noninteractive \
    PATH=/usr/lib/postgresql/15/bin:$PATH \
    PGDATA=/var/lib/postgresql/data \
    LANG=C.UTF-8

# no "main" cluster from the package: the entry point makes one from the POSTGRES_* variables
RUN mkdir -p /etc/postgresql-common \
    && echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.conf \
    && apt-get update \
    && apt-get install -y --no-install-recommends postgresql-15 \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /var/lib/postgresql/data /var/run/postgresql \
    && chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql \
    && chmod 700 /var/lib/postgresql/data

COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint.sh

USER postgres
VOLUME ["/var/lib/postgresql/data"]
EXPOSE 5432
STOPSIGNAL SIGINT
HEALTHCHECK --interval=5s --timeout=3s --retries=30 CMD pg_isready -h 127.0.0.1 -U "${POSTGRES_USER:-postgres}"
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint.sh"]
CMD ["postgres"]
