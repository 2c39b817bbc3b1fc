#!/usr/bin/env bash
# Git at real size when every value changes (full fine-tuning): GENS
# generations of a GIB GiB f32 model, each wholly new, as safetensors.
# In one run: `git add` + commit of each raw .safetensors into a repository
# with Git's defaults (the baseline), and of each generation's split
# snapshot (`wtxt snapshot --prev`) into a repository set up by `wtxt git
# install`, committed through its pre-commit hook (which verifies each
# snapshot and packs its parts); each commit pushed on its own to a bare
# remote that keeps what it receives as packs; then `git gc` of each.
# Prints CPU-seconds (user + sys), wall, peak RSS, the `git add` total, `gc`
# against it, `.git` against raw x generations, the largest pack and the
# largest push.
# DEFAULTS=1 also builds the snapshots' repository with Git's own settings.
# Needs about 6 x GIB x GENS GB of disk (each repository is removed after
# its figures).
# Usage: BENCH_DIR=/tmp/bench-work scripts/git_full_change.sh [GIB] [GENS]
set -euo pipefail
cd "$(dirname "$0")/.."
gib=${1:-1}
gens=${2:-4}
work=${BENCH_DIR:-bench-work}/git-full-change
mkdir -p "$work"
work=$(cd "$work" && pwd)
cargo build --release --quiet
bin=$PWD/target/release/wtxt
export WTXT="$bin"
raw=$((gib << 30))

for g in $(seq 0 $((gens - 1))); do # one f32 tensor of 1024 columns, random bits
  [ -f "$work/gen$g.safetensors" ] || python3 - "$work/gen$g.safetensors" "$raw" <<'EOF'
import json, os, struct, sys
path, n = sys.argv[1], int(sys.argv[2])
h = json.dumps({"w": {"dtype": "F32", "shape": [n // 4096, 1024], "data_offsets": [0, n]}}).encode()
h += b" " * (-len(h) % 8)
with open(path + ".tmp", "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for _ in range(n >> 24):
        f.write(os.urandom(1 << 24))
os.rename(path + ".tmp", path)
EOF
done

last_cpu=0
cpu() { # label, command...: CPU (user+sys), wall, peak RSS; the CPU in $last_cpu
  local label=$1; shift
  sync
  /usr/bin/time -f "%U %S %e %M" -o "$work/time.out" "$@" > /dev/null 2> "$work/cmd.err" || { cat "$work/cmd.err"; return 1; }
  read -r u s e kib < "$work/time.out"
  last_cpu=$(echo "$u + $s" | bc)
  printf '%-40s cpu %7.2f s  wall %7.2f s  %6d MiB\n' "$label" "$last_cpu" "$e" $((kib / 1024))
}
ident=(-c user.name=bench -c user.email=b@example.com)
largest_pack() { find "$1" -name '*.pack' -printf '%s\n' | sort -n | tail -1; }
figures() { # repo, CPU-s of its `git add`s
  local bytes largest pushed
  bytes=$(du -sb "$1/.git" | cut -f1)
  largest=$(largest_pack "$1/.git/objects/pack")
  pushed=$(largest_pack "$1.remote.git/objects/pack")
  echo "  git add, all generations: cpu $2 s; git gc / that: $(python3 -c "print(f'{$last_cpu / $2:.2f}')")x"
  echo "  .git $((bytes >> 20)) MiB = $(python3 -c "print(f'{$bytes / ($raw * $gens):.2f}')")x raw x $gens generations; largest pack $((${largest:-0} >> 20)) MiB; largest push $((${pushed:-0} >> 20)) MiB"
}
remote() { # repo: a bare remote beside it that keeps every push as its pack
  rm -rf "$1.remote.git" && git init -q --bare "$1.remote.git"
  git -C "$1.remote.git" config receive.unpackLimit 1
  git -C "$1" remote add origin "$1.remote.git"
}

echo "== raw safetensors, Git's defaults: $gib GiB x $gens wholly changed generations"
r="$work/raw"
rm -rf "$r" && git init -q -b main "$r"
remote "$r"
added=0
for g in $(seq 0 $((gens - 1))); do
  cp "$work/gen$g.safetensors" "$r/model.safetensors"
  cpu "git add (gen $g)" git -C "$r" add -A
  added=$(echo "$added + $last_cpu" | bc)
  cpu "git commit (gen $g)" git -C "$r" "${ident[@]}" commit -q -m "gen $g"
  cpu "git push (gen $g)" git -C "$r" push -q origin main
done
cpu "git gc" git -C "$r" gc -q
figures "$r" "$added"
rm -rf "$r" "$r.remote.git" # a repository and its remote: 8 GB at 1 GiB x 4

snapshots() { # repo, install?: commits every generation's split snapshot
  local repo=$1
  rm -rf "$repo" && git init -q -b main "$repo"
  remote "$repo"
  [ "$2" = install ] && (cd "$repo" && "$bin" git install > /dev/null)
  local added=0
  for g in $(seq 0 $((gens - 1))); do
    chain=(--gen 0)
    [ "$g" -gt 0 ] && chain=(--prev "$work/prev.wtxt")
    "$bin" snapshot "$work/gen$g.safetensors" -o "$work/gen.wtxt" "${chain[@]}" --ts "2026-01-01T00:0$g:00Z" 2> /dev/null
    rm -rf "$repo/model.wtxt" "$repo/model.wtxt.parts" "$work/prev.wtxt" "$work/prev.wtxt.parts"
    cp -r "$work/gen.wtxt" "$repo/model.wtxt" && cp -r "$work/gen.wtxt.parts" "$repo/model.wtxt.parts"
    mv "$work/gen.wtxt" "$work/prev.wtxt" && mv "$work/gen.wtxt.parts" "$work/prev.wtxt.parts"
    cpu "git add (gen $g)" git -C "$repo" add -A
    added=$(echo "$added + $last_cpu" | bc)
    cpu "git commit, hook included (gen $g)" git -C "$repo" "${ident[@]}" commit -q -m "gen $g"
    cpu "git push (gen $g)" git -C "$repo" push -q origin main
  done
  cpu "git gc" git -C "$repo" gc -q
  figures "$repo" "$added"
  rm -rf "$repo" "$repo.remote.git"
}

echo "== split snapshots, wtxt git install"
snapshots "$work/installed" install
if [ -n "${DEFAULTS:-}" ]; then
  echo "== split snapshots, Git's defaults"
  snapshots "$work/defaults" none
fi
