"""The node in the shapes of RabbitMQ's management API (sans-IO): ``/api/overview`` (totals,
churn, object counts, listeners) and the ``/api/nodes`` item, from the broker's counters
and what the shell measured (`NodeSample`: memory, descriptors, disk, uptime, listeners)."""

from __future__ import annotations

from typing import Any, Final

from amqpd import RABBITMQ_VERSION, __version__
from amqpd.engine.api_format import CHANNEL_STATS, message_stats
from amqpd.engine.churn import churn_rates
from amqpd.engine.client_inventory import open_connections
from amqpd.model.broker import Broker
from amqpd.model.statistics import MessageStats, NodeSample
from amqpd.model.vhost import VirtualHost

MANAGEMENT_VERSION: Final = RABBITMQ_VERSION  # the one RabbitMQ version (amqpd/__init__.py)
PRODUCT_NAME: Final = "amqpd"


# -- node ------------------------------------------------------------------------------------
def counts_exchanges(host: VirtualHost) -> bool:
    """Whether this process counts ``host``'s exchanges in the node's totals: every worker
    holds every exchange of a spread vhost (docs/multicore.md "Stage 2"), so worker 0
    counts them and worker K's (K >= 1) copies are left out (the workers' totals are summed
    for the node: amqpd/shell/workers/gateway.py, node.py)."""
    replica = host.replica
    return replica is None or replica.worker == 0


def node_totals(broker: Broker) -> MessageStats:
    """The node's message counters now (closed channels' and open ones'), with the rates
    of the last sample."""
    totals = MessageStats()
    totals.add(broker.statistics.closed)
    for connection in open_connections(broker):
        for channel in connection.channels.values():
            totals.add(channel.stats)
    totals.rates = broker.statistics.totals.rates
    return totals


def _queue_totals(broker: Broker) -> dict[str, Any]:
    ready = sum(len(q.ready) for host in broker.vhosts.values() for q in host.queues.values())
    unacked = sum(
        len(channel.unacked)
        for connection in open_connections(broker)
        for channel in connection.channels.values()
    )
    rates = broker.statistics.depth_rates
    return {
        "messages": ready + unacked,
        "messages_details": {"rate": round(rates.get("messages", 0.0), 1)},
        "messages_ready": ready,
        "messages_ready_details": {"rate": round(rates.get("messages_ready", 0.0), 1)},
        "messages_unacknowledged": unacked,
        "messages_unacknowledged_details": {
            "rate": round(rates.get("messages_unacknowledged", 0.0), 1)
        },
    }


def _exchange_types() -> list[dict[str, Any]]:
    """RabbitMQ's exchange type list: the built-in ones, and the federation helper (its
    ``internal_purpose`` keeps it out of the management UI's type choice)."""
    types: list[dict[str, Any]] = [
        {"name": name, "description": "", "enabled": True}
        for name in ("direct", "fanout", "headers", "topic")
    ]
    for name, description in (
        ("x-consistent-hash", "Consistent Hashing Exchange"),
        ("x-modulus-hash", "Modulus Hashing Exchange"),
    ):
        types.append({"name": name, "description": description, "enabled": True})
    types.append(
        {"name": "x-delayed-message", "description": "Delayed Message Exchange.", "enabled": True}
    )
    types.append(
        {
            "name": "x-federation-upstream",
            "description": "Federation upstream helper exchange",
            "internal_purpose": "federation",
            "enabled": True,
        }
    )
    return types


def overview(broker: Broker, node: NodeSample) -> dict[str, Any]:
    """``/api/overview``."""
    conns = list(open_connections(broker))
    channel_count = sum(len(c.channels) for c in conns)
    consumer_count = sum(len(ch.consumers) for c in conns for ch in c.channels.values())
    totals = node_totals(broker)
    return {
        "management_version": MANAGEMENT_VERSION,
        "rates_mode": "basic",
        "sample_retention_policies": {
            "global": [600, 3600, 28800, 86400],
            "basic": [600, 3600],
            "detailed": [600],
        },
        "exchange_types": _exchange_types(),
        "product_version": __version__,
        "product_name": PRODUCT_NAME,
        "rabbitmq_version": MANAGEMENT_VERSION,
        "cluster_name": broker.cluster_name,
        "erlang_version": "",
        "erlang_full_version": "",
        "release_series_support_status": "supported",
        "disable_stats": False,
        "enable_queue_totals": True,
        "message_stats": message_stats(totals, CHANNEL_STATS),
        "churn_rates": churn_rates(broker.statistics),
        "queue_totals": _queue_totals(broker),
        "object_totals": {
            "connections": len(conns),
            "channels": channel_count,
            "exchanges": sum(
                len(host.exchanges) for host in broker.vhosts.values() if counts_exchanges(host)
            ),
            "queues": sum(len(host.queues) for host in broker.vhosts.values()),
            "consumers": consumer_count,
        },
        "statistics_db_event_queue": 0,
        "node": node.name,
        "listeners": list(node.listeners),
        "contexts": [],
    }


def nodes(broker: Broker, node: NodeSample) -> list[dict[str, Any]]:
    """``/api/nodes``: this one node."""
    alarms = broker.alarms.active
    return [
        {
            "name": node.name,
            "role": node.role,
            "type": "disc",
            "running": True,
            "being_drained": False,
            "partitions": [],
            "os_pid": node.os_pid,
            "uptime": node.uptime,
            "run_queue": node.run_queue,
            "processors": node.processors,
            "rates_mode": "basic",
            "mem_used": node.mem_used,
            "mem_used_details": {"rate": 0.0},
            "mem_limit": node.mem_limit,
            "mem_alarm": "memory" in alarms,
            "mem_calculation_strategy": "rss",
            "disk_free": node.disk_free,
            "disk_free_details": {"rate": 0.0},
            "disk_free_limit": node.disk_free_limit,
            "disk_free_alarm": "disk" in alarms,
            "fd_used": node.fd_used,
            "fd_total": node.fd_total,
            "sockets_used": node.sockets_used,
            "sockets_total": node.sockets_total,
            "proc_used": node.proc_used,
            "proc_total": node.proc_total,
            "store_bytes": node.store_bytes,
            "net_ticktime": 60,
            "enabled_plugins": [],
            "exchange_types": _exchange_types(),
            "auth_mechanisms": [  # enabled: offered (the auth_mechanisms setting)
                {"name": name, "description": "", "enabled": name in broker.config.auth_mechanisms}
                for name in ("PLAIN", "AMQPLAIN", "EXTERNAL")
            ],
            "applications": [{"name": PRODUCT_NAME, "description": "", "version": __version__}],
            "contexts": [],
            "listeners": list(node.listeners),
            "cluster_links": [],
            "metrics_gc_queue_length": {},
        }
    ]
