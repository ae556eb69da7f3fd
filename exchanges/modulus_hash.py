"""``x-modulus-hash`` exchange: rabbitmq_sharding's (in RabbitMQ's core since 4.3).

A message goes to one bound destination: the hash of its routing key modulo the number of
bound destinations picks one, in first-bound order. The same key always reaches the same
destination while the bindings stay the same, keys spread evenly, binding keys and
arguments are ignored (a destination bound twice counts once), and with no bindings the
message is unroutable. Unlike ``x-consistent-hash``, adding or removing a binding moves
most keys: that is the price of its simplicity, as in the plugin.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Final

from exchanges.base import Destination
from exchanges.binding_table import Binding
from exchanges.destinations import DestinationSet
from exchanges.hash_ring import key_hash
from exchanges.router_base import BindingRouter

__all__ = ["ModulusHashRouter"]

_CACHE_LIMIT: Final = 4096


class ModulusHashRouter(BindingRouter):
    """Router of ``x-modulus-hash`` exchanges (see the module comment)."""

    type_name: ClassVar[str] = "x-modulus-hash"
    uses_headers = False

    def __init__(self) -> None:
        """Create a router with no bindings."""
        super().__init__()
        self._destinations = DestinationSet()
        self._singles: list[list[Destination]] = []
        self._cache: dict[str, list[Destination]] = {}

    def route(self, routing_key: str, headers: Mapping[str, object] | None) -> list[Destination]:
        """The destination picked by ``hash(routing_key) mod bindings`` ([] without any).

        Args:
            routing_key: The message's routing key.
            headers: Ignored.

        Returns:
            A shared one-element list (or an empty one); callers must not mutate it.
        """
        found = self._cache.get(routing_key)
        if found is not None:
            return found
        singles = self._singles
        if not singles:
            return []
        found = singles[key_hash(routing_key.encode()) % len(singles)]
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[routing_key] = found
        return found

    def _added(self, binding: Binding) -> None:
        if self._destinations.add(binding.destination):
            self._changed()

    def _removed(self, binding: Binding) -> None:
        if self._destinations.release(binding.destination):
            self._changed()

    def _changed(self) -> None:
        self._singles = [[destination] for destination in self._destinations.snapshot()]
        self._cache.clear()
