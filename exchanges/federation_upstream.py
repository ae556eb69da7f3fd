"""``x-federation-upstream`` exchange: the helper a federation link declares on its upstream.

A fanout exchange (RabbitMQ's rabbit_federation_upstream_exchange) that drops a message
its downstream must not get: one that already made ``x-max-hops`` hops (its
``x-received-from`` header lists that many brokers), or one that came from the
downstream itself (an entry names the ``x-downstream-name`` cluster and the
``x-downstream-vhost`` vhost). The link binds the federated exchange to it with the
downstream's binding keys and consumes from a queue bound to it, so an amqpd broker can be
the upstream of any federating broker, RabbitMQ's plugin included.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Final

from exchanges.base import Arguments, Destination
from exchanges.fanout import FanoutRouter

__all__ = [
    "MAX_HOPS_ARG",
    "ROUTING_HEADER",
    "FederationUpstreamRouter",
    "argument_problem",
    "should_forward",
]

MAX_HOPS_ARG: Final = "x-max-hops"
DOWNSTREAM_NAME_ARG: Final = "x-downstream-name"
DOWNSTREAM_VHOST_ARG: Final = "x-downstream-vhost"
ROUTING_HEADER: Final = "x-received-from"


def argument_problem(arguments: Arguments | None) -> str | None:
    """RabbitMQ's refusal of the declaration's arguments (a 406 text), or None."""
    value = (arguments or {}).get(MAX_HOPS_ARG)
    if value is None:
        return f"Argument {MAX_HOPS_ARG} missing"
    if isinstance(value, bool) or not isinstance(value, int):
        return f"Argument {MAX_HOPS_ARG} must be of type long"
    return None


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def should_forward(
    headers: Mapping[str, object] | None,
    max_hops: int,
    downstream_name: str | None,
    downstream_vhost: str | None,
) -> bool:
    """rabbit_federation_util:should_forward: fewer than ``max_hops`` entries in the
    message's ``x-received-from`` and none naming this downstream (cluster and vhost)."""
    if not headers:
        return True
    received = headers.get(ROUTING_HEADER)
    if not isinstance(received, list):
        return True
    if len(received) >= max_hops:
        return False
    for entry in received:
        if (
            isinstance(entry, Mapping)
            and _text(entry.get("cluster-name")) == downstream_name
            and _text(entry.get("vhost")) == downstream_vhost
        ):
            return False
    return True


class FederationUpstreamRouter(FanoutRouter):
    """Router of ``x-federation-upstream`` exchanges (see the module comment)."""

    type_name: ClassVar[str] = "x-federation-upstream"
    uses_headers = True

    def __init__(self, arguments: Arguments | None = None) -> None:
        """Create a router with no bindings, configured by the exchange's arguments."""
        super().__init__()
        args = arguments or {}
        hops = args.get(MAX_HOPS_ARG)
        self.max_hops = hops if isinstance(hops, int) and not isinstance(hops, bool) else 1
        self.downstream_name = _text(args.get(DOWNSTREAM_NAME_ARG))
        self.downstream_vhost = _text(args.get(DOWNSTREAM_VHOST_ARG))

    def route(self, routing_key: str, headers: Mapping[str, object] | None) -> list[Destination]:
        """Every bound destination, unless the message must not go back downstream."""
        if not should_forward(headers, self.max_hops, self.downstream_name, self.downstream_vhost):
            return []
        return super().route(routing_key, headers)
