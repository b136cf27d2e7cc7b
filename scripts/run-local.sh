#!/usr/bin/env bash
# Placeholder until the local-cluster work lands: runs a single node.
set -euo pipefail
echo "make run: the local cluster is not assembled yet" >&2
exit 1
