# Sourced by the Git benchmarks. measure LABEL COMMAND...: runs COMMAND
# (stdout dropped) and prints "LABEL  wall s  cpu s  peak RSS MiB" (CPU:
# user + sys of the command and the children it waited for); on failure
# shows its stderr and fails. Needs $work (where time(1) writes).
measure() {
  local label=$1; shift
  /usr/bin/time -f "%e %U %S %M" -o "$work/time.out" "$@" > /dev/null 2> "$work/cmd.err" || { cat "$work/cmd.err"; return 1; }
  read -r secs user sys kib < "$work/time.out"
  printf '%-44s %6.2f s  cpu %6.2f s  %6d MiB\n' "$label" "$secs" "$(echo "$user + $sys" | bc)" $((kib / 1024))
}
