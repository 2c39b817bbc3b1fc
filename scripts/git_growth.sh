#!/usr/bin/env bash
# How a Git repository grows: 10 generations of a 64 MiB f32 model, each
# changing 1% of its rows (random rows, fixed seed), committed as WTXT into
# one repository and as .safetensors into another. After `git gc
# --aggressive`, prints both packed sizes, the size of 10 full copies (what
# Git LFS keeps) and the ratios. Usage: scripts/git_growth.sh [MIB] [GENS]
set -euo pipefail
cd "$(dirname "$0")/.."
mib=${1:-64}
gens=${2:-10}
work=${BENCH_DIR:-bench-work}/growth
rm -rf "$work"
mkdir -p "$work/models"
cargo build --release --quiet
bin=$PWD/target/release/wtxt
rows=$((mib * 256))          # rows of 1024 f32 = 4 KiB
changed_rows=$((rows / 100)) # 1% per generation

python3 - "$work/models" "$mib" "$gens" "$changed_rows" <<'PY'
import json, os, random, struct, sys
out, mib, gens, changed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rows, row = mib * 256, 4096
data = bytearray(os.urandom(mib << 20))
rng = random.Random(7)
header = json.dumps({"w": {"dtype": "F32", "shape": [rows, 1024], "data_offsets": [0, len(data)]}}, separators=(",", ":")).encode()
header += b" " * (-len(header) % 8)
for g in range(gens):
    if g:
        for r in rng.sample(range(rows), changed):
            data[r * row:(r + 1) * row] = os.urandom(row)
    with open(f"{out}/gen{g}.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + data)
PY

commit() { git -C "$1" add -A && git -C "$1" -c user.name=bench -c user.email=bench@example.com commit -qm "$2"; }
for kind in wtxt safetensors; do
  git init -q -b main "$work/$kind"
done
prev=""
for g in $(seq 0 $((gens - 1))); do
  src="$work/models/gen$g.safetensors"
  cp "$src" "$work/safetensors/model.safetensors"
  commit "$work/safetensors" "gen $g"
  if [ -z "$prev" ]; then
    "$bin" snapshot "$src" -o "$work/wtxt/model.wtxt" --gen 0 --ts 2026-01-01T00:00:00Z 2>/dev/null
  else
    "$bin" snapshot "$src" -o "$work/wtxt/model.wtxt" --prev "$prev" --ts "2026-01-01T00:$(printf %02d "$g"):00Z" 2>/dev/null
  fi
  cp "$work/wtxt/model.wtxt" "$work/prev.wtxt"
  prev="$work/prev.wtxt"
  commit "$work/wtxt" "gen $g"
done
"$bin" log -C "$work/wtxt" model.wtxt > /dev/null && echo "wtxt log: the chain of $gens generations holds"

for kind in wtxt safetensors; do
  /usr/bin/time -f "%e" -o "$work/gc.$kind" git -C "$work/$kind" gc -q --aggressive
done
size() { git -C "$1" count-objects -v | awk '/size-pack/ { print $2 * 1024 }'; }
raw=$((mib << 20))
changed_bytes=$(( (gens - 1) * changed_rows * 4096 ))
w=$(size "$work/wtxt"); s=$(size "$work/safetensors")
full=$(( gens * $(stat -c %s "$work/models/gen0.safetensors") ))
echo "model: $mib MiB f32, $gens generations, $changed_rows rows (1%) changed per generation"
echo "raw model + changed bytes:  $((raw + changed_bytes)) bytes"
echo "WTXT repository packed:     $w bytes (gc --aggressive $(cat "$work/gc.wtxt") s)"
echo "safetensors repo packed:    $s bytes (gc --aggressive $(cat "$work/gc.safetensors") s)"
echo "10 full copies (Git LFS):   $full bytes"
awk -v w="$w" -v s="$s" -v f="$full" -v b="$((raw + changed_bytes))" 'BEGIN {
  printf "WTXT / (raw + changed)      = %.3fx (goal <= 1.5x)\n", w / b;
  printf "safetensors / (raw + changed) = %.3fx\n", s / b;
  printf "WTXT / full copies           = %.3fx\n", w / f }'
