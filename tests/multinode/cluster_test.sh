#!/bin/bash
# Multi-node runs on the real 3-node test cluster (tests/slurm/cluster, fixture slurm_cluster):
#   cluster_test.sh CLUSTER_DIR SONDE WORKLOAD SCRATCH CASE
# CASE: figures   an sbatch -N3 job under `sonde run --slurm`: n1 burns two cores, n2 holds
#                 500 MiB, n3 idles; per-node and aggregate figures against the truth
#                 (docs/accuracy.md tolerances: CPU ±3 %, memory ±2 %, plus a few MiB of shells)
#       agent     an agent killed mid-run: lost, its rows stop, the run and the command go on
#       node      a node's slurmd (and everything on it) stopped mid-run: lost, the run goes on
#       record    `sonde record --slurm-job ID` from outside the job
set -euo pipefail
CLUSTER=$1 SONDE=$2 WORKLOAD=$3 SCRATCH=$4 CASE=$5
HERE=$(cd "$(dirname "$0")" && pwd)
eval "$("$HERE/../slurm/cluster" env "$CLUSTER")"
rm -rf "$SCRATCH/$CASE" && mkdir -p "$SCRATCH/$CASE"
W=$SCRATCH/$CASE
fail() { echo "FAIL: $*" >&2; exit 1; }
# Whatever happens, the job does not outlive the test and a stopped node comes back: the next test
# on the cluster must not find its nodes busy or down.
job="" stopped=""
cleanup() {
  [ -n "$job" ] && scancel "$job" 2>/dev/null || true
  [ -n "$stopped" ] && "$HERE/../slurm/cluster" start-node "$CLUSTER" "$stopped" >/dev/null 2>&1 || true
}
trap cleanup EXIT

# Until FILE exists with at least LINES lines (a CSV header and rows), or TIMEOUT seconds.
wait_lines() {  # FILE LINES TIMEOUT
  local i=0
  while [ $i -lt $(($3 * 10)) ]; do
    [ -f "$1" ] && [ "$(wc -l < "$1")" -ge "$2" ] && return 0
    sleep 0.1; i=$((i+1))
  done
  return 1
}

wait_job() {  # JOBID TIMEOUT: until the job left RUNNING/PENDING
  local t=0
  while [ $t -lt "$2" ]; do
    state=$(scontrol show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2 || true)
    case "$state" in PENDING|RUNNING|CONFIGURING|COMPLETING|"") ;; *) echo "$state"; return 0;; esac
    sleep 1; t=$((t+1))
  done
  echo TIMEOUT; return 1
}

# The task of each node: n1 two burners, n2 500 MiB, n3 idle (same length). The task's shell
# stays 1.5 s after its workload: it reaps the burners, so their last CPU reaches the job through
# its counters (a process of the job whose parent is not in it takes its last partial interval
# along when it exits: docs/multinode.md).
# The workload starts when $W/go exists: at once under run --slurm (the command starts after the
# agents are ready), and under record once the agents say ready (a process' CPU time from before
# sonde first saw it is not counted, so a burn that began earlier would be partly unseen).
# Each workload appends its own rusage to $W/rusage.<node> (the truth of the CPU figures: on a
# fresh VM, touching n2's 500 MiB costs CPU time too, and sonde rightly counts it).
rm -f "$W"/rusage.* "$W"/started.*
cat > "$W/task.sh" <<TASK
#!/bin/sh
export SONDE_WORKLOAD_RUSAGE="$W/rusage.\$(hostname)"
touch "$W/started.\$(hostname)"
i=0
while [ ! -e "$W/go" ] && [ \$i -lt 600 ]; do sleep 0.1; i=\$((i+1)); done
case \$(hostname) in
  n1) "$WORKLOAD" burn 5 & "$WORKLOAD" burn 5; wait; sleep 1.5 ;;
  n2) "$WORKLOAD" hold 500 7 >/dev/null; sleep 1.5 ;;
  *) sleep 8.5 ;;
esac
TASK
chmod +x "$W/task.sh"

