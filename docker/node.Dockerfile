# shardhouse-node: Raft WAL (RocksDB) + embedded chDB engine.
# Build from the repository root: docker build -f docker/node.Dockerfile .
FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends protobuf-compiler libclang-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release -p shardhouse-node --bin shardhouse-node \
    && install -D target/release/shardhouse-node /out/shardhouse-node

# The engine (chdb-core wheel) resolves ~120 CPython symbols from libpython,
# which the node dlopens without starting an interpreter: the runtime image
# is a Python image built with --enable-shared, so libpython3.11.so is there.
FROM python:3.11-slim-bookworm
ARG CHDB_VERSION=26.9.0
RUN python3 -m pip install --no-cache-dir --no-deps --target /opt/chdb "chdb-core==${CHDB_VERSION}" \
    && useradd --system --uid 65532 shardhouse \
    && mkdir -p /var/lib/shardhouse && chown 65532 /var/lib/shardhouse
COPY --from=build /out/shardhouse-node /usr/local/bin/shardhouse-node
ENV SHARDHOUSE_CHDB_DIR=/opt/chdb
USER 65532
VOLUME /var/lib/shardhouse
# gRPC (writes, Raft, Admin) and HTTP (/metrics, /health, /ready)
EXPOSE 8090 8091
ENTRYPOINT ["/usr/local/bin/shardhouse-node"]
