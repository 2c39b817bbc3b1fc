#!/usr/bin/env bash
# How `wtxt` scales with threads: snapshot (one file and split) and verify of
# a training state of many tensors (128 f32 tensors, SIZE_MIB in all, as a
# .safetensors) and of one array of the same size (.npy), at each
# `--threads N` of THREADS (default: 1, 2, 4, ... up to the machine's
# cores), in each digest form of DIGESTS (default: sha256, the WTXT 1.1
# form, and tree), against `openssl dgst -sha256` of the same bytes (one SHA-256
# stream, the floor of a serial digest), `cp`, and a synced copy of the
# snapshot's text (what writing it to this disk costs at least), in one run. Prints the
# median wall and CPU (user + sys) of RUNS runs, each command's wall at N
# threads against its wall at 1 thread, and against openssl.
#
#   scripts/bench_threads.sh [SIZE_MIB]            (default 1024)
#   THREADS="1 2" RUNS=3 BIN=path/to/wtxt BENCH_DIR=dir scripts/bench_threads.sh 1024
#
# docs/PERFORMANCE.md ("Threads") keeps the table. BIN defaults to a
# release build made here; with BIN set nothing is built (the device
# machine has no Rust).
set -euo pipefail
cd "$(dirname "$0")/.."
mib=${1:-1024}
work=${BENCH_DIR:-bench-work}
runs=${RUNS:-3}
mkdir -p "$work"
TIMEFORMAT="%R %U %S"   # bash's own time: wall, user, sys of the command and its children
if [ -z "${BIN:-}" ]; then cargo build --release --quiet; BIN=target/release/wtxt; fi
cores=$(nproc)
if [ -z "${THREADS:-}" ]; then
  THREADS=1; n=2; while [ "$n" -le "$cores" ]; do THREADS="$THREADS $n"; n=$((n * 2)); done
  [ "$((n / 2))" = "$cores" ] || THREADS="$THREADS $cores"
fi

state="$work/state_${mib}m.safetensors"
one="$work/one_${mib}m.npy"
python3 - "$mib" "$state" "$one" <<'PY'
import json, os, struct, sys
mib, state, one = int(sys.argv[1]), sys.argv[2], sys.argv[3]
total = mib << 20
rows = total // (128 * 512 * 4)               # 128 tensors of [rows, 512] f32
if not os.path.exists(state):
    header, at = {}, 0
    for i in range(128):
        n = rows * 512 * 4
        header[f"model.layers.{i}.weight"] = {"dtype": "F32", "shape": [rows, 512], "data_offsets": [at, at + n]}
        at += n
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(state, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        left = at
        while left:
            n = min(left, 64 << 20)
            f.write(os.urandom(n))
            left -= n
if not os.path.exists(one):
    d = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, 1024), }" % (total // 4096)
    h = (d + " " * ((64 - (10 + len(d) + 1) % 64) % 64) + "\n").encode()
    with open(one, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + len(h).to_bytes(2, "little") + h)
        left = total
        while left:
            n = min(left, 64 << 20)
            f.write(os.urandom(n))
            left -= n
PY
cat "$state" "$one" > /dev/null   # warm the page cache

# label, command...: the median wall and CPU of $runs runs (outputs removed first).
measure() {
  local label=$1; shift
  : > "$work/t.$label"
  for _ in $(seq "$runs"); do
    rm -rf "$work/out.wtxt" "$work/out.wtxt.parts"
    sync
    { time "$@" > /dev/null 2> "$work/err" || { cat "$work/err"; exit 1; }; } 2> "$work/time"
    awk '{ print $1, $2 + $3 }' "$work/time" >> "$work/t.$label"
  done
  local wall cpu
  wall=$(sort -n "$work/t.$label" | awk -v n="$runs" 'NR == int((n + 1) / 2) { print $1 }')
  cpu=$(sort -n -k2 "$work/t.$label" | awk -v n="$runs" 'NR == int((n + 1) / 2) { print $2 }')
  eval "w_$label=$wall; c_$label=$cpu"
}

echo "$cores cores; ${mib} MiB: 128 f32 tensors (safetensors) and one f32 array (.npy); median of $runs runs"
measure openssl openssl dgst -sha256 "$state"
measure cp cp "$state" "$work/copy"
rm -f "$work/copy"
printf '%-34s %8s %8s\n' "baseline" "wall s" "cpu s"
printf '%-34s %8.2f %8.2f\n' "openssl dgst -sha256" "$w_openssl" "$c_openssl"
printf '%-34s %8.2f %8.2f\n' "cp" "$w_cp" "$c_cp"
digests=${DIGESTS:-sha256 tree}
for d in $digests; do
  "$BIN" snapshot "$state" -o "$work/state_$d.wtxt" --part-size none --digest "$d" --ts 2026-01-01T00:00:00Z 2>/dev/null
  "$BIN" snapshot "$one" -o "$work/one_$d.wtxt" --part-size none --digest "$d" --ts 2026-01-01T00:00:00Z 2>/dev/null
done
# What putting the snapshot's text on this disk costs at least: a copy of it, synced.
first=${digests%% *}
measure cpsync sh -c "cp '$work/state_$first.wtxt' '$work/copy' && sync '$work/copy'"
rm -f "$work/copy"
printf '%-34s %8.2f %8.2f\n' "cp + sync of the snapshot's text" "$w_cpsync" "$c_cpsync"
printf '\n%-34s %7s %8s %8s %10s %10s\n' "command" "threads" "wall s" "cpu s" "vs 1 thr" "vs openssl"
for d in $digests; do
for input in state one; do
  src=$state; [ "$input" = one ] && src=$one
  for cmd in snapshot split verify; do
    base=""
    for n in $THREADS; do
      case $cmd in
        snapshot) measure r "$BIN" --threads "$n" snapshot "$src" -o "$work/out.wtxt" --part-size none --digest "$d" --ts 2026-01-01T00:00:00Z ;;
        split) measure r "$BIN" --threads "$n" snapshot "$src" -o "$work/out.wtxt" --digest "$d" --ts 2026-01-01T00:00:00Z ;;
        verify) measure r "$BIN" --threads "$n" verify "$work/${input}_$d.wtxt" ;;
      esac
      [ -n "$base" ] || base=$w_r
      awk -v l="$cmd $input ($d)" -v n="$n" -v w="$w_r" -v c="$c_r" -v b="$base" -v o="$w_openssl" \
        'BEGIN { printf "%-34s %7d %8.2f %8.2f %9.2fx %9.2fx\n", l, n, w, c, w / b, w / o }'
    done
  done
done
done
