#!/usr/bin/env bash
# Times `wtxt snapshot` and `wtxt verify` on a 1 GiB f32 .npy against
# `openssl dgst -sha256` of the same bytes, in one run, and prints ratios and
# peak RSS; then DELTA v2 and the AERO/safetensors converters.
# Usage: scripts/bench.sh [SIZE_MIB] (default 1024);
# SECTIONS="core delta converters floor" picks parts, RUNS=N the repetitions.
# `floor` prints every command's CPU against the passes the format requires,
# each measured in the same run.
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
want() { [[ " ${SECTIONS:-core delta converters floor} " == *" $1 "* ]]; }
run_once() { # label, command...: one timed run appended to the label's times (wall, RSS, CPU, user)
  # (with FRESH=PATH, PATH and PATH.parts are removed first, untimed)
  local label=$1; shift
  if [ -n "${FRESH:-}" ]; then rm -rf "$FRESH" "$FRESH.parts"; fi
  sync   # each run starts with no dirty pages left by the one before
  /usr/bin/time -f "%e %M %U %S" -o "$work/time.$label" "$@" > /dev/null 2> "$work/err.$label" || { cat "$work/err.$label"; exit 1; }
  awk '{ print $1, $2, $3 + $4, $3 }' "$work/time.$label" >> "$work/times.$label"
}
summarize() { # label: prints the median wall, CPU and user time and the max peak RSS of its runs
  local label=$1
  secs=$(sort -n "$work/times.$label" | awk -v n="$runs" 'NR == int((n + 1) / 2) { print $1 }')
  cpu=$(sort -n -k3 "$work/times.$label" | awk -v n="$runs" 'NR == int((n + 1) / 2) { print $3 }')
  user=$(sort -n -k4 "$work/times.$label" | awk -v n="$runs" 'NR == int((n + 1) / 2) { print $4 }')
  rss=$(sort -n -k2 "$work/times.$label" | tail -n 1 | awk '{ print $2 }')
  printf '%-10s %8.2f s  cpu %6.2f s  %8d KiB peak RSS   (runs: %s)\n' "$label" "$secs" "$cpu" "$rss" "$(awk '{ printf "%s ", $1 }' "$work/times.$label")"
  eval "t_$label=$secs; c_$label=$cpu; u_$label=$user; m_$label=$rss"
}
measure() { # label, command...: median wall and CPU (user+sys) of $runs runs, max peak RSS
  local label=$1
  : > "$work/times.$label"
  for _ in $(seq "$runs"); do run_once "$@"; done
  summarize "$label"
}
# Two commands run in turn, one of each a round, so that the drift of
# this VM's system time from minute to minute falls on both alike; which
# goes first alternates, since the second of a pair finds fewer of the
# pages the first just freed (new ones cost this VM a fault in the host):
# paired LABEL_A FRESH_A LABEL_B FRESH_B, the commands in arrays A and B.
paired() {
  : > "$work/times.$1"; : > "$work/times.$3"
  for round in $(seq "$runs"); do
    if [ $((round % 2)) = 1 ]; then
      FRESH=$2 run_once "$1" "${A[@]}"
      FRESH=$4 run_once "$3" "${B[@]}"
    else
      FRESH=$4 run_once "$3" "${B[@]}"
      FRESH=$2 run_once "$1" "${A[@]}"
    fi
  done
  summarize "$1"; summarize "$3"
}

