#!/bin/bash
# The multi-node head's cost per node per tick with a simulated fan-in (replay_srun: N virtual
# nodes replaying one real agent's lines): `sonde record --slurm-job` with fake squeue/scontrol,
# for DURATION s at INTERVAL s; prints the head's CPU (user+system, from /usr/bin/time) per node
# per tick, its peak RSS, and the bytes per node per tick.
#   bench/multinode/fanin.sh SONDE NODES [INTERVAL] [DURATION]
set -euo pipefail
SONDE=$1 NODES=$2 INTERVAL=${3:-1} DURATION=${4:-20}
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
[ -n "${FANIN_KEEP:-}" ] && trap - EXIT && echo "$OUT"
hosts=$(seq -s, -f 'n%g' 1 "$NODES")
PATH=$HERE/../../tests/multinode/fake_slurm:$PATH FAKE_SQUEUE_OUT="n[1-$NODES] $(id -un) RUNNING" \
  FAKE_HOSTNAMES=$hosts SONDE_SRUN=$HERE/replay_srun \
  /usr/bin/time -f "head %U %S %M" "$SONDE" record --quiet --slurm-job 1 --interval "$INTERVAL" \
  --duration "$DURATION" --out "$OUT/run" 2> "$OUT/err" || { cat "$OUT/err"; exit 1; }
read -r _ user sys rss < <(grep '^head ' "$OUT/err")
bytes=$(grep -o '[0-9]* bytes per node per tick' "$OUT/err" | cut -d' ' -f1)
ticks=$(/usr/bin/python3 -c "import json;print(json.load(open('$OUT/run/manifest.json'))['ticks'])")
/usr/bin/python3 - "$NODES" "$ticks" "$user" "$sys" "$rss" "$bytes" <<'PY'
import sys
n, ticks, u, s, rss, b = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
print("nodes %d, ticks %d: head CPU %.1f µs per node per tick (user %.2f s, system %.2f s), "
      "peak RSS %.1f MiB, %s bytes per node per tick" % (n, ticks, (u + s) / n / max(1, ticks) * 1e6, u, s, rss / 1024, b))
PY
