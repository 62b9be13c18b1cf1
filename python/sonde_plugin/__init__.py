"""sonde_plugin: write sonde collectors in Python.

A collector is a class with the shape JUmPER users know::

    from sonde_plugin import CollectorBackend, CollectionContext

    class LoadCollector(CollectorBackend):
        name = "load"

        def collect(self, level: str, context: CollectionContext) -> float:
            with open("/proc/loadavg") as f:
                return float(f.read().split()[0])

registered in sonde's YAML as ``_target_: python:my_module.LoadCollector``. sonde starts
``python -m sonde_plugin.runner my_module.LoadCollector`` once, as a persistent child process, and
talks to it over the JSON-lines protocol of docs/plugin-protocol.md. Pure Python, standard library
only.
"""

from sonde_plugin.backend import CollectorBackend
from sonde_plugin.context import CollectionContext, NodeInfo, ProcInfo

__all__ = ["CollectorBackend", "CollectionContext", "NodeInfo", "ProcInfo"]
