# What the benchmark scripts that time whole commands share; sourced from
# the repository root once `work` (their scratch folder) is set. Builds the
# release binary unless BIN names one, and defines `t LABEL COMMAND...`:
# runs COMMAND (its stderr kept in $work/err; a failure prints it and
# exits) and prints its wall and CPU (user + system) seconds.
command -v /usr/bin/time >/dev/null || { echo "needs GNU time (apt-get install time)"; exit 2; }
if [ -z "${BIN:-}" ]; then cargo build --release --quiet; BIN=target/release/wtxt; fi
BIN=$(realpath "$BIN")
# random_state MIB FILE TENSORS COLS NAME: MIB MiB of seeded standard-normal
# f32 as TENSORS matrices of COLS columns named NAME00, NAME01..., an .npz.
random_state() {
  python3 - "$@" <<'PY'
import sys, numpy as np
mib, out, n, cols, name = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
rng = np.random.default_rng(0)
rows = (mib << 20) // (n * cols * 4)
np.savez(out, **{f"{name}{i:02d}": rng.standard_normal((rows, cols), dtype=np.float32) for i in range(n)})
PY
}
t() { # label, command...
  local label=$1; shift
  sync
  /usr/bin/time -f "%e %U %S" -o "$work/t" "$@" >/dev/null 2>"$work/err" || { cat "$work/err"; exit 1; }
  read -r wall user sys < "$work/t"
  printf '%-40s %8.2f %8.2f\n' "$label" "$wall" "$(echo "$user + $sys" | bc)"
}
