"""Fanout exchange: every bound destination gets every message."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from exchanges.base import Destination
from exchanges.binding_table import Binding
from exchanges.destinations import DestinationSet
from exchanges.router_base import BindingRouter

__all__ = ["FanoutRouter"]


class FanoutRouter(BindingRouter):
    """Router of ``fanout`` exchanges; binding keys and arguments are ignored."""

    type_name: ClassVar[str] = "fanout"
    uses_headers = False

    def __init__(self) -> None:
        """Create a router with no bindings."""
        super().__init__()
        self._destinations = DestinationSet()

    def route(self, routing_key: str, headers: Mapping[str, object] | None) -> list[Destination]:
        """Return every bound destination.

        Args:
            routing_key: Ignored.
            headers: Ignored.

        Returns:
            A shared list in first-bound order; callers must not mutate it.
        """
        return self._destinations.snapshot()

    def _added(self, binding: Binding) -> None:
        self._destinations.add(binding.destination)

    def _removed(self, binding: Binding) -> None:
        self._destinations.release(binding.destination)
