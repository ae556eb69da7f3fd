"""What a running broker holds, in the shapes of RabbitMQ 3.x's management API (sans-IO).

The management HTTP API, the Prometheus exporter, the dashboard and ``amqpd ctl`` all read
the broker through these functions and their siblings. Each returns plain JSON-able dicts
(or lists of them) whose field names and value shapes are those of RabbitMQ's items
(rabbit_mgmt_format), so tools written for RabbitMQ read them unchanged: here
``/api/queues``, ``/api/vhosts``, ``/api/exchanges`` and ``/api/bindings``; the clients'
(``/api/connections``, ``/api/channels``, ``/api/consumers``) in client_inventory.py; the
node's (``/api/overview``, ``/api/nodes``) in node_inventory.py; the value formats they
share in api_format.py. Sorting, paging and column selection are the caller's business.

Nothing here does I/O or reads a clock: counters are the model's and engine's
(model/statistics.py), rates come from the last `RateSampler.sample`, and what only the
shell can measure (memory, descriptors, disk, uptime, listeners) comes in a `NodeSample`.

Consumer utilisation is sampled, not timed per message: at each sample (every 5 s) a
queue with consumers counts as "utilised" when it could hand a message to one of them at
once (some consumer has credit: prefetch not exhausted, channel flowing, output not over
the write-ahead limit); ``consumer_utilisation`` is the fraction of the last 12 samples
(one minute) that were. RabbitMQ measures the same fraction with timestamps on every
state change; with the default sampling it shows the same steady-state figure.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

from amqpd.engine.api_format import (
    EXCHANGE_STATS,
    QUEUE_STATS,
    json_value,
    message_stats,
    node_name,
    rate,
    split_address,
)
from amqpd.engine.client_inventory import connection_name, open_connections
from amqpd.engine.connection import Connection
from amqpd.engine.stream_inventory import stream_fields
from amqpd.model.broker import Broker
from amqpd.model.exchange import Exchange
from amqpd.model.policies import merge
from amqpd.model.queue import Queue
from amqpd.model.statistics import MessageStats
from amqpd.model.vhost import VirtualHost

UTILISATION_WINDOW: Final = 12  # samples (one minute at the default 5 s interval)


def _timestamp(unix: float) -> str:
    """RabbitMQ's ``idle_since`` format: ``2024-01-31T12:00:00.000+00:00`` (3.12)."""
    moment = datetime.datetime.fromtimestamp(unix, datetime.UTC)
    return moment.isoformat(timespec="milliseconds")


def _vhosts(broker: Broker, vhost: str | None) -> list[VirtualHost]:
    if vhost is None:
        return list(broker.vhosts.values())
    found = broker.vhosts.get(vhost)
    return [found] if found is not None else []


def _unacked_by_queue(broker: Broker) -> dict[Queue, tuple[int, int]]:
    """Per queue: deliveries awaiting an ack and their body bytes (they live in channels)."""
    totals: dict[Queue, tuple[int, int]] = {}
    for connection in open_connections(broker):
        for channel in connection.channels.values():
            for record in channel.unacked.records():
                count, size = totals.get(record.queue, (0, 0))
                totals[record.queue] = (count + 1, size + record.entry.message.body_size)
    return totals


def unacked_by_queue(broker: Broker) -> dict[Queue, tuple[int, int]]:
    """Per queue: deliveries awaiting an ack and their body bytes (for the exporter)."""
    return _unacked_by_queue(broker)


# -- queues ----------------------------------------------------------------------------------
def queues(broker: Broker, vhost: str | None = None) -> list[dict[str, Any]]:
    """``/api/queues`` items (all vhosts, or one)."""
    unacked = _unacked_by_queue(broker)
    return [
        _queue(broker, queue, unacked.get(queue, (0, 0)))
        for host in _vhosts(broker, vhost)
        for queue in list(host.queues.values())
    ]


def queue(broker: Broker, vhost: str, name: str) -> dict[str, Any] | None:
    """One ``/api/queues/{vhost}/{name}`` item, or None."""
    host = broker.vhosts.get(vhost)
    found = host.queues.get(name) if host is not None else None
    if found is None:
        return None
    return _queue(broker, found, _unacked_by_queue(broker).get(found, (0, 0)))


