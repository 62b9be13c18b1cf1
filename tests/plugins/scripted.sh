#!/bin/sh
# A process plugin for the tests of src/plugins/process_host.cpp, scripted by its arguments:
#   --late TICK SECONDS   sleep before answering tick TICK
#   --hang-at TICK        never answer tick TICK (sleep for an hour)
#   --exit-at TICK        exit with status 3 when asked for tick TICK
#   --exit-after N        exit with status 3 when asked for its N-th tick (each child counts anew)
#   --remove-on-exit PATH remove PATH before such an exit (a restart then cannot find it)
#   --exits-file PATH     append a line to PATH at such an exit (a test waits for the N-th)
#   --garbage-at TICK     answer tick TICK with a line that is not JSON
#   --setup-error TEXT    refuse setup with TEXT
#   --pidfile PATH        write its pid to PATH
#   --stderr              write "hello from tick N" to stderr on every tick
# Its value at the process and system levels is the tick number (the user level is not
# supported), so a test can tell which request a reply answered.
late_tick=-1 late_s=0 hang_tick=-1 exit_tick=-1 exit_after=-1 remove_on_exit= garbage_tick=-1
setup_error= to_stderr= asked=0 exits_file=
while [ $# -gt 0 ]; do
  case $1 in
    --late) late_tick=$2 late_s=$3; shift 3 ;;
    --hang-at) hang_tick=$2; shift 2 ;;
    --exit-at) exit_tick=$2; shift 2 ;;
    --exit-after) exit_after=$2; shift 2 ;;
    --remove-on-exit) remove_on_exit=$2; shift 2 ;;
    --exits-file) exits_file=$2; shift 2 ;;
    --garbage-at) garbage_tick=$2; shift 2 ;;
    --setup-error) setup_error=$2; shift 2 ;;
    --pidfile) echo $$ > "$2"; shift 2 ;;
    --stderr) to_stderr=1; shift ;;
    *) echo "scripted.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

while IFS= read -r line; do
  case $line in
    *'"op":"setup"'*)
      if [ -n "$setup_error" ]; then
        printf '{"ok":false,"error":"%s"}\n' "$setup_error"
      else
        printf '{"ok":true,"devices":{"process":1,"system":1},"context":false,"priority":7}\n'
      fi
      ;;
    *'"op":"tick"'*)
      rest=${line#*'"tick":'}
      tick=${rest%%[!0-9]*}
      [ -n "$to_stderr" ] && echo "hello from tick $tick" >&2
      asked=$((asked + 1))
      if [ "$tick" = "$exit_tick" ] || [ "$asked" = "$exit_after" ]; then
        [ -n "$remove_on_exit" ] && rm -f "$remove_on_exit"
        [ -n "$exits_file" ] && echo "$tick" >> "$exits_file"
        exit 3
      fi
      [ "$tick" = "$hang_tick" ] && sleep 3600
      [ "$tick" = "$late_tick" ] && sleep "$late_s"
      if [ "$tick" = "$garbage_tick" ]; then
        echo "this is not JSON"
      else
        printf '{"ok":true,"tick":%s,"values":{"process":%s,"system":%s}}\n' "$tick" "$tick" "$tick"
      fi
      ;;
    *'"op":"shutdown"'*) exit 0 ;;
  esac
done
