#!/usr/bin/env bash
# A run's history shared through a plain Git remote set up by `wtxt git
# install --server`: three generations of a SIZE_MIB f32 state (the second
# and third each move 9 of 48 tensors), committed with the hook, pushed over
# file:// to the bare repository, cloned (--no-checkout), the remote's
# `git gc`, and a clone after it. Prints wall and CPU seconds of each and
# the remote's size; docs/PERFORMANCE.md keeps them.
#
#   scripts/bench_remote.sh [SIZE_MIB]      (default 96)
set -euo pipefail
cd "$(dirname "$0")/.."
mib=${1:-96}
work=${BENCH_DIR:-bench-work}/remote
. scripts/timing.sh
rm -rf "$work" && mkdir -p "$work"
python3 - "$mib" "$work" <<'PY'
import sys, numpy as np
mib, out = int(sys.argv[1]), sys.argv[2]
rng = np.random.default_rng(0)
rows = (mib << 20) // (48 * 512 * 4)
s = {f"l{i:02d}": rng.standard_normal((rows, 512), dtype=np.float32) for i in range(48)}
np.savez(f"{out}/s0.npz", **s)
for g in (1, 2):
    for i in range(g * 3, g * 3 + 9):
        s[f"l{i:02d}"] = s[f"l{i:02d}"] + np.float32(1e-3)
    np.savez(f"{out}/s{g}.npz", **s)
PY
export GIT_AUTHOR_NAME=b GIT_AUTHOR_EMAIL=b@example.com GIT_COMMITTER_NAME=b GIT_COMMITTER_EMAIL=b@example.com
git init -q -b main "$work/w"
(cd "$work/w" && WTXT="$BIN" "$BIN" git install >/dev/null 2>&1
  "$BIN" snapshot ../s0.npz -o m.wtxt --gen 0 >/dev/null 2>&1 && git add -A && WTXT="$BIN" git commit -qm g0
  for g in 1 2; do
    "$BIN" snapshot "../s$g.npz" -o m.wtxt --prev m.wtxt >/dev/null 2>&1 && git add -A && WTXT="$BIN" git commit -qm "g$g"
  done)
git init -q --bare -b main "$work/remote.git"
(cd "$work/remote.git" && "$BIN" git install --server >/dev/null 2>&1)
echo "$(nproc) cores; three generations of ${mib} MiB of f32"
printf '%-40s %8s %8s\n' "" "wall s" "cpu s"
t "push (3 generations, guarded)" git -C "$work/w" push -q "$work/remote.git" main
t "clone" git clone -q --no-checkout "file://$(realpath "$work/remote.git")" "$work/c1"
t "the remote's git gc" git -C "$work/remote.git" gc -q
t "clone after gc" git clone -q --no-checkout "file://$(realpath "$work/remote.git")" "$work/c2"
echo "remote after gc: $(du -sm "$work/remote.git" | cut -f1) MB"
