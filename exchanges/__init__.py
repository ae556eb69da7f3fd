"""Pure message routing for amqpd exchanges (direct, fanout, topic, headers).

The broker core creates one router per exchange with :func:`create_router`,
feeds it bind/unbind calls and asks :meth:`Router.route` for each message's
destinations. Standard library only; no I/O; not thread-safe.
"""

from __future__ import annotations

from exchanges.base import Arguments, Destination, InvalidBinding, Router
from exchanges.direct import DirectRouter
from exchanges.fanout import FanoutRouter
from exchanges.headers import HeadersRouter
from exchanges.registry import EXCHANGE_TYPES, UnknownExchangeType, create_router
from exchanges.topic import TopicRouter

__all__ = [
    "EXCHANGE_TYPES",
    "Arguments",
    "Destination",
    "DirectRouter",
    "FanoutRouter",
    "HeadersRouter",
    "InvalidBinding",
    "Router",
    "TopicRouter",
    "UnknownExchangeType",
    "create_router",
]
