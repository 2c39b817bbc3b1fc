#!/usr/bin/env bash
# A run's history shared through a Git remote set up by `wtxt git install
# --server`: three generations of a SIZE_MIB f32 state (the second and
# third each move 9 of 48 tensors), committed with the hook, pushed over
# file:// to the bare repository (guarded), cloned. Three ways, in one run:
# - wtxt, plain remote: pushed, cloned (--no-checkout), the remote's `git
#   gc`, a clone after it;
# - wtxt with parts in Git LFS (`wtxt git install --lfs`) against a real
#   LFS server (giftless, scripts/lfs-server.sh) on 127.0.0.1, the guard
#   reading parts from its store (wtxt.lfsObjects): pushed, cloned with the
#   latest generation's parts smudged, `log --verify` in a blobless clone;
# - the baseline: the same states as .npz files through plain git-lfs.
# Prints wall and CPU seconds of each and the remotes' sizes (Git, and the
# LFS store); docs/PERFORMANCE.md keeps them.
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

# The LFS server, and a home whose Git config has Git LFS's filter (as
# `git lfs install` leaves a user's).
scripts/lfs-server.sh install
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$work/store" "$work/home"
scripts/lfs-server.sh serve "$work/store" "$port" >/dev/null 2>&1 &
server=$!
trap 'kill $server 2>/dev/null' EXIT
until python3 -c "import socket; socket.create_connection(('127.0.0.1', $port))" 2>/dev/null; do sleep 0.1; done
export HOME=$(realpath "$work/home")
git lfs install --skip-repo >/dev/null
lfs_url() { echo "http://127.0.0.1:$port/bench/$1.git/info/lfs"; }

git init -q -b main "$work/lw"
(cd "$work/lw" && git config lfs.url "$(lfs_url wtxt)" && WTXT="$BIN" "$BIN" git install --lfs >/dev/null 2>&1
  "$BIN" snapshot ../s0.npz -o m.wtxt --gen 0 >/dev/null 2>&1 && git add -A && WTXT="$BIN" git commit -qm g0
  for g in 1 2; do
    "$BIN" snapshot "../s$g.npz" -o m.wtxt --prev m.wtxt >/dev/null 2>&1 && git add -A && WTXT="$BIN" git commit -qm "g$g"
  done)
git init -q --bare -b main "$work/lremote.git"
(cd "$work/lremote.git" && "$BIN" git install --server >/dev/null 2>&1 &&
  git config wtxt.lfsObjects "$(realpath "$work/store")/bench/wtxt")
url=file://$(realpath "$work/lremote.git")
t "LFS: push (3 generations, guarded)" git -C "$work/lw" push -q "$work/lremote.git" main
t "LFS: clone (latest parts smudged)" git -c "lfs.url=$(lfs_url wtxt)" clone -q "$url" "$work/lc"
git -c "lfs.url=$(lfs_url wtxt)" clone -q --filter=blob:none --no-checkout "$url" "$work/lb"
git -C "$work/lb" config lfs.url "$(lfs_url wtxt)"
t "LFS: log --verify, blobless clone" env -C "$work/lb" "$BIN" log --verify m.wtxt
echo "LFS remote: Git $(du -sm "$work/lremote.git" | cut -f1) MB, LFS store $(du -sm "$work/store/bench/wtxt" | cut -f1) MB"

git init -q -b main "$work/gw"
(cd "$work/gw" && git config lfs.url "$(lfs_url npz)" && git lfs track "*.npz" >/dev/null && git add .gitattributes
  for g in 0 1 2; do cp "../s$g.npz" m.npz && git add -A && git commit -qm "g$g"; done)
git init -q --bare -b main "$work/gremote.git"
t "git-lfs: push (3 generations)" git -C "$work/gw" push -q "$work/gremote.git" main
t "git-lfs: clone" git -c "lfs.url=$(lfs_url npz)" clone -q "file://$(realpath "$work/gremote.git")" "$work/gc"
echo "git-lfs remote: Git $(du -sm "$work/gremote.git" | cut -f1) MB, LFS store $(du -sm "$work/store/bench/npz" | cut -f1) MB"
