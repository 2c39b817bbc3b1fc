#!/usr/bin/env bash
# Times `wtxt snapshot` and `wtxt verify` on a 1 GiB f32 .npy against
# `openssl dgst -sha256` of the same bytes, in one run, and prints ratios and
# peak RSS. Usage: scripts/bench.sh [SIZE_MIB] (default 1024).
set -euo pipefail
cd "$(dirname "$0")/.."
mib=${1:-1024}
work=${BENCH_DIR:-bench-work}
mkdir -p "$work"
command -v /usr/bin/time >/dev/null || { echo "bench.sh needs GNU time (apt-get install time)"; exit 2; }
cargo build --release --quiet
bin=target/release/wtxt

npy="$work/model_${mib}m.npy"
if [ ! -f "$npy" ]; then
  rows=$((mib * 256))   # rows of 1024 f32 = 4 KiB each
  dict="{'descr': '<f4', 'fortran_order': False, 'shape': (${rows}, 1024), }"
  pad=$(( (64 - (10 + ${#dict} + 1) % 64) % 64 ))
  hlen=$(( ${#dict} + pad + 1 ))
  { printf '\x93NUMPY\x01\x00'; printf "\\x$(printf %02x $((hlen & 255)))\\x$(printf %02x $((hlen >> 8)))";
    printf '%s' "$dict"; printf "%${pad}s" ''; printf '\n';
    head -c $((mib << 20)) /dev/urandom; } > "$npy"
fi
out="$work/model.wtxt"

# Warm the page cache so every command reads from memory.
cat "$npy" > /dev/null

runs=${RUNS:-3}
measure() { # label, command...: median wall time of $runs runs, max peak RSS
  local label=$1; shift
  : > "$work/times.$label"
  for _ in $(seq "$runs"); do
    /usr/bin/time -f "%e %M" -o "$work/time.$label" "$@" > /dev/null 2> "$work/err.$label" || { cat "$work/err.$label"; exit 1; }
    cat "$work/time.$label" >> "$work/times.$label"
  done
  secs=$(sort -n "$work/times.$label" | awk -v n="$runs" 'NR == int((n + 1) / 2) { print $1 }')
  rss=$(sort -n -k2 "$work/times.$label" | tail -n 1 | awk '{ print $2 }')
  printf '%-10s %8.2f s  %8d KiB peak RSS   (runs: %s)\n' "$label" "$secs" "$rss" "$(awk '{ printf "%s ", $1 }' "$work/times.$label")"
  eval "t_$label=$secs; m_$label=$rss"
}

echo "input: $npy ($mib MiB), $(nproc) cores, median of $runs runs"
measure openssl openssl dgst -sha256 "$npy"
measure cp cp "$npy" "$work/copy.npy"
measure cpsync sh -c "cp '$npy' '$work/copy.npy' && sync '$work/copy.npy'"
rm -f "$work/copy.npy"
measure snapshot "$bin" snapshot "$npy" -o "$out" --ts 2026-01-01T00:00:00Z
cat "$out" > /dev/null
measure verify "$bin" verify "$out"
measure opensslw openssl dgst -sha256 "$out"
echo "wtxt file: $(stat -c %s "$out") bytes"
awk -v s="$t_snapshot" -v v="$t_verify" -v o="$t_openssl" -v c="$t_cp" -v cs="$t_cpsync" 'BEGIN {
  printf "snapshot / openssl(npy) = %.2fx (target <= 3.0x)\n", s / o;
  printf "verify   / openssl(npy) = %.2fx (target <= 2.5x)\n", v / o;
  printf "snapshot / cp(npy)      = %.2fx (snapshot fsyncs; cp+sync: %.2fx)\n", s / c, s / cs }'
echo "verify peak RSS: $((m_verify / 1024)) MiB (target <= 64 MiB)"
