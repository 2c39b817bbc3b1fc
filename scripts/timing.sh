# What the benchmark scripts that time whole commands share; sourced from
# the repository root once `work` (their scratch folder) is set. Builds the
# release binary unless BIN names one, and defines `t LABEL COMMAND...`:
# runs COMMAND (its stderr kept in $work/err; a failure prints it and
# exits) and prints its wall and CPU (user + system) seconds.
command -v /usr/bin/time >/dev/null || { echo "needs GNU time (apt-get install time)"; exit 2; }
if [ -z "${BIN:-}" ]; then cargo build --release --quiet; BIN=target/release/wtxt; fi
BIN=$(realpath "$BIN")
t() { # label, command...
  local label=$1; shift
  sync
  /usr/bin/time -f "%e %U %S" -o "$work/t" "$@" >/dev/null 2>"$work/err" || { cat "$work/err"; exit 1; }
  read -r wall user sys < "$work/t"
  printf '%-40s %8.2f %8.2f\n' "$label" "$wall" "$(echo "$user + $sys" | bc)"
}
