# shardhouse-node: Raft WAL (RocksDB) + embedded chDB engine.
# Build from the repository root: docker build -f docker/node.Dockerfile .
FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends protobuf-compiler libclang-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release -p shardhouse-node --bin shardhouse-node \
    && install -D target/release/shardhouse-node /out/shardhouse-node \
    && objcopy --strip-debug /out/shardhouse-node

# The engine wheel, installed with pip in a Python image and copied over.
FROM python:3.11-slim-bookworm AS chdb
ARG CHDB_VERSION=26.9.0
RUN python3 -m pip install --no-cache-dir --no-deps --target /opt/chdb "chdb-core==${CHDB_VERSION}"

# The engine resolves ~120 CPython symbols from libpython, which the node
# dlopens without starting an interpreter: Debian's libpython3.11 is all the
# runtime needs (no Python in the image); SHARDHOUSE_LIBPYTHON names it.
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates libpython3.11 \
    && rm -rf /var/lib/apt/lists/* && useradd --system --uid 65532 shardhouse \
    && mkdir -p /var/lib/shardhouse && chown 65532 /var/lib/shardhouse
COPY --from=chdb /opt/chdb /opt/chdb
COPY --from=build /out/shardhouse-node /usr/local/bin/shardhouse-node
ENV SHARDHOUSE_CHDB_DIR=/opt/chdb
ENV SHARDHOUSE_LIBPYTHON=/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0
USER 65532
VOLUME /var/lib/shardhouse
# gRPC (writes, Raft, Admin) and HTTP (/metrics, /health, /ready)
EXPOSE 8090 8091
ENTRYPOINT ["/usr/local/bin/shardhouse-node"]
