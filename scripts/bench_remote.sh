#!/usr/bin/env bash
# A run's history shared through a Git remote, against git-lfs, in one run:
# GENS generations of a SIZE_MIB f32 state of 48 tensors, each generation
# after the first moving 3 of them (CHANGE=part: 1/16, a fine-tune of a
# few layers) or all 48 (CHANGE=full: full fine-tuning). Three ways:
# - wtxt, plain remote: committed with the hook, pushed over file:// to a
#   bare repository set up by `wtxt git install --server` (guarded);
# - wtxt with parts in Git LFS (`wtxt git install --lfs`) against a real
#   LFS server (giftless, scripts/lfs-server.sh) on 127.0.0.1, the guard
#   reading parts from its store (wtxt.lfsObjects);
# - the baseline: the same states as .npz files through plain git-lfs.
# For each: stage + commit of every generation, the push (PUSHES times, each
# into a new remote and LFS store), a clone of the latest (full, and
# blobless: --filter=blob:none; CLONES times each; both 3 by default: this
# VM's system time varies from run to run), the oldest generation
# out of the full clone (`wtxt git export`; `git checkout REV -- m.npz`),
# `wtxt log --verify`, and the sizes of the repository and the remote (Git
# and the LFS store). No `git gc` runs before any of them; the plain
# remote's `git gc` is timed after, as the maintenance a host would run.
# Each way's repositories are removed once measured (disk: the states, and
# one way's copies, at a time).
# Prints wall and CPU seconds; docs/PERFORMANCE.md keeps the figures.
#
# DIGEST=tree writes the tree form (docs/FORMAT.md section 19), whose
# generations the guard checks part by part (docs/STORAGE.md, "Checking what changed").
#
#   CHANGE=part|full [DIGEST=sha256|tree] [WAYS="plain lfs git-lfs"] [CLONES=3] [PUSHES=3] \
#     scripts/bench_remote.sh [SIZE_MIB [GENS]]    (defaults 96, 8)
set -euo pipefail
cd "$(dirname "$0")/.."
mib=${1:-96}
gens=${2:-8}
change=${CHANGE:-part}
clones=${CLONES:-3}
pushes=${PUSHES:-3}
digest=${DIGEST:-sha256}
work=${BENCH_DIR:-bench-work}/remote-$change
. scripts/timing.sh
rm -rf "$work" && mkdir -p "$work"
python3 - "$mib" "$work" "$gens" "$change" <<'PY'
import sys, numpy as np
mib, out, gens, change = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
rng = np.random.default_rng(0)
rows = (mib << 20) // (48 * 512 * 4)
s = {f"l{i:02d}": rng.standard_normal((rows, 512), dtype=np.float32) for i in range(48)}
np.savez(f"{out}/s0.npz", **s)
for g in range(1, gens):
    moved = range(48) if change == "full" else [(3 * g + k) % 48 for k in range(3)]
    for i in moved:
        s[f"l{i:02d}"] = s[f"l{i:02d}"] + np.float32(1e-3)
    np.savez(f"{out}/s{g}.npz", **s)
PY
export GIT_AUTHOR_NAME=b GIT_AUTHOR_EMAIL=b@example.com GIT_COMMITTER_NAME=b GIT_COMMITTER_EMAIL=b@example.com
export BIN WTXT=$BIN gens digest
mb() { du -sm "$@" 2>/dev/null | awk '{s += $1} END {print s + 0}'; }
echo "$(nproc) cores; $gens generations of ${mib} MiB of f32 (48 tensors; CHANGE=$change, DIGEST=$digest)"
printf '%-52s %8s %8s\n' "" "wall s" "cpu s"

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

