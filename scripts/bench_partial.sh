#!/usr/bin/env bash
# One tensor out of a tree-form snapshot against a whole read, in one run:
# a SIZE_MIB f32 state of 64 tensors (`--digest tree`, split at the default
# part size), then `wtxt verify`, `wtxt extract` of every array, `wtxt
# extract --array` of the first and of the last tensor, and Python's
# `wtxt.load_file` whole and with `names=[one]` (in one process, best of
# 3); then the same tensor by revision from a blobless clone with parts
# in Git LFS (below). Prints wall and CPU seconds of each, and the bytes
# the read by revision fetched; docs/PERFORMANCE.md keeps them.
#
#   scripts/bench_partial.sh [SIZE_MIB]      (default 256)
set -euo pipefail
cd "$(dirname "$0")/.."
mib=${1:-256}
work=${BENCH_DIR:-bench-work}/partial
. scripts/timing.sh
rm -rf "$work" && mkdir -p "$work" && work=$(realpath "$work")
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

# By revision, as a reviewer reads a pushed run: the snapshot committed
# with its parts in Git LFS (a real LFS server, giftless, on 127.0.0.1)
# beside decoys a shared history holds (another snapshot whose parts have
# the same names, a 32 MiB blob named like a part in another folder),
# pushed to a guarded bare repository served by `git daemon`; then, in a
# blobless clone that checked nothing out, `extract --rev HEAD --array
# t31`: the bytes that arrived (Git objects and LFS objects) beside the
# bytes of the parts that hold t31, and its time beside a whole read by
# revision in another such clone.
scripts/lfs-server.sh install
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
lport=$(free_port); gport=$(free_port)
mkdir -p "$work/store" "$work/served" "$work/home"
scripts/lfs-server.sh serve "$work/store" "$lport" >/dev/null 2>&1 & lfs_pid=$!
git daemon --reuseaddr --export-all --listen=127.0.0.1 --port="$gport" --base-path="$work/served" "$work/served" & git_pid=$!
trap 'kill $lfs_pid $git_pid 2>/dev/null' EXIT
until python3 -c "import socket; socket.create_connection(('127.0.0.1', $lport))" 2>/dev/null; do sleep 0.1; done
export HOME=$(realpath "$work/home") GIT_AUTHOR_NAME=b GIT_AUTHOR_EMAIL=b@example.com GIT_COMMITTER_NAME=b GIT_COMMITTER_EMAIL=b@example.com
git lfs install --skip-repo >/dev/null
lfs_url="http://127.0.0.1:$lport/bench/m.git/info/lfs"
w=$work/w
git init -q -b main "$w" && git -C "$w" config lfs.url "$lfs_url"
(cd "$w" && "$BIN" git install --lfs >/dev/null)
cp "$work/s.wtxt" "$w/m.wtxt" && cp -r "$work/s.wtxt.parts" "$w/m.wtxt.parts"
python3 - "$work/decoy.npz" "$mib" <<'PY'
import sys, numpy as np
rng = np.random.default_rng(1)
rows = (int(sys.argv[2]) << 20) // (64 * 1024 * 4) // 4
np.savez(sys.argv[1], **{f"t{i:02d}": rng.standard_normal((rows, 1024), dtype=np.float32) for i in range(64)})
PY
"$BIN" snapshot "$work/decoy.npz" -o "$w/other.wtxt" --digest tree --gen 0 --part-size 8M >/dev/null 2>&1
head -c $((32 << 20)) /dev/urandom > "$work/junk"
(cd "$w" && git add -A && blob=$(git hash-object -w --no-filters ../junk) &&
  git update-index --add --cacheinfo "100644,$blob,junk/000001.wtxtpart" && git commit -q --no-verify -m gen0)
git init -q --bare -b main "$work/served/m.git"
(cd "$work/served/m.git" && "$BIN" git install --server >/dev/null &&
  git config wtxt.lfsObjects "$(realpath "$work/store")/bench/m")
git -C "$w" push -q "$work/served/m.git" main
holding=$(grep -l "name=t31 " "$w"/m.wtxt.parts/*.wtxtpart | xargs du -cb | tail -1 | cut -f1)
bytes() { { du -sb "$1/.git/objects" "$1/.git/lfs" 2>/dev/null || true; } | awk '{s += $1} END {print s + 0}'; }
for c in one whole; do
  GIT_LFS_SKIP_SMUDGE=1 git clone -q --no-checkout --filter=blob:none -c "lfs.url=$lfs_url" \
    "git://127.0.0.1:$gport/m.git" "$work/$c"
done
before=$(bytes "$work/one")
t "by revision: extract --array t31 (blobless LFS)" "$BIN" extract -C "$work/one" m.wtxt --rev HEAD --array t31 -o "$work/t31r.npy"
arrived=$(( $(bytes "$work/one") - before ))
t "by revision: extract, every array (blobless LFS)" "$BIN" extract -C "$work/whole" m.wtxt --rev HEAD -o "$work/allr.npz"
echo "one tensor by revision: $arrived bytes arrived, the parts holding it $holding bytes: $(echo "scale=2; $arrived / $holding" | bc)x"
