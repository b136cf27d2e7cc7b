# shardhouse-router: stateless ingest front door.
# Build from the repository root: docker build -f docker/router.Dockerfile .
FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends protobuf-compiler libclang-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release -p shardhouse-router --bin shardhouse-router \
    && install -D target/release/shardhouse-router /out/shardhouse-router \
    && objcopy --strip-debug /out/shardhouse-router

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* && useradd --system --uid 65532 shardhouse
COPY --from=build /out/shardhouse-router /usr/local/bin/shardhouse-router
USER 65532
# HTTP ingest + /metrics, gRPC ingest (docs/contracts.md)
EXPOSE 8086 8087
ENTRYPOINT ["/usr/local/bin/shardhouse-router"]
