#!/usr/bin/env bash
# One tensor out of a tree-form snapshot against a whole read, in one run:
# a SIZE_MIB f32 state of 64 tensors (`--digest tree`, split at the default
# part size), then `wtxt verify`, `wtxt extract` of every array, `wtxt
# extract --array` of the first and of the last tensor, and Python's
# `wtxt.load_file` whole and with `names=[one]` (in one process, best of
# 3). Prints wall and CPU seconds of each; docs/PERFORMANCE.md keeps them.
#
#   scripts/bench_partial.sh [SIZE_MIB]      (default 256)
set -euo pipefail
cd "$(dirname "$0")/.."
mib=${1:-256}
work=${BENCH_DIR:-bench-work}/partial
. scripts/timing.sh
rm -rf "$work" && mkdir -p "$work"
random_state "$mib" "$work/s.npz" 64 1024 t
"$BIN" snapshot "$work/s.npz" -o "$work/s.wtxt" --digest tree --gen 0 >/dev/null 2>&1
echo "$(ls "$work/s.wtxt.parts" | wc -l) parts; $(du -sm "$work/s.wtxt.parts" | cut -f1) MB of text"
printf '%-40s %8s %8s\n' "" "wall s" "CPU s"
t "verify (whole)" "$BIN" verify "$work/s.wtxt"
t "extract, every array (npz)" "$BIN" extract "$work/s.wtxt" -o "$work/all.npz"
t "extract --array t00" "$BIN" extract "$work/s.wtxt" --array t00 -o "$work/t00.npy"
t "extract --array t63" "$BIN" extract "$work/s.wtxt" --array t63 -o "$work/t63.npy"
python3 - "$work/s.wtxt" <<'PY'
# In one process (the import is not the read's cost): best of 3, CPU and wall.
import sys, time, wtxt
f = sys.argv[1]
for label, kw in (("python load_file (whole)", {}), ("python load_file(names=[t31])", {"names": ["t31"]})):
    best = None
    for _ in range(3):
        w, c = time.perf_counter(), time.process_time()
        wtxt.load_file(f, **kw)
        got = (time.perf_counter() - w, time.process_time() - c)
        best = got if best is None or got[1] < best[1] else best
    print(f"{label:<40} {best[0]:8.2f} {best[1]:8.2f}")
PY