# Every generation snapshotted and committed through the hook, in the repository at $1.
commit_wtxt() {
  cd "$1"
  for g in $(seq 0 $((gens - 1))); do
    if [ "$g" = 0 ]; then "$BIN" snapshot ../s0.npz -o m.wtxt --gen 0 --digest "$digest"
    else "$BIN" snapshot "../s$g.npz" -o m.wtxt --prev m.wtxt --digest "$digest"; fi
    git add -A && git commit -qm "g$g"
  done
}
commit_npz() {
  cd "$1"
  for g in $(seq 0 $((gens - 1))); do cp "../s$g.npz" m.npz && git add -A && git commit -qm "g$g"; done
}
export -f commit_wtxt commit_npz

for way in ${WAYS:-plain lfs git-lfs}; do
  w=$work/$way
  name=$([ $way = git-lfs ] && echo npz || echo wtxt)
  git init -q -b main "$w"
  git -C "$w" config lfs.url "$(lfs_url "$name-1")"
  case $way in
    plain) (cd "$w" && "$BIN" git install >/dev/null 2>&1) ;;
    lfs) (cd "$w" && "$BIN" git install --lfs >/dev/null 2>&1) ;;
    git-lfs) (cd "$w" && git lfs track "*.npz" >/dev/null && git add .gitattributes && git commit -qm attributes) ;;
  esac
  file=$([ $way = git-lfs ] && echo m.npz || echo m.wtxt)
  t "$way: stage + commit, $gens generations" bash -c "$([ $way = git-lfs ] && echo commit_npz || echo commit_wtxt) '$w'"
  # Each push into a new remote (and LFS store), the one before removed.
  for i in $(seq "$pushes"); do
    rm -rf "$w-remote.git" "$work/store/bench/$name-$((i - 1))"
    git init -q --bare -b main "$w-remote.git"
    [ $way = git-lfs ] || (cd "$w-remote.git" && "$BIN" git install --server >/dev/null 2>&1)
    [ $way = lfs ] && git -C "$w-remote.git" config wtxt.lfsObjects "$(realpath "$work/store")/bench/$name-$i"
    git -C "$w" config lfs.url "$(lfs_url "$name-$i")"
    t "$way: push, $gens generations ($i/$pushes)" git -C "$w" push -q "$w-remote.git" main
  done
  url=file://$(realpath "$w-remote.git")
  lfs=(-c "lfs.url=$(lfs_url "$name-$pushes")")
  for i in $(seq "$clones"); do
    rm -rf "$w-clone" "$w-blobless"
    t "$way: clone of the latest ($i/$clones)" git "${lfs[@]}" clone -q "$url" "$w-clone"
    t "$way: blobless clone of the latest ($i/$clones)" git "${lfs[@]}" clone -q --filter=blob:none "$url" "$w-blobless"
  done
  git -C "$w-clone" config lfs.url "$(lfs_url "$name-$pushes")"
  git -C "$w-blobless" config lfs.url "$(lfs_url "$name-$pushes")"
  if [ $way = git-lfs ]; then
    t "$way: the oldest generation, from the clone" git -C "$w-clone" checkout -q "HEAD~$((gens - 1))" -- m.npz
  else
    t "$way: the oldest generation, from the clone" "$BIN" git export -C "$w-clone" "HEAD~$((gens - 1))" m.wtxt -o old.wtxt
    t "$way: wtxt log (blobless clone: heads only)" env -C "$w-blobless" "$BIN" log m.wtxt
    t "$way: wtxt log --verify (the clone)" env -C "$w-clone" "$BIN" log --verify m.wtxt
  fi
  store=$work/store/bench/$name-$pushes
  [ $way = plain ] && store=
  echo "$way: repository .git $(mb "$w/.git") MB; remote Git $(mb "$w-remote.git") MB${store:+, LFS store $(mb "$store") MB}; the state $((mib * gens)) MB over $gens generations"
  if [ $way = plain ]; then
    t "plain: the remote's git gc (maintenance)" git -C "$w-remote.git" gc -q
    echo "plain: remote after gc $(mb "$w-remote.git") MB"
  fi
  rm -rf "$w" "$w-remote.git" "$w-clone" "$w-blobless" ${store:+"$store"}
done
