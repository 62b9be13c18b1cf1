#!/bin/sh
# A sonde collector in POSIX sh: the 1-, 5- and 15-minute load averages of the node, as a
# per-device vector (load_0, load_1, load_2 and their avg/min/max) at the system level.
# It speaks docs/plugin-protocol.md: one JSON request per line on stdin, one reply per line on
# stdout. No jq, and no other program per tick: the one member it needs is cut out of the
# request with the shell's own pattern removal.

while IFS= read -r line; do
  case $line in
    *'"op":"setup"'*)
      # The system level only: no value at the process, user or slurm levels.
      printf '{"ok":true,"devices":{"system":3},"context":false}\n'
      ;;
    *'"op":"tick"'*)
      rest=${line#*'"tick":'}  # the request's "tick" number, echoed in the reply
      tick=${rest%%[!0-9]*}
      if read -r one five fifteen rest </proc/loadavg; then
        printf '{"ok":true,"tick":%s,"values":{"system":[%s,%s,%s]}}\n' \
          "$tick" "$one" "$five" "$fifteen"
      else
        printf '{"ok":false,"tick":%s,"error":"cannot read /proc/loadavg"}\n' "$tick"
      fi
      ;;
    *'"op":"shutdown"'*)
      exit 0
      ;;
    *)
      printf '{"ok":false,"error":"unknown request"}\n'
      ;;
  esac
done