echo "input: $npy ($mib MiB), $(nproc) cores, median of $runs runs"
if want core; then
measure openssl openssl dgst -sha256 "$npy"
measure cp cp "$npy" "$work/copy.npy"
measure cpsync sh -c "cp '$npy' '$work/copy.npy' && sync '$work/copy.npy'"
rm -f "$work/copy.npy"
# The single file (--part-size none) and the default split form.
one="$work/model_one.wtxt"
# Each into a fresh output: over an existing split snapshot, parts whose
# frame is listed unchanged are compared byte for byte and left alone.
A=("$bin" snapshot "$npy" -o "$one" --ts 2026-01-01T00:00:00Z --part-size none)
B=("$bin" snapshot "$npy" -o "$out" --ts 2026-01-01T00:00:00Z)
paired snapshot "$one" snapsplit "$out"
cat "$one" "$out" "$out.parts"/* > /dev/null
A=("$bin" verify "$one") B=("$bin" verify "$out")
paired verify "" versplit ""
measure opensslw openssl dgst -sha256 "$one"
echo "wtxt file: $(stat -c %s "$one") bytes; split: a head and $(ls "$out.parts" | wc -l) parts"
awk -v s="$t_snapshot" -v v="$t_verify" -v o="$t_openssl" -v c="$t_cp" -v cs="$t_cpsync" -v ss="$t_snapsplit" -v vs="$t_versplit" 'BEGIN {
  printf "snapshot / openssl(npy) = %.2fx (target <= 3.0x); split: %.2fx\n", s / o, ss / o;
  printf "verify   / openssl(npy) = %.2fx (target <= 2.5x); split: %.2fx\n", v / o, vs / o;
  printf "snapshot / cp(npy)      = %.2fx (snapshot fsyncs; cp+sync: %.2fx)\n", s / c, s / cs }'
echo "verify peak RSS: $((m_verify / 1024)) MiB (target <= 64 MiB); split: $((m_versplit / 1024)) MiB"
awk -v s="$c_snapshot" -v ss="$c_snapsplit" -v v="$c_verify" -v vs="$c_versplit" -v o="$c_openssl" 'BEGIN {
  printf "CPU (user+sys): snapshot %.2f s, split %.2f s (%.2fx); verify %.2f s, split %.2f s (%.2fx); openssl %.2f s\n", s, ss, ss / s, v, vs, vs / v, o }'
awk -v s="$u_snapshot" -v ss="$u_snapsplit" -v v="$u_verify" -v vs="$u_versplit" 'BEGIN {
  printf "user time alone: snapshot %.2f s, split %.2f s (%.2fx); verify %.2f s, split %.2f s (%.2fx)\n", s, ss, ss / s, v, vs, vs / v }'
fi

# --- DELTA v2: a model where 1% of rows changed -----------------------------
if want delta; then
dm=${DELTA_MIB:-$mib}
pattern=${DELTA_PATTERN:-block}   # block: 1% of rows in one run; spread: every 100th row
echo
echo "delta: ${dm} MiB f32 model, 1% of rows changed (${pattern})"
# Same file name in two folders: the array is named after the file stem.
mkdir -p "$work/dbase_${dm}m" "$work/dtarget_${dm}m_${pattern}"
dbase="$work/dbase_${dm}m/model.npy"
dtarget="$work/dtarget_${dm}m_${pattern}/model.npy"
[ -f "$dbase" ] || head -c $(( (dm << 20) + 128 )) "$npy" | python3 -c '
import sys
mib, out = int(sys.argv[1]), sys.argv[2]
rows = mib * 256
d = "{'"'"'descr'"'"': '"'"'<f4'"'"', '"'"'fortran_order'"'"': False, '"'"'shape'"'"': (%d, 1024), }" % rows
pad = (64 - (10 + len(d) + 1) % 64) % 64
h = (d + " " * pad + "\n").encode()
src = sys.stdin.buffer.read()
data = src[128:128 + (mib << 20)]
open(out, "wb").write(b"\x93NUMPY\x01\x00" + len(h).to_bytes(2, "little") + h + data)
' "$dm" "$dbase"
python3 - "$dbase" "$dtarget" "$pattern" <<'PY'
import sys
src, dst, pattern = sys.argv[1:4]
b = bytearray(open(src, "rb").read())
hl = 10 + int.from_bytes(b[8:10], "little")
rows = (len(b) - hl) // 4096
changed = rows // 100
picks = range(rows // 3, rows // 3 + changed) if pattern == "block" else range(0, rows, 100)
for r in list(picks)[:changed]:
    o = hl + r * 4096
    b[o:o + 4096] = bytes((x ^ 0x5a) for x in b[o:o + 4096])
open(dst, "wb").write(b)
PY
"$bin" snapshot "$dbase" -o "$work/dbase.wtxt" --gen 1 --ts 2026-01-01T00:00:00Z 2>/dev/null
"$bin" snapshot "$dtarget" -o "$work/dtarget.wtxt" --prev "$work/dbase.wtxt" --ts 2026-01-01T01:00:00Z 2>/dev/null
cat "$work/dbase.wtxt" "$work/dtarget.wtxt" > /dev/null
measure dverify "$bin" verify "$work/dtarget.wtxt"
measure dcreate "$bin" delta create "$work/dbase.wtxt" "$work/dtarget.wtxt" -o "$work/d.wtxtdelta"
measure dapply "$bin" delta apply "$work/dbase.wtxt" "$work/d.wtxtdelta" -o "$work/dout.wtxt"
cmp "$work/dout.wtxt" "$work/dtarget.wtxt" && { [ ! -d "$work/dtarget.wtxt.parts" ] || diff -r "$work/dout.wtxt.parts" "$work/dtarget.wtxt.parts"; } &&
  echo "apply rebuilt the target (head and parts) byte for byte"
stats=$("$bin" delta create "$work/dbase.wtxt" "$work/dtarget.wtxt" -o "$work/d.wtxtdelta" 2>&1)
echo "$stats"
changed_b64=$(echo "$stats" | sed -n 's/.*(\([0-9]*\) bytes of chunk text).*/\1/p')
dsize=$(stat -c %s "$work/d.wtxtdelta")
awk -v c="$t_dcreate" -v a="$t_dapply" -v v="$t_dverify" -v ds="$dsize" -v cb="$changed_b64" -v ts="$(cat "$work/dtarget.wtxt" "$work"/dtarget.wtxt.parts/* 2>/dev/null | wc -c)" 'BEGIN {
  printf "delta create / verify = %.2fx (target <= 1.5x)\n", c / v;
  printf "delta apply  / verify = %.2fx (target <= 1.3x)\n", a / v;
  printf "delta size %d bytes = %.3fx the changed chunks'"'"' text (target <= 2x), %.1f%% of the target\n", ds, ds / cb, 100 * ds / ts }'