rm -f "$W/go"
case $CASE in
figures|agent|node)
  touch "$W/go"
  extra=""
  [ "$CASE" = node ] && extra="--no-kill"
  job=$(sbatch --parsable -N3 $extra -o "$W/job.out" -e "$W/job.err" --wrap \
    "\"$SONDE\" run --slurm --interval 0.5 --out \"$W/run\" -- srun --overlap --no-kill -N3 --ntasks-per-node=1 \"$W/task.sh\"")
  echo "job $job"
  # A loss mid-run: once every node's task has started and the lost node's agent has sent rows
  # (waited for, not slept: under a sanitizer or on a busy machine sonde starts slower).
  if [ "$CASE" != figures ]; then
    lost=n2; [ "$CASE" = node ] && lost=n3
    for n in n1 n2 n3; do
      wait_lines "$W/started.$n" 0 60 || fail "the task did not start on $n in 60 s"
    done
    wait_lines "$W/run/nodes/$lost/perf_slurm.csv" 3 60 || fail "no rows from $lost's agent in 60 s"
  fi
  if [ "$CASE" = agent ]; then
    # Kill n2's agent (on n2, through its namespace).
    pid=$("$HERE/../slurm/cluster" pids "$CLUSTER" n2)
    nsenter -t "$pid" -p -m sh -c 'for p in /proc/[0-9]*; do
        [ "$(tr "\0" "\n" < $p/cmdline 2>/dev/null | sed -n 2p)" = agent ] && kill -9 ${p#/proc/}
      done; true'
  fi
  if [ "$CASE" = node ]; then
    stopped=n3
    "$HERE/../slurm/cluster" stop-node "$CLUSTER" n3
  fi
  st=$(wait_job "$job" 120) || fail "job $job did not end"
  if [ -n "$stopped" ]; then "$HERE/../slurm/cluster" start-node "$CLUSTER" n3; stopped=""; fi
  echo "job $job: $st"; cat "$W/job.err" >&2 || true
  # A lost node may fail the command's own srun (the job state then says so): not sonde's.
  [ "$st" = COMPLETED ] || [ "$CASE" = node ] || fail "job state $st"
  ;;
record)
  job=$(sbatch --parsable -N3 -o "$W/job.out" -e "$W/job.err" --wrap \
    "srun --overlap -N3 --ntasks-per-node=1 \"$W/task.sh\"")
  for i in $(seq 60); do
    [ "$(squeue -j "$job" -h -o %T)" = RUNNING ] && break; sleep 0.5
  done
  "$SONDE" record --slurm-job "$job" --interval 0.5 --out "$W/run" 2> "$W/record.err" &
  rec=$!
  # Go once the manifest lists the three nodes as running (their agents are ready).
  for i in $(seq 300); do
    n=$(/usr/bin/python3 -c 'import json,sys
try:
    m = json.load(open(sys.argv[1]))
    print(sum(1 for x in m.get("nodes", []) if x.get("status") == "running"))
except Exception:
    print(0)' "$W/run/manifest.json" 2>/dev/null)
    [ "$n" = 3 ] && break
    sleep 0.1
  done
  touch "$W/go"
  wait $rec || { cat "$W/record.err" >&2; fail "record exited $?"; }
  cat "$W/record.err" >&2
  wait_job "$job" 60 >/dev/null || true
  ;;
*) fail "unknown case $CASE" ;;
esac

/usr/bin/python3 - "$W/run" "$CASE" <<'PY'
import csv, json, math, sys
run, case = sys.argv[1], sys.argv[2]
m = json.load(open(run + "/manifest.json"))
nodes = {n["name"]: n for n in m["nodes"]}
errors = []
def check(cond, what):
    if not cond: errors.append(what)
def table(path):
    rows = list(csv.DictReader(open(path)))
    return [{k: (float(v) if v not in ("", None) else math.nan) for k, v in r.items()} for r in rows]
def cpu_seconds(rows, cpus):  # ∫ cpu_util_avg/100·cpus dt (each row covers the interval before it)
    s, prev = 0.0, None
    for r in rows:
        if prev is not None and not math.isnan(r["cpu_util_avg"]):
            s += r["cpu_util_avg"] / 100 * cpus * (r["time"] - prev)
        prev = r["time"]
    return s
