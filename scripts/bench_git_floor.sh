#!/usr/bin/env bash
# What bounds a plain Git remote's clone of a split snapshot: one
# generation of a SIZE_MIB f32 state, committed through the hook (parts
# Huffman-coded in wtxt's pack), cloned over file:// as it is and after a
# repack that stores every part uncompressed (`pack.compression=0`). For
# each: the clone without a checkout (transfer and Git's `index-pack`), the
# full clone, and `index-pack` alone on the pack, with Git's SHA-1 and
# system sha1sum over the same bytes beside them. Prints wall and CPU
# seconds; docs/PERFORMANCE.md keeps the figures.
#
#   scripts/bench_git_floor.sh [SIZE_MIB]    (default 1024)
set -euo pipefail
cd "$(dirname "$0")/.."
mib=${1:-1024}
work=${BENCH_DIR:-bench-work}/git-floor
. scripts/timing.sh
rm -rf "$work" && mkdir -p "$work"
random_state "$mib" "$work/s.npz" 48 512 l
export GIT_AUTHOR_NAME=b GIT_AUTHOR_EMAIL=b@example.com GIT_COMMITTER_NAME=b GIT_COMMITTER_EMAIL=b@example.com
git init -q -b main "$work/huffman"
(cd "$work/huffman" && "$BIN" git install >/dev/null 2>&1 && "$BIN" snapshot ../s.npz -o m.wtxt --digest tree >/dev/null &&
  git add -A && git commit -qm g0)
rm "$work/s.npz"
git clone -q --bare --no-local "$work/huffman" "$work/stored.git"
git -C "$work/stored.git" -c pack.compression=0 -c pack.window=0 repack -adqF
echo "$(nproc) cores; one generation of ${mib} MiB of f32, $(du -sm "$work/huffman/m.wtxt.parts" | cut -f1) MB of parts"
printf '%-52s %8s %8s\n' "" "wall s" "cpu s"
for way in huffman stored; do
  src=$work/huffman; objects=$src/.git/objects
  [ $way = stored ] && src=$work/stored.git && objects=$src/objects
  pack=$(find "$objects/pack" -name '*.pack' | head -1)
  echo "$way: pack $(($(stat -c %s "$pack") >> 20)) MiB"
  t "$way: clone, no checkout" git clone -q --bare "file://$(realpath "$src")" "$work/c.git"
  t "$way: clone" git clone -q "file://$(realpath "$src")" "$work/c"
  rm -rf "$work/c.git" "$work/c"
  git init -q --bare "$work/ip.git"
  t "$way: index-pack of the pack" git -C "$work/ip.git" index-pack --stdin < "$pack"
  rm -rf "$work/ip.git"
done
t "Git's SHA-1 (hash-object) of the parts" bash -c "cat '$work'/huffman/m.wtxt.parts/* | git -c core.bigFileThreshold=8g hash-object --stdin"
t "sha1sum of the parts" bash -c "cat '$work'/huffman/m.wtxt.parts/* | sha1sum"
rm -rf "$work"
