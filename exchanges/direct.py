"""Direct exchange: a message goes to the bindings whose key equals its routing key."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from exchanges.base import Destination
from exchanges.binding_table import Binding
from exchanges.destinations import DestinationSet
from exchanges.router_base import BindingRouter

__all__ = ["DirectRouter"]


class DirectRouter(BindingRouter):
    """Router of ``direct`` exchanges: exact, case-sensitive routing-key match.

    Routing is one dict lookup; the result list is cached per key.
    """

    type_name: ClassVar[str] = "direct"
    uses_headers = False

    def __init__(self) -> None:
        """Create a router with no bindings."""
        super().__init__()
        self._by_key: dict[str, DestinationSet] = {}

    def route(self, routing_key: str, headers: Mapping[str, object] | None) -> list[Destination]:
        """Return the destinations bound with exactly ``routing_key``.

        Args:
            routing_key: The message's routing key.
            headers: Ignored.

        Returns:
            A shared list in first-bound order; callers must not mutate it.
        """
        destinations = self._by_key.get(routing_key)
        if destinations is None:
            return []
        return destinations.snapshot()

    def _added(self, binding: Binding) -> None:
        destinations = self._by_key.get(binding.routing_key)
        if destinations is None:
            destinations = self._by_key[binding.routing_key] = DestinationSet()
        destinations.add(binding.destination)

    def _removed(self, binding: Binding) -> None:
        destinations = self._by_key[binding.routing_key]
        destinations.release(binding.destination)
        if not destinations:
            del self._by_key[binding.routing_key]
