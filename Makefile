# Shardhouse: `make run` runs a local cluster, `make test` runs every test.
# Both install what they need on a fresh machine (scripts/install-deps.sh).
SHELL := /bin/bash
.DEFAULT_GOAL := help

# Build cache outside the clone so CI and repeated runs reuse compiled crates.
export SHARDHOUSE_CACHE ?= $(HOME)/.cache/shardhouse
export CARGO_TARGET_DIR ?= $(SHARDHOUSE_CACHE)/target
# The embedded engine (chdb-core wheel) is installed project-locally here.
export SHARDHOUSE_CHDB_DIR ?= $(CURDIR)/.deps/chdb
export SHARDHOUSE_BIN := $(CARGO_TARGET_DIR)/release
export PATH := $(HOME)/go/bin:/usr/local/go/bin:$(PATH)

CARGO ?= cargo

.PHONY: help deps build run test lint fmt bench-engine bench-layouts bench-wal bench-frontdoor bench-e2e bench-small-writes bench-scaleout bench-planner bench-operator-scale bench-protocols bench-query bench-promql bench-backup chaos soak images test-k8s

help:
	@echo "make run    - start a local cluster (etcd, nodes, router) in the foreground"
	@echo "make test   - install dependencies and run every test"
	@echo "make bench-engine | bench-layouts | bench-wal | bench-frontdoor | bench-e2e | bench-small-writes | bench-scaleout | bench-planner | bench-protocols | bench-query | bench-promql | chaos"
	@echo "make soak     - 30 min at 70% of the RF=3 rate, a fault every 2 min, RSS slopes (SOAK_MINUTES)"
	@echo "make images   - operator, router, node and etcd images (buildah, OCI archives)"
	@echo "make test-k8s - a real one-machine Kubernetes in a netns: install, ingest, scale, upgrade"

deps:
	@scripts/install-deps.sh

build: deps
	$(CARGO) build --release --workspace --bins

run: build
	@scripts/run-local.sh

# scripts/test.sh installs what it needs itself: the quick part first, the
# slow Go tools of scripts/deps.d in the background while cargo compiles.
test:
	@scripts/test.sh

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --release --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

bench-engine: deps
	$(CARGO) bench -p shardhouse-engine --bench bench-engine

# Issue 13's tag layouts (tags as columns vs a tag index) at 1M series:
# ingest, merges and tag queries (docs/benchmarks.md); ~5 minutes.
bench-layouts: deps
	$(CARGO) bench -p shardhouse-engine --bench bench-layouts

bench-wal: build
	@scripts/bench-wal.sh

bench-frontdoor: deps
	$(CARGO) bench -p shardhouse-router --bench bench-frontdoor

bench-e2e: build
	@scripts/bench-e2e.sh

# Issue 18: 1-10 point requests at a constant arrival rate, RF=3 and QuestDB.
bench-small-writes: build
	@scripts/bench-small-writes.sh

# Issue 18: the e2e ramp against 1, 2 and 4 nodes under equal CPU quotas.
bench-scaleout: build
	@scripts/bench-scaleout.sh

# Issue 18: the shard planner over 100 nodes and 4,096 shards.
bench-planner: deps
	$(CARGO) bench -p shardhouse-operator --bench bench-planner

# The operator reconciling a 100-node ShardhouseCluster on a real API server
# with kwok fake Nodes (docs/benchmarks.md); ~5 minutes.
bench-operator-scale: deps
	@scripts/bench-operator-scale.sh

bench-protocols: build
	@scripts/bench-protocols.sh

# Issue 14's read path: the same dashboard dataset in a local cluster and in
# QuestDB 9.2.2, Grafana's InfluxQL queries on /query against QuestDB's SQL
# (answers compared), p50/p95/max, a perf profile of the slower ones
# (docs/benchmarks.md); ~15 minutes. OUT=<file> keeps the JSON figures.
bench-query: build
	@scripts/bench-query.sh

# Issue 29: PromQL against Prometheus 2.42 and VictoriaMetrics v1.151.0 on
# one remote_write stream (answers compared first), p50/p95 at 1 and 8
# clients, a perf profile where Shardhouse is slower (docs/benchmarks.md).
bench-promql: build
	@scripts/bench-promql.sh

# Issue 30: backup and restore of POINTS (100M) points on one node, MB/s and
# points/s next to the disk's own sequential write and read rate (dd,
# O_DIRECT, same run, same filesystem).
bench-backup: build
	@scripts/bench-backup.sh

chaos: build
	@scripts/chaos.sh

# Issue 16: SOAK_MINUTES (30) at 70% of the sustainable RF=3 rate with a
# fault every 2 minutes (kill -9 node/router, partition, full restart,
# rebalance, slow node); every acknowledgement checked, RSS slope per
# process. Not part of `make test`.
soak: build
	@scripts/soak.sh

# Container images without a Docker engine: OCI archives under
# $(SHARDHOUSE_CACHE)/images (docker/*.Dockerfile describes the same images).
images: build
	@scripts/k8s/deps.sh apt
	@scripts/images.sh

# A real single-machine Kubernetes in its own network namespace; helm install,
# ingest, scale out/in, rolling upgrade, pod delete, delete (docs/operator.md).
# Installs what it needs (scripts/k8s/deps.sh, cached), builds and checks the
# images, runs scripts/k8s/scenarios.sh; ~6 min warm, ~17 min cold.
test-k8s: build
	@scripts/k8s/test.sh
