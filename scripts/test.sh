#!/usr/bin/env bash
# Every test: the Rust suite (cargo test), then the Python package built
# from this tree as a wheel (`pip wheel ./python`, the `wtxt` command in it),
# installed, and its pytest suite, which runs the CLI that cargo built and,
# from a fresh virtual environment, the wheel's own command. Extra arguments
# go to cargo test.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --locked "$@"
rm -rf target/wheels
python3 -m pip wheel -q --no-deps -w target/wheels ./python
wheel=$(ls target/wheels/wtxt-*.whl)
python3 -m pip install -q --force-reinstall --no-deps "$wheel"
WTXT_BIN="$PWD/target/debug/wtxt" WTXT_WHEEL="$PWD/$wheel" python3 -m pytest -q python/tests
