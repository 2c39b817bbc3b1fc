# Sourced by the Git benchmarks. measure LABEL COMMAND...: runs COMMAND
# (stdout dropped) and prints "LABEL  seconds s  peak RSS MiB"; on failure
# shows its stderr and fails. Needs $work (where time(1) writes).
measure() {
  local label=$1; shift
  /usr/bin/time -f "%e %M" -o "$work/time.out" "$@" > /dev/null 2> "$work/cmd.err" || { cat "$work/cmd.err"; return 1; }
  read -r secs kib < "$work/time.out"
  printf '%-44s %6.2f s  %6d MiB\n' "$label" "$secs" $((kib / 1024))
}