print(json.dumps({n: {k: v[k] for k in ("status", "reason", "rows", "clock_offset_s")} for n, v in nodes.items()}, indent=1))
check(sorted(nodes) == ["n1", "n2", "n3"], "nodes %s" % sorted(nodes))
check(m["complete"], "manifest complete")
agg = table(run + "/perf_slurm.csv")
per = {n: table("%s/nodes/%s/perf_slurm.csv" % (run, n)) for n in nodes}
cpus = {n: nodes[n]["node_info"]["cpus_per_level"]["slurm"]["num_cpus"] for n in nodes}
for n in nodes:
    check(abs(nodes[n]["clock_offset_s"]) < 0.5, "%s clock offset %s" % (n, nodes[n]["clock_offset_s"]))
if case in ("figures", "record"):
    for n in nodes:
        check(nodes[n]["status"] == "complete", "%s status %s" % (n, nodes[n]["status"]))
    def truth(node):  # the workloads' own rusage on that node
        try:
            return sum(float(l.split()[1]) for l in open("%s/../rusage.%s" % (run, node)))
        except FileNotFoundError:
            return 0.0
    t1, t2 = truth("n1"), truth("n2")
    c1 = cpu_seconds(per["n1"], cpus["n1"])
    print("n1 CPU seconds %.2f (truth %.2f: two burners of 5 s, their rusage)" % (c1, t1))
    check(t1 >= 9.9, "n1's burners used %.2f CPU s, not 10" % t1)
    check(abs(c1 - t1) <= 0.03 * t1 + 0.3, "n1 CPU seconds %.2f, expected %.2f" % (c1, t1))
    m2 = max(r["memory"] for r in per["n2"]) * 1024
    print("n2 peak memory %.1f MiB (truth 500 + the task's shell)" % m2)
    check(500 * 0.98 <= m2 <= 500 * 1.02 + 16, "n2 memory peak %.1f MiB" % m2)
    c3 = cpu_seconds(per["n3"], cpus["n3"])
    m3 = max(r["memory"] for r in per["n3"]) * 1024
    print("n3 CPU seconds %.2f, peak memory %.1f MiB (idle)" % (c3, m3))
    check(c3 < 0.3 and m3 < 16, "n3 not idle: %.2f CPU s, %.1f MiB" % (c3, m3))
    total_cpus = sum(cpus.values())
    ca = cpu_seconds(agg, total_cpus)
    print("aggregate CPU seconds %.2f, sum of nodes %.2f, truth %.2f (n2's hold: %.2f)"
          % (ca, c1 + c3 + cpu_seconds(per["n2"], cpus["n2"]), t1 + t2, t2))
    check(abs(ca - (t1 + t2)) <= 0.06 * (t1 + t2) + 0.6,
          "aggregate CPU seconds %.2f, expected %.2f" % (ca, t1 + t2))
    ma = max(r["memory"] for r in agg) * 1024
    check(500 * 0.98 <= ma <= 500 * 1.02 + 40, "aggregate memory peak %.1f MiB" % ma)
    busy = [r for r in agg if r["nodes"] == 3 and r["cpu_util_node_max"] > 20]
    check(busy and all(r["cpu_util_node_min"] < 5 for r in busy), "node spread: n3 idle while n1 busy")
if case in ("agent", "node"):
    lost = "n2" if case == "agent" else "n3"
    check(nodes[lost]["status"] == "lost", "%s status %s" % (lost, nodes[lost]["status"]))
    for n in nodes:
        if n != lost:
            check(nodes[n]["status"] == "complete", "%s status %s" % (n, nodes[n]["status"]))
    t = nodes[lost]["status_wallclock"]
    check(all(r["nodes"] <= 2 for r in agg if r["wallclock"] > t + 0.01), "rows after the loss count it")
    check(any(r["nodes"] == 3 for r in agg), "no row with 3 nodes before the loss")
    check(nodes[lost]["last_wallclock"] < max(r["wallclock"] for r in per["n1"]) - 1, "its rows went on")
    if case == "agent":
        check(m["exit_status"] == 0, "exit status %s" % m["exit_status"])
if errors:
    print("FAILED:\n  " + "\n  ".join(errors)); sys.exit(1)
print("ok")
PY
