#!/usr/bin/env bash
# Every test: the Rust suite (cargo test), then the Python package built from
# this tree (python3 -m pip install ./python) and its pytest suite, which
# runs the CLI that cargo built. Extra arguments go to cargo test.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --locked "$@"
python3 -m pip install -q ./python
WTXT_BIN="$PWD/target/debug/wtxt" python3 -m pytest -q python/tests
