"""Headers exchange: routing on message header values (``x-match`` patterns)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from exchanges.base import Arguments, Destination
from exchanges.binding_table import Binding, BindingId
from exchanges.headers_match import HeadersPattern, validate_x_match
from exchanges.router_base import BindingRouter

__all__ = ["HeadersRouter"]

_NO_HEADERS: Mapping[str, object] = {}


class HeadersRouter(BindingRouter):
    """Router of ``headers`` exchanges; the routing key is ignored.

    Every binding is tested against every message (as RabbitMQ does); binding
    patterns are pre-compiled so a test is a few dict lookups.
    """

    type_name: ClassVar[str] = "headers"
    uses_headers = True

    def __init__(self) -> None:
        """Create a router with no bindings."""
        super().__init__()
        self._patterns: dict[BindingId, tuple[Destination, HeadersPattern]] = {}

    def validate_binding(self, routing_key: str, arguments: Arguments) -> None:
        """Reject bindings with a bad ``x-match`` argument.

        Args:
            routing_key: Ignored by headers exchanges.
            arguments: The binding arguments.

        Raises:
            InvalidBinding: If ``x-match`` is not all, any, all-with-x or any-with-x.
        """
        validate_x_match(arguments)

    def route(self, routing_key: str, headers: Mapping[str, object] | None) -> list[Destination]:
        """Return the destinations whose binding patterns match ``headers``.

        Args:
            routing_key: Ignored.
            headers: The decoded message headers; None is treated as empty.

        Returns:
            A new list, in the creation order of the first matching binding.
        """
        if headers is None:
            headers = _NO_HEADERS
        result: list[Destination] = []
        seen: set[Destination] = set()
        for destination, pattern in self._patterns.values():
            if destination not in seen and pattern.matches(headers):
                seen.add(destination)
                result.append(destination)
        return result

    def _added(self, binding: Binding) -> None:
        pattern = HeadersPattern.compile(binding.arguments)
        self._patterns[binding.identity] = (binding.destination, pattern)

    def _removed(self, binding: Binding) -> None:
        del self._patterns[binding.identity]
