"""``x-delayed-message`` exchanges (the rabbitmq_delayed_message_exchange plugin's interface).

The exchange routes like the type named by its ``x-delayed-type`` argument (direct, topic,
fanout, headers); a message published with an ``x-delay`` header of a positive number of
milliseconds is held by the broker until then and routed when its delay ends. This module
is the pure part: the router (which delegates every binding and every route to the inner
type's router), the declaration check with the plugin's reply texts, and the reading of
``x-delay`` as the plugin reads it. Holding messages is the broker's (amqpd/model/delayed.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from decimal import Decimal
from typing import ClassVar, Final

from exchanges.base import Arguments, Destination, Router

__all__ = [
    "DELAYED_TYPE",
    "DELAYED_TYPE_ARG",
    "DELAY_HEADER",
    "MAX_DELAY_MS",
    "DelayedRouter",
    "argument_problem",
    "create_delayed_router",
    "delay_of",
    "delayed_type",
]

DELAYED_TYPE: Final = "x-delayed-message"
DELAYED_TYPE_ARG: Final = "x-delayed-type"
DELAY_HEADER: Final = "x-delay"
# The plugin delays only 0 < x-delay <= 2^32 - 1 ms (an Erlang timer's limit); a longer
# delay is routed at once, as there.
MAX_DELAY_MS: Final = 4294967295
MISSING_TYPE: Final = "Invalid argument, 'x-delayed-type' must be an existing exchange type"
SELF_TYPE: Final = "Invalid argument, 'x-delayed-message' can't be used for 'x-delayed-type'"


def delayed_type(arguments: Arguments | None) -> str | None:
    """The ``x-delayed-type`` argument as text, or None when absent or not a string."""
    value = (arguments or {}).get(DELAYED_TYPE_ARG)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def argument_problem(arguments: Arguments | None, known_types: frozenset[str]) -> tuple[bool, str]:
    """The plugin's refusal of a declaration's arguments: ``(False, "")`` when acceptable,
    ``(True, text)`` for a channel error 406 PRECONDITION_FAILED, ``(False, text)`` for
    RabbitMQ's connection error 503 COMMAND_INVALID "unknown exchange type 'foo'"
    (``rabbit_exchange:check_type`` on the inner type)."""
    inner = delayed_type(arguments)
    if inner is None:
        return True, MISSING_TYPE
    if inner == DELAYED_TYPE:
        return True, SELF_TYPE
    if inner not in known_types:
        return False, f"unknown exchange type '{inner}'"
    return False, ""


def delay_of(headers: Mapping[str, object] | None) -> int | None:
    """The delay in milliseconds a message asks for, or None to route it at once.

    As the plugin's ``get_delay``: an integer header counts as it is, a string is read as
    an integer (``"5000"``), a float is truncated; any other type, a string that is not a
    number, zero, a negative delay or one over `MAX_DELAY_MS` routes at once.
    """
    if not headers:
        return None
    value = headers.get(DELAY_HEADER)
    delay: int
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        delay = value
    elif isinstance(value, float | Decimal):
        if not math.isfinite(value):
            return None
        delay = int(value)
    elif isinstance(value, str | bytes):
        try:
            delay = int(value.strip())
        except ValueError:
            return None
    else:
        return None
    return delay if 0 < delay <= MAX_DELAY_MS else None


class DelayedRouter:
    """Router of ``x-delayed-message`` exchanges: the inner type's router under another name.

    Every binding and every route goes to ``inner``; the delay itself is decided before
    routing (a delayed message is routed through this router when its delay ends).
    """

    type_name: ClassVar[str] = DELAYED_TYPE

    def __init__(self, inner: Router) -> None:
        """Wrap the router of the ``x-delayed-type`` exchange type."""
        self.inner = inner
        self.uses_headers = inner.uses_headers

    def validate_binding(self, routing_key: str, arguments: Arguments) -> None:
        """The inner type's check."""
        self.inner.validate_binding(routing_key, arguments)

    def bind(self, destination: Destination, routing_key: str, arguments: Arguments) -> bool:
        """Bind on the inner router."""
        return self.inner.bind(destination, routing_key, arguments)

    def unbind(self, destination: Destination, routing_key: str, arguments: Arguments) -> bool:
        """Unbind on the inner router."""
        return self.inner.unbind(destination, routing_key, arguments)

    def unbind_all(self, destination: Destination) -> int:
        """Forget a destination on the inner router."""
        return self.inner.unbind_all(destination)

    def bindings(self) -> Iterator[tuple[Destination, str, dict[str, object]]]:
        """The inner router's bindings."""
        return self.inner.bindings()

    def __len__(self) -> int:
        """The number of bindings."""
        return len(self.inner)

    def route(self, routing_key: str, headers: Mapping[str, object] | None) -> list[Destination]:
        """Route as the inner type does."""
        return self.inner.route(routing_key, headers)


def create_delayed_router(
    arguments: Arguments | None, create: Callable[[str, Arguments | None], Router]
) -> DelayedRouter:
    """A delayed router around a new router of the ``x-delayed-type`` type (direct when the
    argument is missing or not usable: the declaration is refused before that matters)."""
    inner = delayed_type(arguments)
    if inner is None or inner == DELAYED_TYPE:
        inner = "direct"
    return DelayedRouter(create(inner, arguments))
