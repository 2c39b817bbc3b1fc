#!/usr/bin/env bash
# One tensor out of a tree-form snapshot against a whole read, in one run:
# a SIZE_MIB f32 state of 64 tensors (`--digest tree`, split at the default
# part size), then `wtxt verify`, `wtxt extract` of every array, `wtxt
# extract --array` of the first and of the last tensor, and Python's
# `wtxt.load_file` whole and with `names=[one]`. Prints wall and CPU
# seconds of each; docs/PERFORMANCE.md keeps them.
#
#   scripts/bench_partial.sh [SIZE_MIB]      (default 256)
set -euo pipefail
cd "$(dirname "$0")/.."
mib=${1:-256}
work=${BENCH_DIR:-bench-work}/partial
. scripts/timing.sh
rm -rf "$work" && mkdir -p "$work"
python3 - "$mib" "$work" <<'PY'
import sys, numpy as np
mib, out = int(sys.argv[1]), sys.argv[2]
rng = np.random.default_rng(0)
rows = (mib << 20) // (64 * 1024 * 4)
np.savez(f"{out}/s.npz", **{f"t{i:02d}": rng.standard_normal((rows, 1024), dtype=np.float32) for i in range(64)})
PY
"$BIN" snapshot "$work/s.npz" -o "$work/s.wtxt" --digest tree --gen 0 >/dev/null 2>&1
echo "$(ls "$work/s.wtxt.parts" | wc -l) parts; $(du -sm "$work/s.wtxt.parts" | cut -f1) MB of text"
printf '%-40s %8s %8s\n' "" "wall s" "CPU s"
t "verify (whole)" "$BIN" verify "$work/s.wtxt"
t "extract, every array (npz)" "$BIN" extract "$work/s.wtxt" -o "$work/all.npz"
t "extract --array t00" "$BIN" extract "$work/s.wtxt" --array t00 -o "$work/t00.npy"
t "extract --array t63" "$BIN" extract "$work/s.wtxt" --array t63 -o "$work/t63.npy"
t "python load_file (whole)" python3 -c "import wtxt, sys; wtxt.load_file(sys.argv[1])" "$work/s.wtxt"
t "python load_file(names=[t31])" python3 -c "import wtxt, sys; wtxt.load_file(sys.argv[1], names=['t31'])" "$work/s.wtxt"
t "python import wtxt (floor)" python3 -c "import wtxt"
