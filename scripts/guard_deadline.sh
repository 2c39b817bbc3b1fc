#!/usr/bin/env bash
# The guard's deadline on a push with no snapshot at all (finding T5-9):
# COMMITS commits over a TREE-entry tree, one file changed in each, pushed
# into a `wtxt git install --server` host with `wtxt.guardSeconds SECONDS`.
# Prints whether the push was refused and how long it took; the guard must
# give up at its deadline inside its tree and commit walks.
#
#   scripts/guard_deadline.sh [COMMITS [TREE [SECONDS]]]     (defaults 1000 60000 1)
#
# Needs `wtxt` on PATH. Work in $BENCH_DIR (default a temporary folder).
set -euo pipefail
commits=${1:-1000}
entries=${2:-60000}
seconds=${3:-1}
work=${BENCH_DIR:-$(mktemp -d)}
rm -rf "$work/w" "$work/h.git"
git init -q -b main "$work/w"
git init -q --bare -b main "$work/h.git"
(cd "$work/h.git" && wtxt git install --server >/dev/null 2>&1)
git -C "$work/h.git" config wtxt.guardSeconds "$seconds"
python3 - "$work/w" "$commits" "$entries" <<'PY'
import subprocess, sys
work, commits, entries = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
p = subprocess.Popen(["git", "-C", work, "fast-import", "--quiet"], stdin=subprocess.PIPE)
out = p.stdin
def blob(mark, data):
    out.write(b"blob\nmark :%d\ndata %d\n%s\n" % (mark, len(data), data))
blob(1, b"x")
for c in range(commits):
    blob(2 + c, b"v%d" % c)
    out.write(b"commit refs/heads/main\ncommitter t <t@e> %d +0000\ndata 2\nc\n" % (1700000000 + c))
    if c == 0:
        for i in range(entries):
            out.write(b"M 100644 :1 d%03d/f%06d\n" % (i % 300, i))
    out.write(b"M 100644 :%d d%03d/f%06d\n" % (2 + c, c % 300, c % entries))
out.close()
sys.exit(p.wait())
PY
start=$(date +%s%N)
if git -C "$work/w" push -q "$work/h.git" main 2> "$work/push.err"; then said=accepted; else said=refused; fi
end=$(date +%s%N)
printf 'push of %d commits over %d entries, wtxt.guardSeconds %s: %s in %d ms\n' \
  "$commits" "$entries" "$seconds" "$said" $(((end - start) / 1000000))
grep -m1 "wtxt pre-receive" "$work/push.err" || true
