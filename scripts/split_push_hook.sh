#!/usr/bin/env bash
# A MIB MiB f32 model's split snapshot and its next generation (a few
# hundred random rows changed, so every part changes) in Git: the
# pre-commit hook on the staged generation against `wtxt verify` of it;
# then how git's pack settings change pushes (Git's defaults and the
# settings in docs/DAEMON.md) to a local bare repository, and the size of
# the second generation's thin pack for pack.window 2, 10 and 0. Not a
# test: minutes per run at 1 GiB.
# Usage: BENCH_DIR=/tmp/bench-work scripts/split_push_hook.sh [MIB] (default 1024);
# HOOK_ONLY=1 stops after the hook against verify.
set -euo pipefail
cd "$(dirname "$0")/.."
mib=${1:-1024}
work=${BENCH_DIR:-bench-work}/split-push-hook
mkdir -p "$work"
cargo build --release --quiet
bin=$PWD/target/release/wtxt
cd "$work"
rm -rf work-* remote-*
python3 - "$mib" <<'PY'
import random, sys
import numpy as np
mib = int(sys.argv[1])
rows = mib * 256
rng = np.random.default_rng(1)
w = rng.standard_normal((rows, 1024), dtype=np.float32)
np.save("gen0.npy", w)
pick = random.Random(1)
w[pick.sample(range(rows), rows // 800)] += np.float32(0.01)
np.save("gen1.npy", w)
PY
mkdir -p g0 g1 && mv gen0.npy g0/model.npy && mv gen1.npy g1/model.npy
"$bin" snapshot g0/model.npy -o g0.wtxt --ts 2026-01-01T00:00:00Z >/dev/null 2>&1
"$bin" snapshot g1/model.npy -o g1.wtxt --prev g0.wtxt --ts 2026-01-01T01:00:00Z >/dev/null 2>&1
secs() { local s; s=$(date +%s.%N); "$@"; echo "$(date +%s.%N) - $s" | bc; }
for v in default window2 window0; do
  case $v in
    default) cfg=() ;;
    window2) cfg=(-c pack.window=2) ;;
    window0) cfg=(-c pack.window=0) ;;
  esac
  git init -q --bare "remote-$v"
  git init -q "work-$v"
  (
    cd "work-$v"
    git config user.email bench@example.com
    git config user.name bench
    cp ../g0.wtxt model.wtxt && cp -r ../g0.wtxt.parts model.wtxt.parts
    git add -A && git commit -qm g0
    git remote add origin "../remote-$v"
    if [ "$v" = default ]; then
      # The hook verifies the staged generation whole, as `wtxt verify` does;
      # its packing is left out (the first run would pack, the others not).
      rm -rf model.wtxt.parts && cp ../g1.wtxt model.wtxt && cp -r ../g1.wtxt.parts model.wtxt.parts
      git add -A
      git config wtxt.packParts false
      for _ in 1 2 3; do
        /usr/bin/time -f "pre-commit hook %e s wall, %U+%S s CPU, %M KiB" "$bin" hook pre-commit
        /usr/bin/time -f "wtxt verify     %e s wall, %U+%S s CPU, %M KiB" "$bin" verify model.wtxt > /dev/null
      done
      [ -n "${HOOK_ONLY:-}" ] && exit 0
      git reset -q --hard HEAD
    fi
    first=$(secs git "${cfg[@]}" push -q origin HEAD:main)
    rm -rf model.wtxt.parts && cp ../g1.wtxt model.wtxt && cp -r ../g1.wtxt.parts model.wtxt.parts
    git add -A
    git commit -qm g1
    second=$(secs git "${cfg[@]}" push -q origin HEAD:main)
    printf '%-8s first push %7.1f s   second push (%s files changed) %7.1f s\n' "$v" "$first" \
      "$(git diff --name-only HEAD~1 HEAD | wc -l)" "$second"
  ) || exit 1
  [ -n "${HOOK_ONLY:-}" ] && break
done
[ -n "${HOOK_ONLY:-}" ] && { rm -rf work-* remote-*; exit 0; }
for w in 2 10 0; do
  n=$(printf 'main\n^main~1\n' | git -C remote-default pack-objects --revs --thin --stdout --window=$w -q | wc -c)
  echo "pack.window=$w: the second generation's thin pack is $n bytes"
done
rm -rf work-* remote-*
