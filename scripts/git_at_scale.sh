#!/usr/bin/env bash
# Git at real size: a model of GIB GiB of f32 (8 matrices), 5 generations
# each changing 1% of the rows of 3 matrices, committed through
# `wtxt snapshot --prev` into one repository as split snapshots (default
# part size) and into another as single files (--part-size none). For each:
# .git after `git gc` against raw + changed bytes, the largest blob,
# `git diff HEAD~1 HEAD` (time, peak RSS of git and its drivers),
# `wtxt log`, the pre-commit hook against `wtxt verify`.
# Usage: BENCH_DIR=/tmp/bench-work scripts/git_at_scale.sh [GIB] [GENS]
# (REUSE=1 measures the repositories a previous run made.)
set -euo pipefail
cd "$(dirname "$0")/.."
gib=${1:-1}
gens=${2:-5}
work=${BENCH_DIR:-bench-work}/git-at-scale
mkdir -p "$work/models"
cargo build --release --quiet
bin=$PWD/target/release/wtxt
export WTXT="$bin"

[ -n "${REUSE:-}" ] && [ -f "$work/models/changed_bytes" ] || python3 - "$work/models" "$gib" "$gens" <<'PY'
import os, random, sys
import numpy as np
out, gib, gens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
mats, cols = 8, 4096
rows = (gib << 30) // (mats * cols * 4)
rng = np.random.default_rng(7)
state = {f"transformer.h.{i}.mlp.c_fc.weight": rng.standard_normal((rows, cols), dtype=np.float32) for i in range(mats)}
pick = random.Random(7)
changed = 0
for g in range(gens):
    if g:
        for name in pick.sample(sorted(state), 3):
            rs = pick.sample(range(rows), rows // 100)
            state[name][rs] += np.float32(0.01)
            changed += len(rs) * cols * 4
    np.savez(f"{out}/gen{g}.npz", **{k.replace(".", "_"): v for k, v in state.items()})
open(f"{out}/changed_bytes", "w").write(str(changed))
PY
raw=$((gib << 30))
changed=$(cat "$work/models/changed_bytes")

measure() { # label, command...: prints "label: seconds s, peak RSS MiB"
  local label=$1; shift
  /usr/bin/time -f "%e %M" -o "$work/time.out" "$@" > /dev/null 2> "$work/cmd.err" || { cat "$work/cmd.err"; return 1; }
  read -r secs kib < "$work/time.out"
  printf '%-44s %6.2f s  %6d MiB\n' "$label" "$secs" $((kib / 1024))
}

build_repo() { # form: commits the generations (no timing but the snapshots')
  local form=$1 repo="$work/$1"
  rm -rf "$repo"
  git init -q -b main "$repo"
  (cd "$repo" && "$bin" git install > /dev/null)
  local size_flag=()
  [ "$form" = single ] && size_flag=(--part-size none)
  for g in $(seq 0 $((gens - 1))); do
    chain=(--gen 0)
    if [ "$g" -gt 0 ]; then
      "$bin" join "$repo/model.wtxt" -o "$work/prev.wtxt" 2> /dev/null
      chain=(--prev "$work/prev.wtxt")
    fi
    measure "$form gen $g: wtxt snapshot" "$bin" snapshot "$work/models/gen$g.npz" -o "$repo/model.wtxt" \
      "${chain[@]}" --ts "2026-01-01T00:0$g:00Z" "${size_flag[@]}"
    git -C "$repo" add -A
    git -C "$repo" -c user.name=bench -c user.email=b@example.com commit -q --no-verify -m "gen $g"
  done
  git -C "$repo" gc -q
}

measure_repo() { # form: the figures, on the repository build_repo made
  local form=$1 repo="$work/$1"
  echo "== $form: $gib GiB raw, $gens generations, 1% of the rows of 3 matrices changed per generation"
  pack=$(git -C "$repo" count-objects -v | awk '/size-pack/ { printf "%d\n", $2 * 1024 }')
  largest=$(git -C "$repo" cat-file --batch-all-objects --batch-check='%(objecttype) %(objectsize)' | awk '$1 == "blob" && $2 > m { m = $2 } END { printf "%d\n", m }')
  echo "  .git pack after gc: $((pack >> 20)) MiB = $(python3 -c "print(f'{$pack / ($raw + $changed):.2f}')")x (raw + changed bytes: $(((raw + changed) >> 20)) MiB)"
  echo "  largest blob: $((largest >> 20)) MiB ($largest bytes); files changed by the last commit: $(git -C "$repo" diff --name-only HEAD~1 HEAD | wc -l) of $(git -C "$repo" ls-files | wc -l)"
  # The last generation staged again on top of the one before, for the hook.
  git -C "$repo" reset -q --soft HEAD~1
  (cd "$repo" && measure "pre-commit hook (last generation staged)" "$bin" hook pre-commit)
  git -C "$repo" -c user.name=bench -c user.email=b@example.com commit -q --no-verify -C ORIG_HEAD
  measure "wtxt verify (the whole snapshot)" "$bin" verify "$repo/model.wtxt"
  (cd "$repo" && measure "git diff HEAD~1 HEAD" git diff HEAD~1 HEAD)
  (cd "$repo" && measure "git diff (no driver: Git's own cost)" git -c diff.wtxt.command=true diff HEAD~1 HEAD)
  (cd "$repo" && measure "git log -p -1" git log -p -1)
  (cd "$repo" && measure "wtxt log ($gens generations)" "$bin" log model.wtxt)
  (cd "$repo" && touch model.wtxt && measure "git status after touch" git status --short)
}

for form in split single; do
  [ -n "${REUSE:-}" ] && [ -d "$work/$form" ] || build_repo "$form"
done
for form in split single; do
  measure_repo "$form"
done
