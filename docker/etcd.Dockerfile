# Managed etcd of a ShardhouseCluster (spec.etcd.image): Debian's etcd
# server. The operator starts it without a shell (command and args only), so
# any etcd image works, distroless ones included.
# Build from the repository root: docker build -f docker/etcd.Dockerfile .
# (or without Docker: scripts/images.sh etcd)
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends etcd-server \
    && rm -rf /var/lib/apt/lists/* && mkdir -p /var/lib/etcd
VOLUME /var/lib/etcd
# client, peer
EXPOSE 2379 2380
ENTRYPOINT ["/usr/bin/etcd"]
