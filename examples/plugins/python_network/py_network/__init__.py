from py_network.common import NetworkCollectorBackend

__all__ = ["NetworkCollectorBackend"]
