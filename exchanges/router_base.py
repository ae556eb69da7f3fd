"""Binding bookkeeping shared by all exchange types.

:class:`BindingRouter` implements the identity/idempotency part of
:class:`exchanges.base.Router` once; each exchange type only maintains its
routing index through the :meth:`BindingRouter._added` and
:meth:`BindingRouter._removed` hooks and implements :meth:`BindingRouter.route`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from typing import ClassVar

from exchanges.base import Arguments, Destination
from exchanges.binding_table import Binding, BindingTable
from exchanges.identity import copy_arguments

__all__ = ["BindingRouter"]


class BindingRouter(ABC):
    """Abstract base of the built-in routers (see :class:`exchanges.base.Router`)."""

    type_name: ClassVar[str] = ""
    uses_headers: bool = False

    def __init__(self) -> None:
        """Create a router with no bindings."""
        self._table = BindingTable()

    def validate_binding(self, routing_key: str, arguments: Arguments) -> None:
        """Accept any binding; exchange types with constraints override this.

        Args:
            routing_key: The binding key.
            arguments: The binding arguments.
        """
        del routing_key, arguments

    def bind(self, destination: Destination, routing_key: str, arguments: Arguments) -> bool:
        """Add a binding (see :meth:`exchanges.base.Router.bind`).

        Args:
            destination: Where matching messages go.
            routing_key: The binding key.
            arguments: The binding arguments.

        Returns:
            True if added, False if the identical binding existed.
        """
        self.validate_binding(routing_key, arguments)
        binding = self._table.add(destination, routing_key, arguments)
        if binding is None:
            return False
        self._added(binding)
        return True

    def unbind(self, destination: Destination, routing_key: str, arguments: Arguments) -> bool:
        """Remove a binding (see :meth:`exchanges.base.Router.unbind`).

        Args:
            destination: The binding's destination.
            routing_key: The binding key.
            arguments: The binding arguments.

        Returns:
            True if removed, False if absent.
        """
        binding = self._table.remove(destination, routing_key, arguments)
        if binding is None:
            return False
        self._removed(binding)
        return True

    def unbind_all(self, destination: Destination) -> int:
        """Remove every binding to ``destination``.

        Args:
            destination: The destination to forget.

        Returns:
            The number of bindings removed.
        """
        removed = self._table.remove_destination(destination)
        for binding in removed:
            self._removed(binding)
        return len(removed)

    def bindings(self) -> Iterator[tuple[Destination, str, dict[str, object]]]:
        """Iterate over all bindings in creation order.

        Yields:
            ``(destination, routing_key, arguments)`` with a fresh ``arguments`` copy.
        """
        for binding in list(self._table):
            yield binding.destination, binding.routing_key, copy_arguments(binding.arguments)

    def __len__(self) -> int:
        """Return the number of bindings."""
        return len(self._table)

    def __repr__(self) -> str:
        """Return a short description for logs."""
        return f"<{type(self).__name__} bindings={len(self._table)}>"

    @abstractmethod
    def route(self, routing_key: str, headers: Mapping[str, object] | None) -> list[Destination]:
        """Compute the destinations of one message (see :meth:`exchanges.base.Router.route`).

        Args:
            routing_key: The message's routing key.
            headers: The decoded message headers, or None.

        Returns:
            The matching destinations; a shared list the caller must not mutate.
        """

    @abstractmethod
    def _added(self, binding: Binding) -> None:
        """Index a binding that was just added to the table."""

    @abstractmethod
    def _removed(self, binding: Binding) -> None:
        """Un-index a binding that was just removed from the table."""
