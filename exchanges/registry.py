"""The built-in exchange types and a factory for their routers."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

from exchanges import consistent_hash, federation_upstream
from exchanges.base import Arguments, Router
from exchanges.consistent_hash import ConsistentHashRouter
from exchanges.delayed import DELAYED_TYPE, create_delayed_router
from exchanges.direct import DirectRouter
from exchanges.fanout import FanoutRouter
from exchanges.federation_upstream import FederationUpstreamRouter
from exchanges.headers import HeadersRouter
from exchanges.modulus_hash import ModulusHashRouter
from exchanges.topic import TopicRouter

__all__ = ["EXCHANGE_TYPES", "UnknownExchangeType", "create_router", "declaration_problem"]

_Check: TypeAlias = Callable[[Arguments | None], str | None]

_FACTORIES: dict[str, Callable[[], Router]] = {
    DirectRouter.type_name: DirectRouter,
    FanoutRouter.type_name: FanoutRouter,
    TopicRouter.type_name: TopicRouter,
    HeadersRouter.type_name: HeadersRouter,
    ModulusHashRouter.type_name: ModulusHashRouter,
}
# Types whose router is configured by the exchange's arguments, with their declaration check.
_CONFIGURED: dict[str, tuple[Callable[[Arguments | None], Router], _Check]] = {
    FederationUpstreamRouter.type_name: (
        FederationUpstreamRouter,
        federation_upstream.argument_problem,
    ),
    ConsistentHashRouter.type_name: (ConsistentHashRouter, consistent_hash.argument_problem),
}

EXCHANGE_TYPES: frozenset[str] = frozenset((*_FACTORIES, *_CONFIGURED, DELAYED_TYPE))
"""Names of the supported exchange types: direct, fanout, topic, headers, x-consistent-hash,
x-modulus-hash, x-federation-upstream (the helper of federation links, configured by its
arguments) and x-delayed-message (routes as its x-delayed-type argument says;
exchanges/delayed.py)."""


def declaration_problem(type_name: str, arguments: Arguments | None) -> str | None:
    """Why RabbitMQ refuses to create an exchange of ``type_name`` with these arguments
    (the text of a 406 PRECONDITION_FAILED), or None when they are acceptable."""
    configured = _CONFIGURED.get(type_name)
    return None if configured is None else configured[1](arguments)


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
    if type_name == DELAYED_TYPE:
        return create_delayed_router(arguments, create_router)
    configured = _CONFIGURED.get(type_name)
    if configured is not None:
        return configured[0](arguments)
    factory = _FACTORIES.get(type_name)
    if factory is None:
        raise UnknownExchangeType(type_name)
    return factory()
