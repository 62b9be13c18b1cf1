from abc import abstractmethod

from sonde_plugin import CollectionContext, CollectorBackend


class NetworkCollectorBackend(CollectorBackend):
    name = "network-base"

    @abstractmethod
    def collect(self, level: str, context: CollectionContext) -> list[int]: ...
