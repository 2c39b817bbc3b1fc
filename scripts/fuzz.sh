#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 60), seeded from fixtures/.
# Needs cargo-fuzz (installed if missing); uses the stable toolchain with
# RUSTC_BOOTSTRAP=1. Crashes land in fuzz/artifacts/TARGET/.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(verify delta wsum containers recover armor npz fold aero mldf daemon_protocol wal merge split direct)
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz
export RUSTC_BOOTSTRAP=1
seed() { # target, files...
  local t=$1; shift
  mkdir -p "fuzz/corpus/$t"
  for f in "$@"; do [ -f "$f" ] && cp "$f" "fuzz/corpus/$t/$(basename "$f")"; done
}
seed verify fixtures/wtxt/expected/*.wtxt fixtures/wtxt/tree/*.wtxt
seed delta fixtures/wtxt/expected/*.wtxtdelta
seed wsum fixtures/wtxt/expected/streaming.wsum
seed containers fixtures/wtxt/inputs/single.npy fixtures/wtxt/inputs/ext.safetensors fixtures/peers/*.safetensors fixtures/peers/*.volp
seed recover fixtures/wtxt/expected/defaults.wtxt fixtures/wtxt/expected/ext_dtypes.wtxt
seed split fixtures/wtxt/expected/defaults.wtxt fixtures/wtxt/expected/ext_dtypes.wtxt
seed direct fixtures/wtxt/expected/*.wtxt
seed armor fixtures/wtxt/expected/streaming.wsum
seed npz fixtures/wtxt/inputs/*.npz fixtures/numpy/*.npz
seed fold fixtures/peers/*.fold
seed aero fixtures/peers/*.aero
seed mldf fixtures/mldf/*.mldf
mkdir -p fuzz/corpus/wal fuzz/corpus/merge
printf 'snapshot requested gen=1 ts=5 pathhex=2f746d702f612e6e707a\nsnapshot done gen=1\n' >fuzz/corpus/wal/seed
{ cat fixtures/wtxt/expected/hmac.wtxt; printf '\0'; cat fixtures/wtxt/expected/hmac.wtxt; printf '\0'; cat fixtures/wtxt/expected/hmac.wtxt; } >fuzz/corpus/merge/seed
mkdir -p fuzz/corpus/daemon_protocol
printf 'snapshot /tmp/a.npz gen=3\n' >fuzz/corpus/daemon_protocol/snapshot
printf 'status\n' >fuzz/corpus/daemon_protocol/status
# Built first, unfiltered: a target that no longer compiles stops the run
# here instead of vanishing from the filtered output below.
for t in "${targets[@]}"; do
  cargo fuzz build --fuzz-dir fuzz -s none "$t"
done
for t in "${targets[@]}"; do
  echo "== $t (${secs}s)"
  cargo fuzz run --fuzz-dir fuzz -s none "$t" "fuzz/corpus/$t" -- \
    -max_total_time="$secs" -rss_limit_mb=2048 -max_len=1048576 -print_final_stats=1 2>&1 \
    | grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|Done|==|SUMMARY|panicked)" || true
done
