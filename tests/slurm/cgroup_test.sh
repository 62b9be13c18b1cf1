#!/bin/bash
# The slurm level from the job's cgroup, on the test cluster in cgroup mode (cluster up --cgroup,
# fixture slurm_cgroup_cluster; tests/slurm/README.md):
#   cgroup_test.sh CLUSTER_DIR SONDE WORKLOAD SCRATCH
# An `sbatch -N3 --exclusive` job under `sonde run --slurm`: its command's task burns 2 CPU
# seconds on n2 and 3 on n3 and idles on n1 (the head's node). Checked, from the head's manifest:
# (a) nodes[].level_sources.slurm: on n2 and n3 the job's v1 cgroup /slurm_nX/uid_0/job_<id>, less
#     the agent's own cgroup (cgroup_minus); on n1 no cgroup, and cgroup_not_used says why (the
#     head and its srun run in the job's cgroup there, beside the agent);
# (b) n2's and n3's slurm-level CPU seconds (their perf_slurm.csv rows) against the truth, which
#     the task reads from the kernel on its node once its burner has been reaped: the
#     cpuacct.usage of the command's step cgroup there (every process of the job on that node
#     other than slurmstepd and the agent, whose step is another), ±3 % + 0.05 s. Also against the
#     job cgroup's cpuacct.usage less that of the cgroup cgroup_minus names (read together by the
#     task), and the burner's own getrusage (a lower bound: the task's shell is not in it).
set -euo pipefail
CLUSTER=$1 SONDE=$2 WORKLOAD=$3 SCRATCH=$4
HERE=$(cd "$(dirname "$0")" && pwd)
eval "$("$HERE/cluster" env "$CLUSTER")"
[[ -f $CLUSTER/cgroup-mode ]] || { echo "FAIL: $CLUSTER is not in cgroup mode (cluster up DIR --cgroup)" >&2; exit 1; }
W=$SCRATCH/cgroup
rm -rf "$W" && mkdir -p "$W"
fail() { echo "FAIL: $*" >&2; exit 1; }
job=""
cleanup() { if [ -n "$job" ]; then scancel "$job" 2>/dev/null || true; fi; }
trap cleanup EXIT

# The task on each node. It sleeps first: the agents' first row covers the interval from the
# agent's baseline, which the manifest does not give, so the check leaves that row out and the
# burn must not be in it (two rows at --interval 0.5). After the burn (reaped: its CPU is in the
# step's account), the truth: this step's cpuacct.usage, and the job's with every cgroup below it,
# read at once (the agent's step goes on, ~1 % of a core).
cat >"$W/task.sh" <<TASK
#!/bin/sh
node=\$(hostname)
export SONDE_WORKLOAD_RUSAGE="$W/rusage.\$node"
sleep 1.2
case \$node in
  n2) "$WORKLOAD" burn 2 ;;
  n3) "$WORKLOAD" burn 3 ;;
esac
cg=\$(sed -n 's/^[0-9]*:cpuacct:\(.*\)\$/\1/p' /proc/self/cgroup)
step=\${cg%/task_*}
job=\${step%/step_*}
# Shell builtins only (read, echo), so that reading costs next to nothing and every value is of
# about the same instant.
cd /sys/fs/cgroup/cpuacct\$job
{
  echo "step \$step"
  read -r u <cpuacct.usage && echo "cgroup \$job \$u"
  for d in step_*/ step_*/task_*/; do
    read -r u <\${d}cpuacct.usage && echo "cgroup \$job/\${d%/} \$u"
  done
} >"$W/truth.\$node.tmp"
mv "$W/truth.\$node.tmp" "$W/truth.\$node"
sleep 1
TASK
chmod +x "$W/task.sh"

t0=$SECONDS
job=$(sbatch --parsable -N3 --exclusive -o "$W/job.out" -e "$W/job.err" --wrap \
  "\"$SONDE\" run --slurm --interval 0.5 --out \"$W/run\" -- srun --overlap -N3 --ntasks-per-node=1 \"$W/task.sh\"")
echo "job $job"
state=""
for ((i = 0; i < 120; i++)); do
  state=$(scontrol show job "$job" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2 || true)
  case $state in PENDING | RUNNING | CONFIGURING | COMPLETING | "") ;; *) break ;; esac
  sleep 0.5
done
echo "job $job: $state after $((SECONDS - t0)) s"
cat "$W/job.err" >&2 || true
[ "$state" = COMPLETED ] || { tail -n 30 "$W/job.out" >&2; fail "job state $state"; }
job=""

