"""What a collector sees: the per-tick context and the injected node information."""


class ProcInfo:
    """One process of a level at this tick, from sonde's single scan of /proc."""

    __slots__ = ("pid", "ppid", "uid", "comm", "cpu_s", "child_cpu_s", "cpu_delta_s",
                 "child_cpu_delta_s", "rss_bytes", "io_valid", "read_bytes", "write_bytes",
                 "syscr", "syscw", "processor", "num_threads")

    def __init__(self, fields):
        for key in self.__slots__:
            setattr(self, key, fields.get(key))

    def __repr__(self):
        return "ProcInfo(pid={}, comm={!r}, cpu_s={}, rss_bytes={})".format(
            self.pid, self.comm, self.cpu_s, self.rss_bytes)


class NodeInfo:
    """What the node and the target may use (injected with ``inject: [node_info]``).

    Attributes: hostname, kernel, num_system_cpus, system_cpu_ids, cpu_handles (the CPUs the
    target may run on), num_cpus (CPUs available to the target, after cgroup quotas), cpu_quota,
    mem_total_bytes, memory_limit_bytes and memory_limit_source (dicts by level), num_gpus,
    gpu_name, gpu_memory_gib.
    """

    def __init__(self, fields):
        self.__dict__.update(fields or {})

    def __repr__(self):
        return "NodeInfo({})".format(", ".join(
            "{}={!r}".format(k, v) for k, v in sorted(self.__dict__.items())))


class CollectionContext:
    """One tick: ``tick`` (0 first), ``time`` (monotonic seconds), ``wallclock`` (epoch seconds),
    ``dt`` (seconds since the previous tick, 0 at the first), ``levels`` (asked this tick),
    ``pids`` (level -> list of ProcInfo; only with ``wants_context = True``; the system level
    has none, see ``total_pids``), ``total_pids``, and the target: ``pid``, ``uid``,
    ``slurm_job`` (None outside a job), ``node_info`` (a NodeInfo when the entry injects it)."""

    __slots__ = ("tick", "time", "wallclock", "dt", "levels", "pids", "total_pids", "node_info",
                 "pid", "uid", "slurm_job", "interval")

    def __init__(self, tick=0, time=0.0, wallclock=0.0, dt=0.0, levels=(), pids=None,
                 total_pids=None, node_info=None, pid=None, uid=None, slurm_job=None,
                 interval=None):
        self.tick = tick
        self.time = time
        self.wallclock = wallclock
        self.dt = dt
        self.levels = list(levels)
        self.pids = pids if pids is not None else {}
        self.total_pids = total_pids
        self.node_info = node_info
        self.pid = pid
        self.uid = uid
        self.slurm_job = slurm_job
        self.interval = interval


def pids_from_wire(context):
    """The "context" member of a tick request -> ({level: [ProcInfo]}, total_pids)."""
    if not context:
        return {}, None
    by_pid = {p["pid"]: ProcInfo(p) for p in context.get("procs", ())}
    pids = {}
    for level, members in (context.get("members") or {}).items():
        pids[level] = [by_pid[pid] for pid in members if pid in by_pid]
    return pids, context.get("total_pids")
