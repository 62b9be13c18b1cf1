#!/usr/bin/python3
"""A process view in Python over psutil, as gpustat and nvitop build theirs: the yardstick for
`sonde top` in bench/top/run. Each refresh takes every process's CPU percent, memory, I/O
counters, command line and user name (psutil's process_iter with those attributes, as nvitop's
host panel does), the GPUs' name, utilisation, memory and compute processes through NVML (ctypes,
as pynvml calls it; the fake library of the test suite in the bench), sorts by CPU and draws the
rows that fit the terminal.

Usage: psutil_view.py [--interval SECONDS] [--count-file PATH]

--count-file: the number of refreshes done so far is written there after each one.
"""
import argparse
import ctypes
import os
import shutil
import sys
import time

import psutil


class Nvml:
    """The few NVML calls a GPU view makes, through ctypes (pynvml's way)."""

    class Memory(ctypes.Structure):
        _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                    ("used", ctypes.c_ulonglong)]

    class Utilization(ctypes.Structure):
        _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]

    class ProcessInfo(ctypes.Structure):  # nvmlProcessInfo_t (_v2/_v3 calls)
        _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                    ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        if self.lib.nvmlInit_v2() != 0:
            raise RuntimeError("nvmlInit failed")
        n = ctypes.c_uint(0)
        self.lib.nvmlDeviceGetCount_v2(ctypes.byref(n))
        self.handles = []
        for i in range(n.value):
            h = ctypes.c_void_p()
            self.lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h))
            self.handles.append(h)

    def devices(self):
        out = []
        for h in self.handles:
            name = ctypes.create_string_buffer(96)
            self.lib.nvmlDeviceGetName(h, name, 96)
            mem, util = self.Memory(), self.Utilization()
            self.lib.nvmlDeviceGetMemoryInfo(h, ctypes.byref(mem))
            util_ok = self.lib.nvmlDeviceGetUtilizationRates(h, ctypes.byref(util)) == 0
            count = ctypes.c_uint(0)
            self.lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(count), None)
            infos = (self.ProcessInfo * (count.value + 8))()
            count = ctypes.c_uint(count.value + 8)
            procs = []
            if self.lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(count), infos) == 0:
                procs = [(infos[i].pid, infos[i].usedGpuMemory) for i in range(count.value)]
            out.append((name.value.decode(), util.gpu if util_ok else None, mem.used, mem.total,
                        procs))
        return out


ATTRS = ["pid", "username", "cpu_percent", "memory_info", "io_counters", "cmdline", "name"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--count-file")
    args = ap.parse_args()
    nvml = None
    lib = os.environ.get("SONDE_NVML_LIBRARY")
    if lib:
        nvml = Nvml(lib)
    prev_io = {}
    refreshes = 0
    while True:
        t0 = time.monotonic()
        cols, rows = shutil.get_terminal_size((120, 50))
        lines = [f"psutil view  {time.strftime('%c')}  {len(psutil.pids())} processes"]
        cpu = psutil.cpu_percent(percpu=True)
        lines.append("  ".join(f"{i:>2}[{c:5.1f}%]" for i, c in enumerate(cpu)))
        vm = psutil.virtual_memory()
        lines.append(f"Mem {vm.used >> 20} / {vm.total >> 20} MiB")
        gpu_mem = {}
        if nvml:
            for i, (name, util, used, total, procs) in enumerate(nvml.devices()):
                u = "n/a" if util is None else f"{util:3d}%"
                lines.append(f"[{i}] {name}  util {u}  mem {used >> 20}/{total >> 20} MiB  "
                             f"{len(procs)} procs")
                for pid, m in procs:
                    gpu_mem[pid] = gpu_mem.get(pid, 0) + m
        table = []
        for p in psutil.process_iter(ATTRS, ad_value=None):
            info = p.info
            io = info["io_counters"]
            rate = None
            if io is not None:
                last = prev_io.get(info["pid"])
                if last is not None:
                    rate = (io.read_bytes - last[0] + io.write_bytes - last[1]) / args.interval
                prev_io[info["pid"]] = (io.read_bytes, io.write_bytes)
            rss = info["memory_info"].rss if info["memory_info"] else 0
            cmd = " ".join(info["cmdline"] or []) or f"[{info['name']}]"
            table.append((info["cpu_percent"] or 0.0, info["pid"], info["username"] or "?", rss,
                          rate, gpu_mem.get(info["pid"]), cmd))
        table.sort(key=lambda r: (-r[0], r[1]))
        lines.append(f"{'PID':>7} {'USER':<10} {'CPU%':>6} {'MEM':>8} {'IO/s':>8} {'GPUMEM':>8} "
                     "COMMAND")
        for cpu_p, pid, user, rss, rate, gmem, cmd in table[:max(0, rows - len(lines) - 1)]:
            r = "-" if rate is None else f"{rate / 1024:.0f}K"
            g = "" if gmem is None else f"{gmem >> 20}M"
            lines.append(f"{pid:>7} {user[:10]:<10} {cpu_p:6.1f} {rss >> 20:7d}M {r:>8} {g:>8} "
                         f"{cmd}")
        sys.stdout.write("\x1b[H\x1b[2J" + "\n".join(line[:cols] for line in lines))
        sys.stdout.flush()
        refreshes += 1
        if args.count_file:
            with open(args.count_file, "w") as f:
                f.write(str(refreshes))
        time.sleep(max(0.0, args.interval - (time.monotonic() - t0)))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
