#!/usr/bin/env bash
# The server's guard (`wtxt git install --server`) at the size users push:
# one generation of a SIZE_MIB training state (a split snapshot, the
# default part size) pushed over file:// into a bare repository with the
# guard, against the same push into one without it and against `wtxt
# verify` of the same snapshot, in one run; then the next generation (the
# same arrays, chained), where the guard also compares the ref's new tip
# with its old one and looks for WTXT under other names. Prints wall and CPU (user + sys,
# the push's children included) of each; docs/PERFORMANCE.md keeps them.
#
#   scripts/bench_guard.sh [SIZE_MIB]      (default 1024)
set -euo pipefail
cd "$(dirname "$0")/.."
mib=${1:-1024}
work=${BENCH_DIR:-bench-work}/guard
. scripts/timing.sh
rm -rf "$work" && mkdir -p "$work"
random_state "$mib" "$work/state.npz" 64 1024 layer
export GIT_AUTHOR_NAME=b GIT_AUTHOR_EMAIL=b@example.com GIT_COMMITTER_NAME=b GIT_COMMITTER_EMAIL=b@example.com
git init -q --bare -b main "$work/guarded.git"
git init -q --bare -b main "$work/plain.git"
# Servers keep what they receive as packs (as hosting services do; the
# default unpacks a push of few objects into loose ones, deflating it all).
git -C "$work/guarded.git" config receive.unpackLimit 1
git -C "$work/plain.git" config receive.unpackLimit 1
(cd "$work/guarded.git" && "$BIN" git install --server 2>/dev/null)
git init -q -b main "$work/w"
# As users commit: `wtxt git install` (its hook verifies and packs the parts).
(cd "$work/w" && WTXT="$BIN" "$BIN" git install >/dev/null 2>&1 && "$BIN" snapshot ../state.npz -o m.wtxt --gen 0 >/dev/null 2>&1 &&
  git add -A && WTXT="$BIN" git commit -q -m gen0 2>/dev/null)
rm -f "$work/state.npz"
size=$(du -sb "$work/w/m.wtxt" "$work/w/m.wtxt.parts" | awk '{s += $1} END {printf "%.0f", s / 1048576}')
echo "$(nproc) cores; one generation of ${mib} MiB of f32 (${size} MiB of text, split)"
printf '%-40s %8s %8s\n' "" "wall s" "cpu s"
t "wtxt verify m.wtxt" "$BIN" verify "$work/w/m.wtxt"
t "git push, no guard" git -C "$work/w" push -q "$work/plain.git" main
t "git push, guarded (verified whole)" git -C "$work/w" push -q "$work/guarded.git" main
grep -q "1 generation(s) in 1 new commit(s) verified" "$work/err" || { echo "the guard did not verify"; cat "$work/err"; exit 1; }
# The next generation: chained to the first, pushed where the ref has a tip.
(cd "$work/w" && "$BIN" snapshot m.wtxt -o ../next.wtxt --prev m.wtxt >/dev/null 2>&1 &&
  rm -rf m.wtxt m.wtxt.parts && mv ../next.wtxt m.wtxt && mv ../next.wtxt.parts m.wtxt.parts &&
  git add -A && WTXT="$BIN" git commit -q -m gen1 2>/dev/null)
t "git push gen 1, no guard" git -C "$work/w" push -q "$work/plain.git" main
t "git push gen 1, guarded (+ tip to tip)" git -C "$work/w" push -q "$work/guarded.git" main
grep -q "1 generation(s) in 1 new commit(s) verified" "$work/err" || { echo "the guard did not verify"; cat "$work/err"; exit 1; }
# Parts in Git LFS: the guard reads each part from the LFS store
# (`--lfs-objects`, here the pusher's own store, laid out as Git LFS lays
# it) and hashes it against its oid as it verifies; `sha256sum` of the same
# bytes is what that hashing costs alone. Pushed with --no-verify: no LFS
# server takes the objects (the guard reads them where they lie).
if command -v git-lfs >/dev/null 2>&1; then
  git init -q --bare -b main "$work/lfs.git"
  git -C "$work/lfs.git" config receive.unpackLimit 1
  git init -q -b main "$work/l"
  git -C "$work/l" config lfs.url http://127.0.0.1:9/none
  mkdir -p "$work/l/.git/lfs/objects"
  (cd "$work/lfs.git" && "$BIN" git install --server --lfs-objects ../l/.git/lfs/objects 2>/dev/null)
  (cd "$work/l" && WTXT="$BIN" "$BIN" git install --lfs >/dev/null 2>&1 && cp "$work/w/m.wtxt" . &&
    cp -r "$work/w/m.wtxt.parts" . && git add -A && WTXT="$BIN" git commit -q -m gen1 2>/dev/null)
  t "sha256sum of the LFS objects" sh -c "find '$work/l/.git/lfs/objects' -type f -print0 | xargs -0 sha256sum"
  t "git push, guarded, parts in LFS" git -C "$work/l" push -q --no-verify "$work/lfs.git" main
  grep -q "1 generation(s) in 1 new commit(s) verified" "$work/err" || { echo "the guard did not verify"; cat "$work/err"; exit 1; }
fi
