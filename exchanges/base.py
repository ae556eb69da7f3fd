"""Shared vocabulary of the routing package: destinations, the router protocol, errors.

Every exchange type implements :class:`Router`. The broker core owns exchanges,
queues and persistence; a router only answers "which destinations does this
message go to?" for one exchange. Routers are plain in-memory objects, are not
thread-safe and perform no I/O.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from typing import ClassVar, Protocol, TypeAlias, runtime_checkable

__all__ = ["Arguments", "Destination", "InvalidBinding", "Router"]

Destination: TypeAlias = Hashable
"""Opaque, hashable identifier of a binding target (the broker uses e.g. ``("queue", name)``)."""

Arguments: TypeAlias = Mapping[str, object]
"""A binding's ``arguments`` field table, as decoded by the broker."""


class InvalidBinding(ValueError):
    """Raised when a binding's routing key or arguments are not acceptable.

    The message text mirrors RabbitMQ's, so the broker can put it verbatim into a
    ``PRECONDITION_FAILED`` channel close.
    """


@runtime_checkable
class Router(Protocol):
    """Routing table of one exchange.

    Binding identity is ``(destination, routing_key, arguments)``, exactly as in
    RabbitMQ: two bindings that differ only in their arguments are distinct.
    Arguments are compared by value, with AMQP types kept apart (``1``, ``1.0``
    and ``True`` are different argument values).

    Attributes:
        type_name: The exchange type, e.g. ``"topic"``.
        uses_headers: True only when :meth:`route` reads message headers; the
            broker decodes message headers only in that case.
    """

    type_name: ClassVar[str]
    uses_headers: bool

    def validate_binding(self, routing_key: str, arguments: Arguments) -> None:
        """Check that a binding could be added, without adding it.

        Args:
            routing_key: The binding key.
            arguments: The binding arguments.

        Raises:
            InvalidBinding: If the binding is not acceptable for this exchange type.
        """
        ...

    def bind(self, destination: Destination, routing_key: str, arguments: Arguments) -> bool:
        """Add a binding.

        Args:
            destination: Where matching messages go.
            routing_key: The binding key.
            arguments: The binding arguments (copied; later changes are not seen).

        Returns:
            True if the binding was added, False if the identical binding existed.

        Raises:
            InvalidBinding: If :meth:`validate_binding` rejects the binding.
        """
        ...

    def unbind(self, destination: Destination, routing_key: str, arguments: Arguments) -> bool:
        """Remove a binding.

        Args:
            destination: The binding's destination.
            routing_key: The binding key.
            arguments: The binding arguments.

        Returns:
            True if the binding was removed, False if it did not exist.
        """
        ...

    def unbind_all(self, destination: Destination) -> int:
        """Remove every binding to ``destination`` (e.g. when a queue is deleted).

        Args:
            destination: The destination to forget.

        Returns:
            The number of bindings removed.
        """
        ...

    def bindings(self) -> Iterator[tuple[Destination, str, dict[str, object]]]:
        """Iterate over all bindings in creation order.

        Yields:
            ``(destination, routing_key, arguments)``; ``arguments`` is a fresh copy.
        """
        ...

    def __len__(self) -> int:
        """Return the number of bindings."""
        ...

    def route(self, routing_key: str, headers: Mapping[str, object] | None) -> list[Destination]:
        """Compute the destinations of one message.

        Args:
            routing_key: The message's routing key.
            headers: The decoded message headers (None when absent); only read
                when :attr:`uses_headers` is True.

        Returns:
            The matching destinations, each once, in a deterministic order
            (by when the destination was first bound). The list may be shared
            with the router's caches: callers must not mutate it. A list
            returned earlier is never changed by later bind/unbind calls.
        """
        ...