/usr/bin/python3 - "$W" <<'PY'
import csv, json, math, re, sys
w = sys.argv[1]
m = json.load(open(w + "/run/manifest.json"))
nodes = {n["name"]: n for n in m["nodes"]}
errors = []
def check(cond, what):
    if not cond: errors.append(what)
def cpu_seconds(node):  # ∫ cpu_util_avg/100·cpus dt, each row covering the interval before it
    cpus = nodes[node]["node_info"]["cpus_per_level"]["slurm"]["num_cpus"]
    s, prev = 0.0, None
    for r in csv.DictReader(open("%s/run/nodes/%s/perf_slurm.csv" % (w, node))):
        t = float(r["time"])
        if prev is not None and r["cpu_util_avg"] not in ("", None):
            s += float(r["cpu_util_avg"]) / 100 * cpus * (t - prev)
        prev = t
    return s
def truth(node):  # {cgroup path: seconds}, and the path of the command's step
    groups, step = {}, None
    for line in open("%s/truth.%s" % (w, node)):
        f = line.split()
        if f[0] == "step": step = f[1]
        else: groups[f[1]] = int(f[2]) / 1e9
    return groups, step

check(sorted(nodes) == ["n1", "n2", "n3"], "nodes %s" % sorted(nodes))
check(m["complete"], "manifest not complete")
for n in nodes:
    check(nodes[n]["status"] == "complete", "%s status %s" % (n, nodes[n]["status"]))
# (a) where each node's slurm level came from
for n in sorted(nodes):
    print("%s level_sources.slurm: %s" % (n, json.dumps(nodes[n]["level_sources"].get("slurm"))))
head = nodes["n1"]["level_sources"]["slurm"]
check("cgroup" not in head, "n1 (the head's node): slurm level from a cgroup: %s" % head)
check("sonde itself runs in the job's cgroup" in head.get("cgroup_not_used", ""),
      "n1: cgroup_not_used %r" % head.get("cgroup_not_used"))
for n, burn in (("n2", 2.0), ("n3", 3.0)):
    ls = nodes[n]["level_sources"]["slurm"]
    jp = ls.get("cgroup", "")
    check(re.fullmatch(r"/slurm_%s/uid_0/job_\d+" % n, jp) is not None, "%s cgroup %r" % (n, jp))
    check(ls.get("cgroup_version") == 1, "%s cgroup_version %r" % (n, ls.get("cgroup_version")))
    check(ls.get("cpu", "").startswith("cgroup v1 " + jp), "%s cpu %r" % (n, ls.get("cpu")))
    minus = ls.get("cgroup_minus", "")
    mm = re.match(r"sonde's own cgroup (\S+) ", minus)
    check(mm is not None and mm.group(1).startswith(jp + "/step_"),
          "%s cgroup_minus %r (expected the agent's own cgroup below the job's)" % (n, minus))
    # (b) CPU seconds against the kernel's account of the command's step on that node
    groups, step = truth(n)
    sonde = cpu_seconds(n)
    t_step = groups[step]
    agent = mm.group(1) if mm else None
    t_job = groups.get(jp, math.nan) - groups.get(agent, math.nan)
    rusage = sum(float(l.split()[1]) for l in open("%s/rusage.%s" % (w, n)))
    err = (sonde - t_step) / t_step * 100
    print("ACCURACY | cgroup cluster %s | slurm-level CPU s | truth %.4f (cpuacct.usage of the "
          "command's step %s) | sonde %.4f | %+.2f %%" % (n, t_step, step, sonde, err))
    print("  %s: job cgroup less the agent's (%s) %.4f (%+.2f %%), burner's rusage %.4f (%+.2f %%)"
          % (n, agent, t_job, (sonde - t_job) / t_job * 100, rusage, (sonde - rusage) / rusage * 100))
    check(rusage >= burn * 0.99, "%s: the burner used %.3f CPU s, not %.0f" % (n, rusage, burn))
    check(rusage <= t_step <= rusage + 0.2,
          "%s: step account %.3f s vs burner rusage %.3f s" % (n, t_step, rusage))
    check(abs(sonde - t_step) <= 0.03 * t_step + 0.05,
          "%s: slurm-level CPU %.4f s, truth %.4f s (±3 %% + 0.05 s)" % (n, sonde, t_step))
    check(abs(sonde - t_job) <= 0.03 * t_job + 0.05,
          "%s: slurm-level CPU %.4f s, job less agent %.4f s (±3 %% + 0.05 s)" % (n, sonde, t_job))
if errors:
    print("FAILED:\n  " + "\n  ".join(errors)); sys.exit(1)
print("ok")
PY
echo "cgroup_test: $((SECONDS - t0)) s"