def _queue(broker: Broker, queue: Queue, unacked: tuple[int, int]) -> dict[str, Any]:
    stats = queue.stats
    ready = queue.message_count  # a stream's: every message it keeps
    unacked_count, unacked_bytes = unacked
    node = node_name(broker)
    exclusive_consumer = queue.exclusive_consumer
    rates = broker.statistics
    depth = stats.depth_rates
    held = queue.residency  # stored / paged-out ready messages (counters)
    item: dict[str, Any] = {
        "name": queue.name,
        "vhost": queue.vhost_name,
        "durable": queue.durable,
        "auto_delete": queue.auto_delete,
        "exclusive": queue.exclusive_owner is not None,
        "arguments": json_value(queue.arguments),
        "type": queue.settings.queue_type,
        "state": "running",
        "node": node,
        "policy": queue.policy.name if queue.policy is not None else None,
        "operator_policy": (
            queue.operator_policy.name if queue.operator_policy is not None else None
        ),
        "effective_policy_definition": merge(queue.policy, queue.operator_policy),
        "messages": ready + unacked_count,
        "messages_ready": ready,
        "messages_unacknowledged": unacked_count,
        "messages_details": {"rate": round(depth.get("messages", 0.0), 1)},
        "messages_ready_details": {"rate": round(depth.get("messages_ready", 0.0), 1)},
        "messages_unacknowledged_details": {
            "rate": round(depth.get("messages_unacknowledged", 0.0), 1)
        },
        "consumers": len(queue.consumers),
        "consumer_capacity": stats.utilisation if stats.utilisation is not None else 0,
        "consumer_utilisation": stats.utilisation,
        "exclusive_consumer_tag": exclusive_consumer.tag if exclusive_consumer else None,
        "single_active_consumer_tag": (
            queue.consumers[0].tag
            if queue.settings.single_active_consumer and queue.consumers
            else None
        ),
        "message_bytes": queue.ready_bytes + unacked_bytes,
        "message_bytes_ready": queue.ready_bytes,
        "message_bytes_unacknowledged": unacked_bytes,
        "message_bytes_ram": queue.ready_bytes + unacked_bytes - held.paged_out_bytes,
        "message_bytes_persistent": held.persistent_bytes,
        "message_bytes_paged_out": held.paged_out_bytes,
        "messages_ram": ready + unacked_count - held.paged_out,
        "messages_ready_ram": ready - held.paged_out,  # paged out: ready ones only
        "messages_unacknowledged_ram": unacked_count,
        "messages_persistent": held.persistent,
        "messages_paged_out": held.paged_out,
        "memory": 1024 + 96 * ready + queue.ready_bytes,
        "head_message_timestamp": None,
        "recoverable_slaves": None,
        "reductions": 0,
        "garbage_collection": {},
        "backing_queue_status": {
            "mode": "default",
            "len": ready,
            "version": 1,
            "avg_ingress_rate": rate(stats, "publish"),
            "avg_egress_rate": rate(stats, "deliver_get"),
            "avg_ack_ingress_rate": 0.0,
            "avg_ack_egress_rate": rate(stats, "ack"),
        },
        "message_stats": message_stats(stats, QUEUE_STATS),
    }
    item.update(stream_fields(queue))  # segments, offsets (engine/stream_inventory.py)
    if rates.sampled_at is not None and stats.idle_since is not None:
        item["idle_since"] = _timestamp(stats.idle_since)
    owner = queue.exclusive_owner
    if isinstance(owner, Connection):
        host, port = split_address(owner.peer)
        item["owner_pid_details"] = {
            "name": connection_name(owner),
            "peer_host": host,
            "peer_port": port,
        }
    return item


# -- vhosts ----------------------------------------------------------------------------------
def vhosts(broker: Broker) -> list[dict[str, Any]]:
    """``/api/vhosts`` items: each vhost's definition and its message counts."""
    unacked = _unacked_by_queue(broker)
    node = node_name(broker)
    items = []
    for info in broker.access.state.vhosts.values():
        host = broker.vhosts.get(info.name)
        queues_here = list(host.queues.values()) if host is not None else []
        ready = sum(len(q.ready) for q in queues_here)
        unacked_count = sum(unacked.get(q, (0, 0))[0] for q in queues_here)
        stats = MessageStats()
        for q in queues_here:
            stats.add(q.stats)
        items.append(
            {
                "name": info.name,
                "description": info.description,
                "tags": list(info.tags),
                "default_queue_type": "undefined",
                "metadata": {"description": info.description, "tags": list(info.tags)},
                "tracing": False,
                "cluster_state": {node: "running"},
                "messages": ready + unacked_count,
                "messages_details": {"rate": 0.0},
                "messages_ready": ready,
                "messages_ready_details": {"rate": 0.0},
                "messages_unacknowledged": unacked_count,
                "messages_unacknowledged_details": {"rate": 0.0},
                "message_stats": message_stats(stats, QUEUE_STATS),
            }
        )
    return items


