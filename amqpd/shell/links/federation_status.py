"""The federation links' status, shared by exchange and queue links.

Every federation link (amqpd/shell/links/federation_exchange.py, and the queue side's)
owns one `FederationLinkStatus` and updates it as it goes (``starting`` -> ``running``,
``error`` with a reason, ``starting`` again when it reconnects). A supervisor that runs
such links is a `FederationStatusSource`; the server lists the statuses of all of them for
``/api/federation-links[/{vhost}]`` (`status_json`: RabbitMQ's federation management
fields), ``amqpd ctl list-federation-links`` (`federation_table`: ``rabbitmqctl
federation_status``'s columns) and the dashboard.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from amqpd.model.federation import redact_uri

__all__ = [
    "FEDERATION_COLUMNS",
    "FederationLinkStatus",
    "FederationStatusSource",
    "federation_table",
    "status_json",
]


@dataclass(slots=True)
class FederationLinkStatus:
    """What one link reports. ``kind``: "exchange" or "queue"; ``name``: the downstream
    exchange or queue; ``upstream_name``: the exchange or queue federated from."""

    kind: str
    vhost: str
    name: str
    upstream: str
    upstream_name: str
    uri: str = ""  # the URI in use (credentials are removed when shown)
    status: str = "starting"  # starting | running | error
    error: str = ""
    local_connection: str = ""  # the name of the link's connection to this broker
    changed: float = field(default_factory=time.time)  # wall clock of the last change

    @property
    def id(self) -> str:
        """A short stable id of the link (8 hex digits, as RabbitMQ shows one)."""
        text = "\0".join((self.kind, self.vhost, self.name, self.upstream))
        return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:8]

    def set(self, status: str, error: str = "", uri: str | None = None) -> None:
        """Record a new state (and the URI being tried, if given)."""
        self.status, self.error, self.changed = status, error, time.time()
        if uri is not None:
            self.uri = uri


class FederationStatusSource(Protocol):
    """A supervisor of federation links (exchange side or queue side)."""

    def federation_status(self) -> list[FederationLinkStatus]:
        """The status of every link it runs."""
        ...


def _api_time(when: float) -> str:
    """RabbitMQ's management timestamp: hours not zero-padded (``2026-11-25 0:39:50``)."""
    stamp = time.localtime(when)
    return f"{time.strftime('%Y-%m-%d', stamp)} {stamp.tm_hour}:{time.strftime('%M:%S', stamp)}"


def status_json(item: FederationLinkStatus, node: str) -> dict[str, Any]:
    """An ``/api/federation-links`` item, with RabbitMQ's fields."""
    out: dict[str, Any] = {"node": node}
    if item.kind == "exchange":
        out["exchange"] = item.name
        out["upstream_exchange"] = item.upstream_name
    else:
        out["queue"] = item.name
        out["upstream_queue"] = item.upstream_name
    out.update(type=item.kind, vhost=item.vhost, upstream=item.upstream, id=item.id)
    out["status"] = item.status
    if item.status == "error":
        out["error"] = item.error
    if item.status == "running":
        out["local_connection"] = item.local_connection
    out["uri"] = redact_uri(item.uri)
    out["timestamp"] = _api_time(item.changed)
    return out


FEDERATION_COLUMNS: Final = (
    "error",
    "exchange",
    "id",
    "last_changed",
    "local_connection",
    "queue",
    "status",
    "type",
    "upstream",
    "upstream_exchange",
    "upstream_queue",
    "uri",
    "vhost",
)


def federation_table(items: list[FederationLinkStatus], node: str) -> dict[str, Any]:
    """``amqpd ctl list-federation-links``: rabbitmqctl federation_status's columns."""
    rows = []
    for item in sorted(items, key=lambda i: (i.vhost, i.kind, i.name, i.upstream)):
        exchange = item.kind == "exchange"
        row = {
            "error": item.error if item.status == "error" else "",
            "exchange": item.name if exchange else "",
            "id": item.id,
            "last_changed": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(item.changed)),
            "local_connection": item.local_connection if item.status == "running" else "",
            "queue": "" if exchange else item.name,
            "status": item.status,
            "type": item.kind,
            "upstream": item.upstream,
            "upstream_exchange": item.upstream_name if exchange else "",
            "upstream_queue": "" if exchange else item.upstream_name,
            "uri": redact_uri(item.uri),
            "vhost": item.vhost,
        }
        rows.append([row[column] for column in FEDERATION_COLUMNS])
    banner = f"Listing federation links on node {node}..."
    return {"banner": banner, "columns": FEDERATION_COLUMNS, "rows": rows}
