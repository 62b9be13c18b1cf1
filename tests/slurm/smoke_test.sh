#!/usr/bin/env bash
# The test cluster does what the multi-node tests rely on (tests/slurm/README.md):
#   smoke_test.sh DIR            srun across the 3 nodes, per-node /proc and hostname, sbatch, squeue,
#                                scontrol
#   smoke_test.sh DIR lost-node  `cluster stop-node` makes Slurm mark the node down, `start-node`
#                                brings it back idle
# DIR is the state directory of a running cluster (`tests/slurm/cluster up DIR`).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cluster=$here/cluster
dir=${1:?usage: smoke_test.sh DIR [lost-node]}
what=${2:-smoke}
[[ -f $dir/env ]] || {
  echo "FAIL: $dir/env missing: the cluster is not up (fixture slurm_cluster)" >&2
  exit 1
}
# shellcheck disable=SC1091
source "$dir/env"

failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
check_eq() { # what expected actual
  if [[ $2 != "$3" ]]; then
    fail "$1: expected [$2], got [$3]"
  else
    echo "ok: $1"
  fi
}

# Wait (at most $2 s) until node $1's sinfo state matches the regex $3.
wait_state() {
  local node=$1 limit=$2 want=$3 t0=$SECONDS st=""
  while ((SECONDS - t0 < limit)); do
    st=$(sinfo -h -n "$node" -o '%t')
    [[ $st =~ $want ]] && {
      echo "$((SECONDS - t0))"
      return 0
    }
    sleep 1
  done
  echo "node $node: state '$st' after ${limit}s, expected /$want/" >&2
  return 1
}

if [[ $what == lost-node ]]; then
  # Whatever happens, n3 is back for the next test.
  trap '"$cluster" start-node "$dir" n3 >/dev/null 2>&1 || true' EXIT
  jid=$(sbatch --parsable -N3 --no-kill -o "$dir/lost-node-%j.out" --wrap 'sleep 300')
  wait_state n3 20 '^(mix|alloc)$' >/dev/null || fail "job $jid did not start on n3"
  "$cluster" stop-node "$dir" n3
  pgrep -f "slurmd -D -N n3 -f $dir/slurm.conf" >/dev/null && fail "n3's slurmd still runs after stop-node"
  if secs=$(wait_state n3 60 '^down'); then
    echo "ok: n3 down ${secs}s after stop-node"
  else
    fail "n3 not marked down"
  fi
  # --no-kill: the job (its batch script on n1) goes on, on the nodes left.
  check_eq "job state after losing n3" RUNNING "$(squeue -h -j "$jid" -o %T)"
  scancel "$jid"
  "$cluster" start-node "$dir" n3 || fail "start-node n3"
  check_eq "n3 back" idle "$(sinfo -h -n n3 -o %t)"
  ((failures == 0)) || exit 1
  exit 0
fi

# One task per node, each on its own hostname.
check_eq "srun -N3 -l hostname" "0: n1 1: n2 2: n3" \
  "$(srun -N3 -l hostname | sort | tr '\n' ' ' | sed 's/ $//')"

# Each node sees only its own processes: its init, slurmd, slurmstepd, the task (a handful).
while read -r label count; do
  if ((count > 15)); then
    fail "task $label sees $count processes in /proc (expected only its node's, < 15)"
  else
    echo "ok: task $label sees $count processes"
  fi
done < <(srun -N3 -l sh -c 'ls /proc | grep -c "^[0-9]"')

# A process on n2 is visible on n2 (srun, nsenter) and on the machine, not on n1.
marker=4242.$$
srun -N1 -w n2 sleep "$marker" 2>/dev/null &
bg=$!
# (A job can wait a few seconds for a node still completing the previous one.)
for ((i = 0; i < 300; i++)); do
  pgrep -f "/sleep $marker\$" >/dev/null && break
  sleep 0.1
done
pgrep -f "/sleep $marker\$" >/dev/null || fail "sleep $marker never started on n2"
n1_sees=$(srun -N1 -w n1 ps -eo args | grep -cE "(^|/)sleep $marker\$" || true)
n2_sees=$(srun -N1 -w n2 ps -eo args | grep -cE "(^|/)sleep $marker\$" || true)
check_eq "n1 sees n2's sleep" 0 "$n1_sees"
check_eq "n2 sees its sleep" 1 "$n2_sees"
n2_init=$("$cluster" pids "$dir" n2)
check_eq "nsenter into n2: hostname" n2 "$(nsenter -t "$n2_init" -p -u -m hostname)"
check_eq "nsenter into n2: ps" 1 "$(nsenter -t "$n2_init" -p -u -m ps -eo args | grep -cE "(^|/)sleep $marker\$" || true)"
kill "$bg"
wait "$bg" 2>/dev/null || true

# A batch job over the 3 nodes, seen by squeue and scontrol while it runs, and its output.
out=$dir/smoke-%j.out
jid=$(sbatch --parsable -N3 -o "$out" --wrap 'srun -l hostname; sleep 3')
[[ $jid =~ ^[0-9]+$ ]] || fail "sbatch printed '$jid', expected a job id"
for ((i = 0; i < 100; i++)); do
  [[ $(squeue -h -j "$jid" -o %T) == RUNNING ]] && break
  sleep 0.1
done
check_eq "squeue -j $jid -h -o '%N %u %T'" "n[1-3] root RUNNING" "$(squeue -j "$jid" -h -o '%N %u %T')"
check_eq "scontrol show hostnames" "n1 n2 n3" \
  "$(scontrol show hostnames "$(squeue -j "$jid" -h -o %N)" | tr '\n' ' ' | sed 's/ $//')"
for ((i = 0; i < 200; i++)); do
  state=$(scontrol show job "$jid" | grep -o 'JobState=[A-Z]*')
  [[ $state == JobState=COMPLETED ]] && break
  sleep 0.1
done
check_eq "scontrol show job $jid" JobState=COMPLETED "$state"
check_eq "sbatch output" "0: n1 1: n2 2: n3" "$(sort "${out//%j/$jid}" | tr '\n' ' ' | sed 's/ $//')"

((failures == 0)) || exit 1
echo "all passed"
