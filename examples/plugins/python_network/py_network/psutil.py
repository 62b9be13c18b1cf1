import psutil

from sonde_plugin import CollectionContext
from py_network.common import NetworkCollectorBackend


class PsutilNetworkCollector(NetworkCollectorBackend):
    """System-wide network I/O via psutil.

    psutil does not expose per-process network counters on Linux without root,
    so only the 'system' level returns real data; other levels report zeros.
    """
    name = "network-psutil"

    def collect(self, level: str, context: CollectionContext) -> list[int]:
        if level == "system":
            net = psutil.net_io_counters()
            if net:
                return [net.bytes_sent, net.bytes_recv,
                        net.packets_sent, net.packets_recv]
        return [0, 0, 0, 0]
