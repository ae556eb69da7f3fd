"""The built-in exchange types and a factory for their routers."""

from __future__ import annotations

from collections.abc import Callable

from exchanges.base import Arguments, Router
from exchanges.delayed import DELAYED_TYPE, create_delayed_router
from exchanges.direct import DirectRouter
from exchanges.fanout import FanoutRouter
from exchanges.federation_upstream import FederationUpstreamRouter
from exchanges.headers import HeadersRouter
from exchanges.topic import TopicRouter

__all__ = ["EXCHANGE_TYPES", "UnknownExchangeType", "create_router"]

_FACTORIES: dict[str, Callable[[], Router]] = {
    DirectRouter.type_name: DirectRouter,
    FanoutRouter.type_name: FanoutRouter,
    TopicRouter.type_name: TopicRouter,
    HeadersRouter.type_name: HeadersRouter,
}

EXCHANGE_TYPES: frozenset[str] = frozenset(
    (*_FACTORIES, FederationUpstreamRouter.type_name, DELAYED_TYPE)
)
"""Names of the supported exchange types: direct, fanout, topic, headers,
x-federation-upstream (the helper of federation links, configured by its arguments) and
x-delayed-message (routes as its x-delayed-type argument says; exchanges/delayed.py)."""


class UnknownExchangeType(ValueError):
    """Raised by :func:`create_router` for an unsupported exchange type.

    Attributes:
        type_name: The rejected type name.
    """

    def __init__(self, type_name: str) -> None:
        """Record the rejected type name.

        Args:
            type_name: The exchange type that is not supported.
        """
        super().__init__(f"unknown exchange type '{type_name}'")
        self.type_name = type_name


def create_router(type_name: str, arguments: Arguments | None = None) -> Router:
    """Create an empty router for an exchange of type ``type_name``.

    Args:
        type_name: One of :data:`EXCHANGE_TYPES` (case-sensitive, as in RabbitMQ).
        arguments: The exchange's declaration arguments (read by x-federation-upstream).

    Returns:
        A new router with no bindings.

    Raises:
        UnknownExchangeType: If ``type_name`` is not a supported type.
    """
    if type_name == FederationUpstreamRouter.type_name:
        return FederationUpstreamRouter(arguments)
    if type_name == DELAYED_TYPE:
        return create_delayed_router(arguments, create_router)
    factory = _FACTORIES.get(type_name)
    if factory is None:
        raise UnknownExchangeType(type_name)
    return factory()
