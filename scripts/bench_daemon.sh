#!/usr/bin/env bash
# Hot-path latency and snapshot throughput of the daemon's library API.
# Usage: scripts/bench_daemon.sh [MIB] [CALLS]   (default 256 MiB, 1e6 calls)
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p "${BENCH_DIR:-bench-work}"
cargo build --release --quiet --example bench_daemon
target/release/examples/bench_daemon "${BENCH_DIR:-bench-work}/daemon-ring" "${1:-256}" "${2:-1000000}"