fi

# --- Converters: AERO <-> WTXT and safetensors -> AERO ----------------------
if want converters; then
echo
echo "converters: the same ${mib} MiB f32 tensor as safetensors and AERO"
st="$work/model_${mib}m.safetensors"
aero="$work/model_${mib}m.aero"
[ -f "$st" ] || "$bin" convert "$npy" -o "$st" --to safetensors >/dev/null 2>&1
[ -f "$aero" ] || "$bin" convert "$st" -o "$aero" --to aero >/dev/null 2>&1
cat "$st" "$aero" > /dev/null
measure cpaero cp "$aero" "$work/copy.aero"
measure cpsyncaero sh -c "cp '$aero' '$work/copy.aero' && sync '$work/copy.aero'"
rm -f "$work/copy.aero"
measure snapst "$bin" snapshot "$st" -o "$work/st.wtxt" --ts 2026-01-01T00:00:00Z
measure aero2wtxt "$bin" convert "$aero" -o "$work/aero.wtxt" --to wtxt --ts 2026-01-01T00:00:00Z
cat "$work/aero.wtxt" > /dev/null
measure wtxt2aero "$bin" convert "$work/aero.wtxt" -o "$work/back.aero" --to aero
cmp "$aero" "$work/back.aero" && echo "AERO -> WTXT -> AERO gave the same bytes"
measure wtxt2st "$bin" convert "$work/aero.wtxt" -o "$work/back.safetensors" --to safetensors
measure st2aero "$bin" convert "$st" -o "$work/st.aero" --to aero
awk -v a="$t_aero2wtxt" -v s="$t_snapst" -v b="$t_wtxt2aero" -v x="$t_st2aero" -v c="$t_cpaero" -v cs="$t_cpsyncaero" -v t="$t_wtxt2st" -v v="${t_versplit:-0}" 'BEGIN {
  printf "AERO -> WTXT        / snapshot(safetensors) = %.2fx (target <= 1.2x)\n", a / s;
  printf "WTXT -> AERO        / cp(aero)              = %.2fx (target <= 2.5x; / cp+sync %.2fx, we fsync)\n", b / c, b / cs;
  printf "WTXT -> safetensors / cp(aero)              = %.2fx (target <= 2.5x; / cp+sync %.2fx)\n", t / c, t / cs;
  if (v > 0) printf "WTXT -> AERO / verify(split) %.2fx, WTXT -> safetensors / verify(split) %.2fx (the input is verified whole)\n", b / v, t / v;
  printf "safetensors -> AERO / cp(aero)              = %.2fx (target <= 3x; / cp+sync %.2fx)\n", x / c, x / cs }'
echo "WTXT -> safetensors peak RSS: $((m_wtxt2st / 1024)) MiB; WTXT -> AERO: $((m_wtxt2aero / 1024)) MiB (file-backed: AERO hashes the placed tensors through a map of the output)"
rm -f "$work/back.safetensors"
fi

