"""What the link managers (node_links.py, supervisor.py, federation.py,
queue_federation.py) hand their links, as plain data: where the local broker is, what an
exchange link runs, a federated queue and its demand.

They are kept apart from the links themselves (shovel.py, federation_exchange.py,
federated_queue.py, client.py), which import aiormq and patch pamqp's encoder: a manager
imports a link's module only when it starts its first link, so a broker without shovels
or federation never loads aiormq (about 2 MB and 40 modules in every process).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from amqpd.model.federation import Upstream

__all__ = ["HEARTBEAT", "Demand", "ExchangeLinkSpec", "LocalEndpoint", "LocalQueue"]

HEARTBEAT: Final = 10  # seconds, unless the URI says (amqp_client's default)


class LocalEndpoint:
    """How the links reach the local broker: its listener and the internal credentials."""

    def __init__(self, host: str, port: int, user: str, secret: str) -> None:
        self.host = "127.0.0.1" if host in ("", "0.0.0.0") else host
        self.port = port
        self.user = user
        self.secret = secret

    def resolve(self, uri: str) -> str:
        """The URI to connect to: a host-less URI becomes the local listener; a URI without
        ``heartbeat`` gets RabbitMQ's client default (10 s), so a link whose peer vanished
        without closing the TCP connection (a network partition) is noticed."""
        parts = urlsplit(uri)
        if "heartbeat=" not in parts.query:
            query = (
                f"{parts.query}&heartbeat={HEARTBEAT}" if parts.query else f"heartbeat={HEARTBEAT}"
            )
            parts = parts._replace(query=query)
            uri = urlunsplit(parts)
        if parts.hostname:
            return uri
        vhost = unquote(parts.path[1:]) if parts.path.startswith("/") else ""
        path = "/" + quote(vhost, safe="") if vhost else "/"
        query = f"?{parts.query}" if parts.query else ""
        return (
            f"amqp://{quote(self.user, safe='')}:{quote(self.secret, safe='')}"
            f"@{self.host}:{self.port}{path}{query}"
        )


@dataclass(slots=True, frozen=True)
class ExchangeLinkSpec:
    """What one link runs: the upstream (resolved) and the downstream exchange as
    declared (the upstream exchange is declared like it when missing)."""

    upstream: Upstream
    vhost: str
    exchange: str
    type_name: str
    durable: bool
    auto_delete: bool
    internal: bool
    policy: str
    cluster: str  # this broker's cluster name
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass(slots=True, frozen=True)
class LocalQueue:
    """The federated (downstream) queue, as the link needs it."""

    vhost: str
    name: str
    durable: bool
    auto_delete: bool
    arguments: dict[str, Any]
    policy: str | None  # the policy that federates it (named in the connection name)


class Demand:
    """Whether a federated queue wants messages now; shared by the links of the queue.
    The supervisor sets it after each core step; each link waits on its own event."""

    def __init__(self, wants: bool = False) -> None:
        self.wants = wants
        self._events: set[asyncio.Event] = set()

    def set(self, wants: bool) -> None:
        """The queue's demand is ``wants`` now: wake the links' followers."""
        self.wants = wants
        for event in self._events:
            event.set()

    def watch(self) -> asyncio.Event:
        """An event set whenever the demand is set (clear it before reading `wants`)."""
        event = asyncio.Event()
        self._events.add(event)
        return event

    def unwatch(self, event: asyncio.Event) -> None:
        self._events.discard(event)
