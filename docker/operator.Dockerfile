# shardhouse-operator, shardhouse-ctl and crdgen.
# Build from the repository root: docker build -f docker/operator.Dockerfile .
FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends protobuf-compiler libclang-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release -p shardhouse-operator --bin shardhouse-operator --bin shardhouse-ctl \
    && install -D target/release/shardhouse-operator /out/shardhouse-operator \
    && objcopy --strip-debug /out/shardhouse-operator \
    && install -D target/release/shardhouse-ctl /out/shardhouse-ctl \
    && objcopy --strip-debug /out/shardhouse-ctl

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* && useradd --system --uid 65532 shardhouse
COPY --from=build /out/shardhouse-operator /usr/local/bin/shardhouse-operator
COPY --from=build /out/shardhouse-ctl /usr/local/bin/shardhouse-ctl
USER 65532
# /metrics, /health, /ready
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/shardhouse-operator"]