# --- Every command against the format's floor --------------------------------
# The floor of a command is the passes the format makes it do, each measured
# here: three SHA-256 passes over the raw bytes (openssl), base64 of them
# (coreutils), CRC32C (the crate the writer uses), and writing the output
# (cp). Ratios are of CPU-seconds (user + sys).
if want floor; then
echo
echo "floor: every command at ${mib} MiB against the passes the format requires"
cargo build --release --quiet --example crc32c_pass
one="$work/floor.wtxt"
[ -f "$one" ] || "$bin" snapshot "$npy" -o "$one" --ts 2026-01-01T00:00:00Z --part-size none 2>/dev/null
split="$work/floor_split.wtxt"
[ -f "$split" ] || "$bin" snapshot "$npy" -o "$split" --ts 2026-01-01T00:00:00Z 2>/dev/null
cat "$npy" "$one" "$split" "$split.parts"/* > /dev/null
measure fsha openssl dgst -sha256 "$npy"
measure fb64 sh -c "base64 -w 0 '$npy' > /dev/null"
measure fcrc target/release/examples/crc32c_pass "$npy"
measure fcp cp "$npy" "$work/copy.npy"
rm -f "$work/copy.npy"
# The WTXT side of a conversion: the format's floor. The other side: one cp.
read_floor=$(awk -v s="$c_fsha" -v b="$c_fb64" -v c="$c_fcrc" 'BEGIN { printf "%.2f", 3 * s + b + c }')
write_floor=$(awk -v f="$read_floor" -v p="$c_fcp" 'BEGIN { printf "%.2f", f + p }')
echo "floor: 3 x sha256 + base64 + crc32c = $read_floor CPU-s; with an output written (+ cp) $write_floor CPU-s"
rows=()
row() { # label, goal, command...: against the floor with an output written
  local label=$1 goal=$2; shift 2
  FRESH="$work/f_out_$label" measure "$label" "$@"
  rows+=("$label $goal $write_floor")
}
row snapshot 1.25 "$bin" snapshot "$npy" -o "$work/f_out_snapshot" --ts 2026-01-01T00:00:00Z
measure verify "$bin" verify "$split"
rows+=("verify 1.25 $read_floor")
row extract 1.4 "$bin" extract "$split" -o "$work/f_out_extract.npy"
# FOLD keeps an array in one chunk of at most 1 GiB (its spec) and VOLP is
# built in memory (capped at 256 MiB), so a 1 GiB array fits neither: they
# are left out here.
for to in safetensors npz aero mldf; do
  row "to_$to" 1.4 "$bin" convert "$split" -o "$work/f_out_to_$to" --to "$to"
done
row split 1.4 "$bin" split "$one" -o "$work/f_out_split"
row join 1.4 "$bin" join "$split" -o "$work/f_out_join"
# Git: the pre-commit hook on a second, wholly new generation staged on the
# first, once (it packs the staged parts: a second run finds none loose);
# its floor is the read floor (its verification) plus the passes storing
# the parts in a pack needs (examples/pack_pass: SHA-1 and one Huffman
# pass, the crates the hook uses). `git diff HEAD~1 HEAD` of the two
# against Git's own cost (the same diff with the driver off: Git inflating
# both versions of every part).
cargo build --release --quiet --example pack_pass
repo="$work/floor_repo"
rm -rf "$repo" && git init -q -b main "$repo" && (cd "$repo" && "$OLDPWD/$bin" git install > /dev/null)
ident=(-c user.name=bench -c user.email=b@example.com)
cp "$split" "$repo/model.wtxt" && cp -r "$split.parts" "$repo/model.wtxt.parts"
git -C "$repo" add -A && git -C "$repo" "${ident[@]}" commit -q -m "gen 0"
npy2="$work/model_${mib}m_gen1.npy"
[ -f "$npy2" ] || python3 - "$npy" "$npy2" <<'EOF'
import os, struct, sys
src, dst = sys.argv[1:]
with open(src, "rb") as f:
    head = f.read(10)
    head += f.read(struct.unpack("<H", head[8:10])[0])
    n = os.fstat(f.fileno()).st_size - len(head)
with open(dst + ".tmp", "wb") as out:
    out.write(head)
    for _ in range(n >> 24):
        out.write(os.urandom(1 << 24))
    out.write(os.urandom(n % (1 << 24)))
os.rename(dst + ".tmp", dst)
EOF
rm -rf "$repo/model.wtxt.parts"
"$bin" snapshot "$npy2" -o "$repo/model.wtxt" --prev "$split" --ts 2026-01-01T00:01:00Z 2> /dev/null
git -C "$repo" add -A
measure fpack target/release/examples/pack_pass "$repo"/model.wtxt.parts/*
runs_saved=$runs; runs=1
measure hook sh -c "cd '$repo' && exec '$PWD/$bin' hook pre-commit"
runs=$runs_saved
rows+=("hook 1.4 $(awk -v f="$read_floor" -v p="$c_fpack" 'BEGIN { printf "%.2f", f + p }')")
git -C "$repo" "${ident[@]}" commit -q --no-verify -m "gen 1"
measure gitdiff0 git -C "$repo" -c diff.wtxt.command=true diff HEAD~1 HEAD
measure gitdiff git -C "$repo" diff HEAD~1 HEAD
rows+=("gitdiff 1.4 $c_gitdiff0")
rm -rf "$repo"
echo
printf '%-16s %8s %8s %8s %6s\n' command CPU-s floor ratio goal
for r in "${rows[@]}"; do
  set -- $r
  c=$(eval echo "\$c_$1")
  awk -v n="$1" -v c="$c" -v f="$3" -v g="$2" 'BEGIN { printf "%-16s %8.2f %8.2f %7.2fx %5.2fx\n", n, c, f, c / f, g }'
done
rm -rf "$work"/f_out_*
fi
