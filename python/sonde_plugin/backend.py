"""The base class of Python collectors."""

import abc


class CollectorBackend(abc.ABC):
    """One metric group. sonde calls, in order: the constructor (with the YAML entry's keyword
    arguments and the injected values it asked for, as keyword arguments), ``setup()`` once,
    then per tick ``snapshot(context)`` once and ``collect(level, context)`` for each level it
    samples, and ``teardown()`` at the end.

    ``collect`` returns the raw value the entry's handler expects:

    ============================================  ===================================
    handler                                       return
    ============================================  ===================================
    ``ScalarHandler``                             a number
    ``PerDeviceAggregateHandler``                 a list of numbers (None: not measured)
    ``PerDeviceMultiAggregateHandler``            a list (or tuple) of such lists
    ``CumulativeRateHandler``                     a list of cumulative counters
    ``NoOpHandler``                               None
    ============================================  ===================================

    An exception (or a NaN, or a value of the wrong shape) makes that tick's value missing
    (NaN) and is counted by sonde; the collector keeps running.
    """

    #: Shown in messages.
    name = "collector"
    #: Set to True to receive the pid set of each level in ``context.pids`` every tick.
    wants_context = False
    #: Order among collectors (core is 0, lower first).
    priority = 0

    def setup(self):
        """Called once before the first tick; may return metadata (a JSON-able dict)."""
        return None

    def devices(self, level):
        """Entries of per-device values at ``level`` (1 for scalars and counters), or None when
        the collector has no value at that level."""
        return 1

    def snapshot(self, context):
        """Shared work, once per tick before the collect calls of that tick."""

    @abc.abstractmethod
    def collect(self, level, context):
        """The raw value for one level ("process", "user", "slurm" or "system")."""

    def teardown(self):
        """Called once when sonde stops."""
