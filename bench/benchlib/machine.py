"""The machine and the source a result was measured on."""
import os
import platform
import subprocess

from benchlib.paths import ROOT


def source_rev():
    """The commit sonde was built from, '+dirty' if the tree has local changes."""
    try:
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "src",
                                "include", "CMakeLists.txt"], capture_output=True,
                               text=True).stdout.strip()
        return rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "?"


def machine_info():
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    total = None
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                total = int(line.split()[1])
    return dict(nproc=os.cpu_count() and len(os.sched_getaffinity(0)), model=model,
                kernel=platform.release(), mem_total_kib=total, hostname=platform.node(),
                pid_max=int(open("/proc/sys/kernel/pid_max").read()))
