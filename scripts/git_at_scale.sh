#!/usr/bin/env bash
# Git at real size: a model of GIB GiB of f32 (8 matrices), 5 generations
# each changing 1% of the rows of 3 matrices, committed through
# `wtxt snapshot --prev` and the pre-commit hook (which verifies each
# snapshot and packs its parts) into one repository as split snapshots (default
# part size) and into another as single files (--part-size none). For each:
# .git after `git gc` against raw + changed bytes, the largest blob,
# `git diff HEAD~1 HEAD` (time, peak RSS of git and its drivers),
# `wtxt log`, the pre-commit hook against `wtxt verify`; then, on the split
# snapshots, delta create/apply, a three-way merge, and the daemon pushing two
# generations over ssh to a real sshd on 127.0.0.1 (stopped at the end).
# Usage: BENCH_DIR=/tmp/bench-work scripts/git_at_scale.sh [GIB] [GENS]
# (REUSE=1 measures the repositories a previous run made; FORMS=split
# leaves the single-file repository out; CHANGE=block changes a contiguous
# 1% of the rows instead of random ones (the case where few chunks change),
# in a folder of its own; REST=0 stops after the repository figures.)
set -euo pipefail
cd "$(dirname "$0")/.."
gib=${1:-1}
gens=${2:-5}
change=${CHANGE:-random}
work=${BENCH_DIR:-bench-work}/git-at-scale${CHANGE:+-$change}
mkdir -p "$work/models"
work=$(cd "$work" && pwd) # absolute: commands below run inside the repositories
cargo build --release --quiet
bin=$PWD/target/release/wtxt
export WTXT="$bin"

[ -n "${REUSE:-}" ] && [ -f "$work/models/changed_bytes" ] ||
  python3 scripts/make_generations.py "$work/models" $((gib * 1024)) "$gens" 8 4096 "$change"
raw=$((gib << 30))
changed=$(cat "$work/models/changed_bytes")

. scripts/measure.sh

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
    measure "$form gen $g: git add" git -C "$repo" add -A
    measure "$form gen $g: git commit, hook included" git -C "$repo" -c user.name=bench -c user.email=b@example.com commit -q -m "gen $g"
  done
  measure "$form: git gc" git -C "$repo" gc -q
}

measure_repo() { # form: the figures, on the repository build_repo made
  local form=$1 repo="$work/$1"
  echo "== $form: $gib GiB raw, $gens generations, 1% of the rows of 3 matrices changed per generation ($change rows)"
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

forms=${FORMS:-split single}
for form in $forms; do
  [ -n "${REUSE:-}" ] && [ -d "$work/$form" ] || build_repo "$form"
done
for form in $forms; do
  measure_repo "$form"
done

[ "${REST:-1}" = 0 ] && exit 0
# The rest of the commands at this size, on split snapshots.
echo "== split snapshots at $gib GiB: delta, merge, and the daemon pushing over ssh"
repo="$work/split"
for g in 2 3 4; do
  (cd "$repo" && "$bin" git export "HEAD~$((gens - 1 - g))" model.wtxt -o "$work/g$g.wtxt" 2> /dev/null)
done
measure "wtxt delta create (gen 3 -> gen 4)" "$bin" delta create "$work/g3.wtxt" "$work/g4.wtxt" -o "$work/d.wtxtdelta"
echo "  delta: $(($(stat -c %s "$work/d.wtxtdelta") >> 20)) MiB"
measure "wtxt delta apply" "$bin" delta apply "$work/g3.wtxt" "$work/d.wtxtdelta" -o "$work/rebuilt.wtxt"
cmp "$work/rebuilt.wtxt" "$work/g4.wtxt" && diff -r "$work/rebuilt.wtxt.parts" "$work/g4.wtxt.parts" \
  && echo "  rebuilt head and parts: byte-identical to gen 4"
measure "wtxt merge (base gen 2, gen 3, gen 4; theirs)" "$bin" merge "$work/g2.wtxt" "$work/g3.wtxt" "$work/g4.wtxt" \
  -o "$work/merged.wtxt" --strategy theirs
measure "wtxt verify (merged)" "$bin" verify "$work/merged.wtxt"

ssh_dir="$work/ssh"
rm -rf "$ssh_dir" "$work/remote.git" "$work/daemon-repo" "$work/d.sock"
mkdir -p "$ssh_dir" /run/sshd
ssh-keygen -q -t ed25519 -N "" -f "$ssh_dir/host_key"
ssh-keygen -q -t ed25519 -N "" -f "$ssh_dir/user_key"
cp "$ssh_dir/user_key.pub" "$ssh_dir/authorized_keys"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
printf '%s\n' "Port $port" "ListenAddress 127.0.0.1" "HostKey $ssh_dir/host_key" \
  "AuthorizedKeysFile $ssh_dir/authorized_keys" "PidFile $ssh_dir/sshd.pid" "StrictModes no" "UsePAM no" \
  "PasswordAuthentication no" "KbdInteractiveAuthentication no" "PermitRootLogin prohibit-password" \
  > "$ssh_dir/sshd_config"
/usr/sbin/sshd -D -e -f "$ssh_dir/sshd_config" 2> "$ssh_dir/sshd.log" &
sshd_pid=$!
git init -q --bare -b main "$work/remote.git"
git init -q -b main "$work/daemon-repo"
export GIT_SSH_COMMAND="ssh -i $ssh_dir/user_key -o IdentitiesOnly=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR"
"$bin" daemon --repo "$work/daemon-repo" --socket "$work/d.sock" --path-in-repo model.wtxt \
  --remote "ssh://$(id -un)@127.0.0.1:$port$work/remote.git" 2> "$work/daemon.err" &
daemon_pid=$!
trap 'kill $daemon_pid $sshd_pid 2> /dev/null || true' EXIT
while [ ! -S "$work/d.sock" ]; do sleep 0.1; done
ask() {
  python3 -c 'import socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall((sys.argv[2] + "\n").encode())
s.shutdown(socket.SHUT_WR); print(s.recv(65536).decode().strip())' "$work/d.sock" "$1"
}
start=$(date +%s.%N)
for g in 0 1; do ask "snapshot $work/models/gen$g.npz gen=$((g + 1))" > /dev/null; done
ask flush > /dev/null
echo "  daemon: 2 generations snapshotted, committed and pushed over ssh in $(python3 -c "print(f'{$(date +%s.%N) - $start:.1f}')") s"
echo "  status: $(ask status)"
ask shutdown > /dev/null
wait $daemon_pid || true
kill $sshd_pid 2> /dev/null || true
trap - EXIT
largest=$(git -C "$work/remote.git" cat-file --batch-all-objects --batch-check='%(objecttype) %(objectsize)' | awk '$1 == "blob" && $2 > m { m = $2 } END { printf "%d\n", m }')
echo "  remote: $(git -C "$work/remote.git" rev-list --count main) commits; largest blob $((largest >> 20)) MiB"