# -- exchanges and bindings ------------------------------------------------------------------
def exchanges(broker: Broker, vhost: str | None = None) -> list[dict[str, Any]]:
    """``/api/exchanges`` items (the default exchange is listed with name "")."""
    return [
        _exchange(host, exchange)
        for host in _vhosts(broker, vhost)
        for exchange in list(host.exchanges.values())
    ]


def exchange(broker: Broker, vhost: str, name: str) -> dict[str, Any] | None:
    """One ``/api/exchanges/{vhost}/{name}`` item, or None."""
    host = broker.vhosts.get(vhost)
    found = host.exchanges.get(name) if host is not None else None
    return _exchange(host, found) if host is not None and found is not None else None


def _exchange(host: VirtualHost, exchange: Exchange) -> dict[str, Any]:
    item = {
        "name": exchange.name,
        "vhost": host.name,
        "type": exchange.type_name,
        "durable": exchange.durable,
        "auto_delete": exchange.auto_delete,
        "internal": exchange.internal,
        "arguments": json_value(exchange.arguments),
        "user_who_performed_action": "",
        "policy": exchange.policy.name if exchange.policy is not None else None,
        "message_stats": message_stats(exchange.stats, EXCHANGE_STATS),
    }
    if exchange.delayed is not None:  # the delayed message plugin's exchange info item
        item["messages_delayed"] = exchange.delayed.count
    return item


def _quote_binding(text: str) -> str:
    return text.replace("%", "%25").replace("/", "%2F").replace("~", "%7E")


def properties_key(routing_key: str, arguments: Mapping[str, Any]) -> str:
    """RabbitMQ's binding ``properties_key`` (rabbit_mgmt_format:pack_binding_props): the
    quoted routing key (``~`` for an empty one without arguments), plus ``~`` and a digest
    of the arguments when there are any (stable across restarts)."""
    if not arguments:
        return _quote_binding(routing_key) if routing_key else "~"
    canonical = json.dumps(json_value(arguments), sort_keys=True, separators=(",", ":"))
    digest = base64.urlsafe_b64encode(hashlib.sha1(canonical.encode()).digest()[:12]).decode()
    return f"{_quote_binding(routing_key)}~{_quote_binding(digest)}"


def bindings(broker: Broker, vhost: str | None = None) -> list[dict[str, Any]]:
    """``/api/bindings`` items, including the default exchange's implicit binding of every
    queue to its own name, as RabbitMQ lists them (a spread vhost's queues on other workers
    too: their stubs, ``remote``)."""
    items: list[dict[str, Any]] = []
    for host in _vhosts(broker, vhost):
        for name in [*host.queues, *host.remote]:
            items.append(_binding(host.name, "", name, "queue", name, {}))
        for source in list(host.exchanges.values()):
            for destination, key, arguments in source.router.bindings():
                if isinstance(destination, Queue):
                    kind, target = "queue", destination.name
                elif isinstance(destination, Exchange):
                    kind, target = "exchange", destination.name
                else:
                    continue
                items.append(_binding(host.name, source.name, target, kind, key, arguments))
    return items


def find_binding(
    broker: Broker, vhost: str, source: str, kind: str, destination: str, key: str
) -> tuple[str, Mapping[str, Any]] | None:
    """The routing key and (raw) arguments of the binding from exchange ``source`` to the
    ``kind`` ("queue" / "exchange") ``destination`` whose ``properties_key`` is ``key``."""
    host = broker.vhosts.get(vhost)
    exchange = host.exchanges.get(source) if host is not None else None
    if exchange is None:
        return None
    if exchange.is_default:
        queue = None if host is None else host.queues.get(destination, host.remote.get(destination))
        if kind == "queue" and queue is not None and key == properties_key(destination, {}):
            return destination, {}
        return None
    wanted = Queue if kind == "queue" else Exchange
    for target, routing_key, arguments in exchange.router.bindings():
        if (
            isinstance(target, wanted)
            and target.name == destination
            and properties_key(routing_key, arguments) == key
        ):
            return routing_key, arguments
    return None


def _binding(
    vhost: str, source: str, destination: str, kind: str, key: str, arguments: Mapping[str, Any]
) -> dict[str, Any]:
    return {
        "source": source,
        "vhost": vhost,
        "destination": destination,
        "destination_type": kind,
        "routing_key": key,
        "arguments": json_value(arguments),
        "properties_key": properties_key(key, arguments),
    }
