#!/usr/bin/env bash
# Every test: the Rust suite (cargo test), then the Python package built
# from this tree as a wheel (`pip wheel ./python`, the `wtxt` command in it),
# installed, and its pytest suite, which runs the CLI that cargo built and,
# from a fresh virtual environment, the wheel's own command. Extra arguments
# go to cargo test.
#
# `scripts/test.sh --fast`: the quick tier, for the edit-test loop: the
# library's unit tests and the integration modules that take seconds (the
# golden vectors, the command line's case files, the layer rule, trust,
# corruption, deltas, the tree form, conversions, outputs, age and OMS).
# It leaves out the slow modules (split, hostile inputs, mutation, Git,
# the daemon, Hugging Face folders, the report's browser) and the Python
# suite; run the whole command before a change lands.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--fast" ]; then
  shift
  cargo test --locked --lib "$@"
  cargo test --locked --test it -- golden:: cases:: cli:: layers:: trust:: corruption:: delta:: tree:: \
    roundtrip:: recover:: convert:: outputs:: age:: oms::
  exit 0
fi
cargo test --locked "$@"
rm -rf target/wheels
python3 -m pip wheel -q --no-deps -w target/wheels ./python
wheel=$(ls target/wheels/wtxt-*.whl)
python3 -m pip install -q --force-reinstall --no-deps "$wheel"
WTXT_BIN="$PWD/target/debug/wtxt" WTXT_WHEEL="$PWD/$wheel" python3 -m pytest -q python/tests
