"""Processes: logging, running a command with its CPU time and memory measured, idle processes,
/proc readers."""
import ctypes
import glob
import os
import shlex
import signal
import subprocess
import sys
import time

from benchlib.paths import BUILD_C, ROOT

CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1


def die_with_parent():
    """preexec_fn: the child gets SIGKILL if this script dies (safety net)."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def read_status_kib(pid, key):
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(key.encode() + b":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def read_status(pid):
    """The kB fields of /proc/<pid>/status (VmRSS, VmHWM, ...), in one read."""
    out = {}
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Vm"):
                    key, _, rest = line.partition(b":")
                    out[key.decode()] = int(rest.split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return out


class LineCounter:
    """Counts the lines of a file that another process appends to, incrementally."""

    def __init__(self, path, needle=None):
        self.path, self.needle, self.offset, self.count, self.tail = path, needle, 0, 0, b""

    def update(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return self.count
        self.offset += len(data)
        if self.needle is None:
            self.count += data.count(b"\n")
        else:
            data = self.tail + data
            lines = data.split(b"\n")
            self.tail = lines.pop()
            self.count += sum(1 for line in lines if self.needle in line)
        return self.count


def run_measured(cmd, timeout, stdout=None, stderr=None, stop_when=None, poll=0.1, env=None,
                 cwd=None):
    """Runs cmd, returns dict(cpu_s, rc, wall_s, rss_kib, hwm_kib, timed_out).

    cpu_s is utime+stime from wait4 (the child and any children it reaped).
    rss_kib/hwm_kib are the last VmRSS/VmHWM read from /proc while it ran.
    stop_when(pid) -> bool: when true, the child gets SIGTERM (then we wait for it).
    """
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=stdout or subprocess.DEVNULL,
                         stderr=stderr or subprocess.DEVNULL,
                         preexec_fn=die_with_parent, env=env, cwd=cwd)
    res = dict(rss_kib=None, hwm_kib=None, timed_out=False, stopped=False)
    sent_term_at = None
    try:
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid == p.pid:
                break
            st = read_status(p.pid)
            if "VmRSS" in st:
                res["rss_kib"], res["hwm_kib"] = st["VmRSS"], st.get("VmHWM")
            now = time.monotonic()
            if sent_term_at is None:
                if stop_when is not None and stop_when(p.pid):
                    res["stopped"] = True
                    p.send_signal(signal.SIGTERM)
                    sent_term_at = now
                elif now - t0 > timeout:
                    res["timed_out"] = True
                    p.send_signal(signal.SIGTERM)
                    sent_term_at = now
            elif now - sent_term_at > 10:
                p.kill()
            time.sleep(poll)
    except BaseException:
        p.kill()
        os.wait4(p.pid, 0)
        p.returncode = -9
        raise
    p.returncode = os.waitstatus_to_exitcode(status)
    res.update(cpu_s=ru.ru_utime + ru.ru_stime, utime_s=ru.ru_utime, stime_s=ru.ru_stime, rc=p.returncode, wall_s=time.monotonic() - t0)
    return res


class IdleProcs:
    """N extra idle processes for the duration of a with-block (bench/idle_procs.c)."""

    def __init__(self, n):
        self.n, self.p = n, None

    def __enter__(self):
        t0 = time.monotonic()
        self.p = subprocess.Popen([os.path.join(BUILD_C, "idle_procs"), str(self.n)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  preexec_fn=die_with_parent)
        line = self.p.stdout.readline().decode().strip()
        if line != f"ready {self.n}":
            self.__exit__(None, None, None)
            raise RuntimeError(f"idle_procs {self.n} failed: {line!r}")
        log(f"{self.n} idle processes ready in {time.monotonic() - t0:.1f} s")
        time.sleep(0.5)  # let the forkers' page-table teardown of COW etc. settle
        return self

    def __exit__(self, *exc):
        if self.p is None:
            return
        self.p.stdin.close()  # end of file: idle_procs kills and reaps every child
        try:
            self.p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.p.terminate()
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.p.kill()  # PR_SET_PDEATHSIG takes the children down
                self.p.wait()
        self.p.stdout.close()
        self.p = None


def count_pids():
    return sum(1 for name in os.listdir("/proc") if name.isdigit())


def sh(cmd, **kw):
    log("$ " + " ".join(shlex.quote(c) for c in cmd))
    subprocess.run(cmd, check=True, cwd=ROOT, **kw)


def cpu_stat_s(pid):
    """utime + stime of a live process from /proc/<pid>/stat, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def cpu_sched_s(pid):
    """CPU time of a live process's threads from schedstat (ns resolution), in seconds."""
    total = 0
    for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            with open(path) as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total / 1e9
