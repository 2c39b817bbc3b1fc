#!/usr/bin/env bash
# The filter workflow (`wtxt git install --filter safetensors`) at the
# largest model it takes: a filter stores one blob per file, so a file's
# WTXT must fit one part (45 MiB by default). MIB MiB of f32 safetensors
# (4 matrices of 1024 columns), GENS generations each changing 1% of the
# rows of 3 matrices (random rows), each committed with a plain `git add`.
# Prints `git add` (the clean filter), .git after `git gc` against raw +
# changed bytes, the largest blob, `git diff HEAD~1 HEAD`, `git log -p -1`,
# `git status` after `touch`, a checkout of the previous generation (the
# smudge filter), `wtxt log`, and what `git add` does with a model 32 times
# larger (refused: how fast, how much memory).
# Usage: BENCH_DIR=/tmp/bench-work scripts/git_filter_at_scale.sh [MIB] [GENS]
set -euo pipefail
cd "$(dirname "$0")/.."
mib=${1:-32}
gens=${2:-5}
work=${BENCH_DIR:-bench-work}/git-filter
rm -rf "$work"
mkdir -p "$work/models"
work=$(cd "$work" && pwd) # absolute: commands below run inside the repositories
cargo build --release --quiet
bin=$PWD/target/release/wtxt

python3 scripts/make_generations.py "$work/models" "$mib" "$gens" 4 1024
# 32x larger: the model the filter must refuse.
python3 -c 'import sys, numpy as np; np.savez(sys.argv[1], w=np.random.default_rng(7).standard_normal(int(sys.argv[2]) << 18, dtype=np.float32))' \
  "$work/models/big.npz" $((mib * 32))
for g in $(seq 0 $((gens - 1))); do
  "$bin" convert "$work/models/gen$g.npz" -o "$work/models/gen$g.safetensors" --to safetensors 2> /dev/null
done
"$bin" convert "$work/models/big.npz" -o "$work/models/big.safetensors" --to safetensors 2> /dev/null
raw=$((mib << 20))
changed=$(cat "$work/models/changed_bytes")

. scripts/measure.sh

repo="$work/repo"
git init -q -b main "$repo"
cd "$repo"
git config user.name bench
git config user.email b@example.com
"$bin" git install --filter safetensors > /dev/null
git add .gitattributes
git commit -q -m attributes
echo "== filter workflow: $mib MiB raw safetensors, $gens generations, 1% of the rows of 3 matrices changed per generation"
for g in $(seq 0 $((gens - 1))); do
  cp "../models/gen$g.safetensors" model.safetensors
  measure "gen $g: git add (clean filter)" git add model.safetensors
  measure "gen $g: git commit (the hook checks the staged blob)" git commit -q -m "gen $g"
done
git gc -q
pack=$(git count-objects -v | awk '/size-pack/ { printf "%d\n", $2 * 1024 }')
largest=$(git cat-file --batch-all-objects --batch-check='%(objecttype) %(objectsize)' | awk '$1 == "blob" && $2 > m { m = $2 } END { printf "%d\n", m }')
echo "  .git pack after gc: $((pack >> 20)) MiB = $(python3 -c "print(f'{$pack / ($raw + $changed):.2f}')")x (raw + changed bytes: $(((raw + changed) >> 20)) MiB)"
echo "  largest blob: $((largest >> 20)) MiB ($largest bytes)"
measure "git diff HEAD~1 HEAD" git diff HEAD~1 HEAD
measure "git diff (no driver: Git's own cost)" git -c diff.wtxt.command=true diff HEAD~1 HEAD
measure "git log -p -1" git log -p -1
touch model.safetensors
measure "git status after touch" git status --short
measure "git status again" git status --short
measure "checkout HEAD~1 (smudge filter)" git checkout -q HEAD~1 -- model.safetensors
cmp -s model.safetensors "../models/gen$((gens - 2)).safetensors" && echo "  checked out: byte-identical to gen $((gens - 2))"
git checkout -q HEAD -- model.safetensors
measure "wtxt log ($gens generations)" "$bin" log model.safetensors
cp ../models/big.safetensors model.safetensors
/usr/bin/time -f "%e %M" -o "$work/time.out" git add model.safetensors > /dev/null 2> "$work/cmd.err" && {
  echo "a model over the part size was stored"; exit 1; }
# time(1) puts "Command exited with non-zero status 1" first.
read -r secs kib < <(tail -n 1 "$work/time.out")
printf '%-44s %6.2f s  %6d MiB\n' "git add of a $((mib * 32)) MiB model: refused" "$secs" $((kib / 1024))
grep -m1 -i 'part' "$work/cmd.err" | cut -c1-200
git checkout -q HEAD -- model.safetensors
