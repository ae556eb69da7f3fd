"""The set of bindings of one exchange, indexed by identity and by destination."""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass

from exchanges.base import Destination
from exchanges.identity import arguments_key, copy_arguments

__all__ = ["Binding", "BindingId", "BindingTable"]

BindingId = tuple[Destination, str, Hashable]
"""``(destination, routing_key, arguments key)``: what makes a binding unique."""


@dataclass(frozen=True, slots=True, eq=False)
class Binding:
    """One binding, as stored by a router.

    Attributes:
        destination: Where matching messages go.
        routing_key: The binding key.
        arguments: A private copy of the binding arguments; never mutate it.
        identity: The binding's :data:`BindingId`.
    """

    destination: Destination
    routing_key: str
    arguments: dict[str, object]
    identity: BindingId


class BindingTable:
    """Bindings in creation order, with a per-destination index for bulk removal."""

    __slots__ = ("_bindings", "_by_destination")

    def __init__(self) -> None:
        """Create an empty table."""
        self._bindings: dict[BindingId, Binding] = {}
        # destination -> ordered set of its binding ids
        self._by_destination: dict[Destination, dict[BindingId, None]] = {}

    @staticmethod
    def identity(
        destination: Destination, routing_key: str, arguments: Mapping[str, object]
    ) -> BindingId:
        """Compute the identity of a binding.

        Args:
            destination: The binding's destination.
            routing_key: The binding key.
            arguments: The binding arguments.

        Returns:
            The binding's identity tuple.
        """
        return (destination, routing_key, arguments_key(arguments))

    def add(
        self, destination: Destination, routing_key: str, arguments: Mapping[str, object]
    ) -> Binding | None:
        """Add a binding unless the identical one exists.

        Args:
            destination: The binding's destination.
            routing_key: The binding key.
            arguments: The binding arguments (deep-copied).

        Returns:
            The new binding, or None if it already existed.
        """
        identity = self.identity(destination, routing_key, arguments)
        if identity in self._bindings:
            return None
        binding = Binding(destination, routing_key, copy_arguments(arguments), identity)
        self._bindings[identity] = binding
        self._by_destination.setdefault(destination, {})[identity] = None
        return binding

    def remove(
        self, destination: Destination, routing_key: str, arguments: Mapping[str, object]
    ) -> Binding | None:
        """Remove a binding.

        Args:
            destination: The binding's destination.
            routing_key: The binding key.
            arguments: The binding arguments.

        Returns:
            The removed binding, or None if it did not exist.
        """
        identity = self.identity(destination, routing_key, arguments)
        binding = self._bindings.pop(identity, None)
        if binding is None:
            return None
        owned = self._by_destination[destination]
        del owned[identity]
        if not owned:
            del self._by_destination[destination]
        return binding

    def remove_destination(self, destination: Destination) -> list[Binding]:
        """Remove every binding to ``destination``.

        Args:
            destination: The destination.

        Returns:
            The removed bindings, in creation order.
        """
        owned = self._by_destination.pop(destination, None)
        if owned is None:
            return []
        return [self._bindings.pop(identity) for identity in owned]

    def __iter__(self) -> Iterator[Binding]:
        """Iterate over the bindings in creation order."""
        return iter(self._bindings.values())

    def __len__(self) -> int:
        """Return the number of bindings."""
        return len(self._bindings)
