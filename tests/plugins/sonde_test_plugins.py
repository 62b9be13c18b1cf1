"""Collectors for sonde's tests: one that behaves, and one for each way a plugin can misbehave.

Used by tests/integration/process_plugins_test.cpp and tests/unit/process_host_test.cpp with
PYTHONPATH set to this directory (``_target_: python:sonde_test_plugins.<Class>``).
"""

import math
import os
import sys
import time

from sonde_plugin import CollectorBackend


class Constant(CollectorBackend):
    """The trivial collector: a constant scalar at every level (measures the round trip)."""

    name = "constant"

    def __init__(self, value=42.0):
        self.value = value

    def collect(self, level, context):
        return self.value


class TickCounter(CollectorBackend):
    """The tick number the host sent, at the system level only; also checks the context."""

    name = "tick-counter"
    wants_context = True

    def devices(self, level):
        return 1 if level == "system" else None

    def collect(self, level, context):
        if context.tick > 0 and context.dt <= 0:
            raise ValueError("dt must be positive after the first tick")
        return context.tick


class ProcessCount(CollectorBackend):
    """Pids of each non-system level from the context; total_pids at the system level."""

    name = "process-count"
    wants_context = True

    def collect(self, level, context):
        if level == "system":
            return context.total_pids
        return len(context.pids.get(level, ()))


class Hang(CollectorBackend):
    """Sleeps forever from its third tick on."""

    name = "hang"

    def __init__(self):
        self.ticks = 0

    def snapshot(self, context):
        self.ticks += 1
        if self.ticks >= 3:
            time.sleep(1e6)

    def collect(self, level, context):
        return 1.0


class Crash(CollectorBackend):
    """Exits (status 3) on its third tick, once: `state_file` remembers that it did, so the
    restarted child keeps working."""

    name = "crash"

    def __init__(self, state_file):
        self.state_file = state_file
        self.ticks = 0

    def snapshot(self, context):
        self.ticks += 1
        if self.ticks == 3 and not os.path.exists(self.state_file):
            with open(self.state_file, "w", encoding="utf-8") as f:
                f.write("crashed\n")
            sys.stderr.write("crashing on purpose\n")
            sys.stderr.flush()
            os._exit(3)

    def collect(self, level, context):
        return 7.0


class Raises(CollectorBackend):
    """Raises in collect on every other tick."""

    name = "raises"

    def collect(self, level, context):
        if context.tick % 2 == 1:
            raise RuntimeError("odd tick {}".format(context.tick))
        return 5.0


class WrongType(CollectorBackend):
    """Returns a string."""

    name = "wrong-type"

    def collect(self, level, context):
        return "not a number"


class WrongLength(CollectorBackend):
    """Returns 3 counters where the handler has 4 columns."""

    name = "wrong-length"

    def collect(self, level, context):
        return [1, 2, 3]


class ReturnsNaN(CollectorBackend):
    """Returns NaN."""

    name = "returns-nan"

    def collect(self, level, context):
        return math.nan


class Slow(CollectorBackend):
    """Takes `seconds` (default 0.4 s) per tick."""

    name = "slow"

    def __init__(self, seconds=0.4):
        self.seconds = seconds

    def snapshot(self, context):
        time.sleep(self.seconds)

    def collect(self, level, context):
        return 3.0


class Prints(CollectorBackend):
    """Prints to stdout and stderr (both must reach sonde's stderr, not the protocol)."""

    name = "prints"

    def collect(self, level, context):
        print("hello from print at tick", context.tick)
        sys.stderr.write("hello from stderr\n")
        return 1.0


class NeedsArgs(CollectorBackend):
    """Takes keyword arguments and node_info."""

    name = "needs-args"

    def __init__(self, scale, node_info, offset=0):
        self.scale = scale
        self.offset = offset
        self.cpus = node_info.num_cpus

    def collect(self, level, context):
        return self.scale * self.cpus + self.offset


class FailsSetup(CollectorBackend):
    """Refuses to start."""

    name = "fails-setup"

    def setup(self):
        raise RuntimeError("no such device")

    def collect(self, level, context):
        return 0.0
