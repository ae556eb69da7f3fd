"""An exchange (its declaration, router, policy and delayed messages) and the node-wide
topology version counter; the vhost (model/vhost.py) owns and routes across them."""

from __future__ import annotations

from typing import Any, Final

from amqpd.model.delayed import DelayedMessages
from amqpd.model.policies import PolicyRecord
from amqpd.model.statistics import MessageStats
from exchanges.base import Router
from exchanges.federation_upstream import FederationUpstreamRouter
from exchanges.registry import create_router

STANDARD_EXCHANGES: Final = (
    ("amq.direct", "direct"),
    ("amq.fanout", "fanout"),
    ("amq.topic", "topic"),
    ("amq.headers", "headers"),
    ("amq.match", "headers"),
)
FEDERATION_UPSTREAM: Final = FederationUpstreamRouter.type_name


class Exchange:
    """An exchange: its declaration and the router holding its bindings."""

    __slots__ = (
        "alternate",
        "arguments",
        "auto_delete",
        "delayed",
        "durable",
        "internal",
        "is_default",
        "name",
        "policy",
        "router",
        "stats",
        "type_name",
    )

    def __init__(
        self,
        name: str,
        type_name: str,
        durable: bool = True,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.type_name = type_name
        self.router: Router = create_router(type_name, arguments)
        self.durable = durable
        self.auto_delete = auto_delete
        self.internal = internal
        self.arguments = arguments or {}
        alternate = self.arguments.get("alternate-exchange")
        self.alternate = alternate if isinstance(alternate, str) and alternate else None
        self.is_default = name == ""
        self.stats = MessageStats()  # publish_in / publish_out (model/statistics.py)
        self.policy: PolicyRecord | None = None  # set by VirtualHost.apply_policies
        self.delayed: DelayedMessages | None = None  # x-delayed-message (model/delayed.py)

    def __repr__(self) -> str:
        return f"<Exchange {self.name!r} {self.type_name}>"


class TopologyVersion:
    """A counter of changes to exchanges, queues, bindings and policies, node-wide (the
    broker's one is shared by its vhosts). The shell compares it after each step of the
    core to learn that federation links must follow (amqpd/shell/links/federation.py);
    publishing never touches it."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0
