#!/usr/bin/env bash
# OpenSSF Model Signing at 1 GiB, one run: a new generation written with
# `--prev` with and without `--oms-key` (the signature's own cost), against
# `model_signing sign key` of the same split folder; `wtxt oms sign` against
# `wtxt verify`; and the checks, `wtxt verify --oms-pubkey` and
# `wtxt oms verify` against `model_signing verify key`. Prints CPU-seconds
# (user+sys) and wall time, best of RUNS (default 3).
# Usage: scripts/bench_oms.sh [SIZE_MIB] (default 1024); BENCH_DIR for the work folder.
set -euo pipefail
cd "$(dirname "$0")/.."
mib=${1:-1024}
work=${BENCH_DIR:-bench-work}/oms
mkdir -p "$work"
command -v /usr/bin/time >/dev/null || { echo "needs GNU time (apt-get install time)"; exit 2; }
command -v model_signing >/dev/null || { echo "needs model_signing (pip install model-signing pyopenssl)"; exit 2; }
cargo build --release --quiet
bin=$PWD/target/release/wtxt

npy="$work/model_${mib}m.npy"
if [ ! -f "$npy" ]; then
  python3 - "$npy" "$mib" <<'EOF'
import sys, numpy as np
rows = int(sys.argv[2]) * 256
a = np.lib.format.open_memmap(sys.argv[1], mode="w+", dtype="<f4", shape=(rows, 1024))
rng = np.random.default_rng(0)
for i in range(0, rows, 65536):
    a[i:i + 65536] = rng.standard_normal((min(65536, rows - i), 1024), dtype=np.float32)
a.flush()
EOF
fi
[ -f "$work/ec.pem" ] || "$bin" keygen -o "$work/ec.pem" --type p256 > /dev/null
g0="$work/g0/model.wtxt" g1="$work/g1/model.wtxt"
mkdir -p "$work/g0" "$work/g1"
[ -f "$g0" ] || "$bin" snapshot "$npy" -o "$g0" --ts 2026-01-01T00:00:00Z > /dev/null 2>&1
cat "$npy" "$g0" "$g0.parts"/* > /dev/null

runs=${RUNS:-3}
once() { # label, command...: one run, its CPU (user+sys), wall and peak RSS kept if best so far
  local label=$1; shift
  sync
  /usr/bin/time -f "%U %S %e %M" -o "$work/time" "$@" > /dev/null 2> "$work/err" || { cat "$work/err"; exit 1; }
  read -r u s e m < "$work/time"
  local cpu best_cpu best_wall
  cpu=$(echo "$u + $s" | bc)
  eval "best_cpu=\${cpu_$label:-} best_wall=\${wall_$label:-}"
  if [ -z "$best_cpu" ] || (( $(echo "$cpu < $best_cpu" | bc) )); then best_cpu=$cpu; fi
  if [ -z "$best_wall" ] || (( $(echo "$e < $best_wall" | bc) )); then best_wall=$e; fi
  eval "cpu_$label=$best_cpu wall_$label=$best_wall rss_$label=$m"
}
show() { # label: its best CPU and wall
  eval "printf '%-26s cpu %7.2f s   wall %7.2f s   peak RSS %7d KiB\n' $1 \$cpu_$1 \$wall_$1 \$rss_$1"
}
measure() { # label, command...: best CPU (user+sys) and wall of $runs runs
  for _ in $(seq "$runs"); do once "$@"; done
  show "$1"
}
# Two commands in turn, one of each a round, so that the drift of this
# VM's system time from minute to minute falls on both alike: paired
# LABEL_A LABEL_B, the commands in arrays A and B.
paired() {
  for _ in $(seq "$runs"); do once "$1" "${A[@]}"; once "$2" "${B[@]}"; done
  show "$1"; show "$2"
}

echo "input: $npy ($mib MiB), $(nproc) cores, best of $runs runs"
rm -f "$work/g1/model.sig"
A=("$bin" snapshot "$npy" -o "$g1" --prev "$g0" --ts 2026-01-02T00:00:00Z)
B=("${A[@]}" --oms-key "$work/ec.pem")
paired prev_plain prev_oms
cat "$g1" "$g1.parts"/* > /dev/null
measure ms_sign model_signing sign key --private_key "$work/ec.pem" --signature "$work/ref.sig" "$work/g1"
measure oms_sign "$bin" oms sign "$g1" --key "$work/ec.pem"
measure verify_oms "$bin" verify "$g1" --oms-pubkey "$work/ec.pem.pub"
measure oms_verify "$bin" oms verify "$work/g1" --signature "$work/g1/model.sig" --public-key "$work/ec.pem.pub"
A=("$bin" verify "$g1")
B=(model_signing verify key --signature "$work/g1/model.sig" --public_key "$work/ec.pem.pub" "$work/g1")
paired verify ms_verify
# Any model folder (not a snapshot): `wtxt oms sign DIR` against
# `model_signing sign key` of the same folder (the .npy and a config).
plain="$work/plain"
mkdir -p "$plain"
[ -e "$plain/model.npy" ] || ln "$npy" "$plain/model.npy" 2>/dev/null || cp "$npy" "$plain/model.npy"
echo '{"architectures": ["Bench"]}' > "$plain/config.json"
cat "$plain/model.npy" > /dev/null
A=(model_signing sign key --private_key "$work/ec.pem" --signature "$work/plain_ref.sig" "$plain")
B=("$bin" oms sign "$plain" --key "$work/ec.pem")
paired ms_sign_dir oms_sign_dir
model_signing verify key --signature "$plain/model.sig" --public_key "$work/ec.pem.pub" "$plain" > /dev/null ||
  { echo "model_signing does not accept wtxt's signature of the folder"; exit 1; }
echo
printf 'signing a new generation: +%.2f CPU-s (%.3fx); model_signing sign key of the folder: %.2f CPU-s\n' \
  "$(echo "$cpu_prev_oms - $cpu_prev_plain" | bc)" "$(echo "scale=3; $cpu_prev_oms / $cpu_prev_plain" | bc)" "$cpu_ms_sign"
printf 'oms sign beyond verify: +%.2f CPU-s; verify --oms-pubkey beyond verify: +%.2f CPU-s\n' \
  "$(echo "$cpu_oms_sign - $cpu_verify" | bc)" "$(echo "$cpu_verify_oms - $cpu_verify" | bc)"
printf 'wtxt oms verify / model_signing verify key: %.2fx CPU\n' "$(echo "scale=3; $cpu_oms_verify / $cpu_ms_verify" | bc)"
printf 'wtxt verify / model_signing verify key: %.2fx CPU\n' "$(echo "scale=3; $cpu_verify / $cpu_ms_verify" | bc)"
