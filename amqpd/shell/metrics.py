"""Prometheus metrics with RabbitMQ's rabbitmq_prometheus names, on their own listener.

Three endpoints, as RabbitMQ 3.10+ serves them on port 15692:

- ``/metrics``: aggregated. Every per-object family (queues, channels, connections) is the
  sum over the objects, one sample without labels, so the scrape stays small however many
  queues there are. This is what RabbitMQ's Grafana dashboards read.
- ``/metrics/per-object``: the same families, one sample per queue (``vhost``, ``queue``
  labels), per channel or per connection (``channel`` label: RabbitMQ puts the Erlang pid
  there; amqpd puts the channel's or connection's management API name).
- ``/metrics/detailed?family=...&vhost=...``: only the families (RabbitMQ's table names,
  e.g. ``queue_coarse_metrics``) asked for, per object, prefixed ``rabbitmq_detailed_``,
  optionally only for the given virtual hosts; and the cluster-wide ``vhost_status``,
  ``exchange_bindings``, ``exchange_names`` (prefixed ``rabbitmq_cluster_``).

All three add the node totals (``rabbitmq_connections`` ...; not ``/detailed``), the global
message counters (``rabbitmq_global_messages_*_total``), the alarms, and
``rabbitmq_build_info`` / ``rabbitmq_identity_info``; ``prometheus_client``'s process and
platform collectors stand in for RabbitMQ's Erlang VM families (``process_*``,
``python_info``). A scrape reads the core once, at request time, through
amqpd/engine/scrape.py; nothing is kept between scrapes.
"""

from __future__ import annotations

import platform
from collections.abc import Collection, Iterable, Iterator
from importlib.metadata import PackageNotFoundError, version
from typing import Final

import anyio.to_thread
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    UnknownMetricFamily,
)
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from amqpd import __version__
from amqpd.engine import scrape
from amqpd.engine.node_inventory import MANAGEMENT_VERSION, PRODUCT_NAME
from amqpd.model.global_parameters import CLUSTER_ID
from amqpd.shell.host import BrokerHost
from amqpd.shell.metrics_store import store_families

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"  # what RabbitMQ sends
PREFIX: Final = "rabbitmq_"
DETAILED_PREFIX: Final = "rabbitmq_detailed_"
PROTOCOL: Final = "amqp091"
QUEUE_TYPE: Final = "rabbit_classic_queue"

# (metric name without the prefix, type, HELP text, the scrape.Row value it reads)
_Def = tuple[str, str, str, str]

FAMILIES: Final[dict[str, list[_Def]]] = {
    "connection_churn_metrics": [
        ("connections_opened_total", "counter", "Total number of connections opened",
         "connections_opened"),
        ("connections_closed_total", "counter",
         "Total number of connections closed or terminated", "connections_closed"),
        ("channels_opened_total", "counter", "Total number of channels opened",
         "channels_opened"),
        ("channels_closed_total", "counter", "Total number of channels closed",
         "channels_closed"),
        ("queues_declared_total", "counter", "Total number of queues declared",
         "queues_declared"),
        ("queues_created_total", "counter", "Total number of queues created",
         "queues_created"),
        ("queues_deleted_total", "counter", "Total number of queues deleted",
         "queues_deleted"),
    ],
    "auth_attempt_metrics": [
        ("auth_attempts_total", "counter", "Total number of authorization attempts",
         "attempts"),
        ("auth_attempts_succeeded_total", "counter",
         "Total number of successful authentication attempts", "succeeded"),
        ("auth_attempts_failed_total", "counter",
         "Total number of failed authentication attempts", "failed"),
    ],
    "node_coarse_metrics": [
        ("process_open_fds", "gauge", "Open file descriptors", "fd_used"),
        ("process_open_tcp_sockets", "gauge", "Open TCP sockets", "sockets_used"),
        ("process_resident_memory_bytes", "gauge", "Memory used in bytes", "mem_used"),
        ("disk_space_available_bytes", "gauge", "Disk space available in bytes", "disk_free"),
    ],
    "node_metrics": [
        ("process_max_fds", "gauge", "Open file descriptors limit", "fd_total"),
        ("process_max_tcp_sockets", "gauge", "Open TCP sockets limit", "sockets_total"),
        ("resident_memory_limit_bytes", "gauge", "Memory high watermark in bytes",
         "mem_limit"),
        ("disk_space_available_limit_bytes", "gauge",
         "Free disk space low watermark in bytes", "disk_free_limit"),
        ("erlang_uptime_seconds", "gauge", "Node uptime", "uptime"),
    ],
    "queue_coarse_metrics": [
        ("queue_messages_ready", "gauge", "Messages ready to be delivered to consumers",
         "messages_ready"),
        ("queue_messages_unacked", "gauge",
         "Messages delivered to consumers but not yet acknowledged",
         "messages_unacknowledged"),
        ("queue_messages", "gauge",
         "Sum of ready and unacknowledged messages - total queue depth", "messages"),
    ],
    "queue_metrics": [
        ("queue_consumers", "gauge", "Consumers on a queue", "consumers"),
        ("queue_consumer_capacity", "gauge", "Consumer capacity", "consumer_utilisation"),
        ("queue_consumer_utilisation", "gauge", "Same as consumer capacity",
         "consumer_utilisation"),
        ("queue_messages_ram", "gauge", "Ready and unacknowledged messages stored in memory",
         "messages_ram"),
        ("queue_messages_ram_bytes", "gauge",
         "Size of ready and unacknowledged messages stored in memory", "message_bytes_ram"),
        ("queue_messages_ready_ram", "gauge", "Ready messages stored in memory",
         "messages_ready_ram"),
        ("queue_messages_unacked_ram", "gauge", "Unacknowledged messages stored in memory",
         "messages_unacknowledged_ram"),
        ("queue_messages_bytes", "gauge",
         "Size in bytes of ready and unacknowledged messages", "message_bytes"),
        ("queue_messages_ready_bytes", "gauge", "Size in bytes of ready messages",
         "message_bytes_ready"),
        ("queue_messages_unacked_bytes", "gauge",
         "Size in bytes of all unacknowledged messages", "message_bytes_unacknowledged"),
        # ready messages stored (persistent in a durable queue) and paged out (body in the
        # store only): amqpd/engine/memory.py
        ("queue_messages_persistent", "gauge", "Persistent messages", "messages_persistent"),
        ("queue_messages_persistent_bytes", "gauge", "Size in bytes of persistent messages",
         "message_bytes_persistent"),
        ("queue_messages_paged_out", "gauge", "Messages paged out to disk",
         "messages_paged_out"),
        ("queue_messages_paged_out_bytes", "gauge",
         "Size in bytes of messages paged out to disk", "message_bytes_paged_out"),
    ],
    "channel_metrics": [
        ("channel_consumers", "gauge", "Consumers on a channel", "consumer_count"),
        ("channel_messages_unacked", "gauge", "Delivered but not yet acknowledged messages",
         "messages_unacknowledged"),
        ("channel_messages_unconfirmed", "gauge", "Published but not yet confirmed messages",
         "messages_unconfirmed"),
        ("channel_messages_uncommitted", "gauge",
         "Messages received in a transaction but not yet committed", "messages_uncommitted"),
        ("channel_acks_uncommitted", "gauge",
         "Message acknowledgements in a transaction not yet committed", "acks_uncommitted"),
        ("consumer_prefetch", "gauge", "Limit of unacknowledged messages for each consumer",
         "prefetch_count"),
        ("channel_prefetch", "gauge",
         "Total limit of unacknowledged messages for all consumers on a channel",
         "global_prefetch_count"),
    ],
    "channel_exchange_metrics": [
        ("channel_messages_published_total", "counter",
         "Total number of messages published into an exchange on a channel", "publish"),
        ("channel_messages_confirmed_total", "counter",
         "Total number of messages published into an exchange and confirmed on the channel",
         "confirm"),
        ("channel_messages_unroutable_returned_total", "counter",
         "Total number of messages published as mandatory into an exchange and returned to "
         "the publisher as unroutable", "return_unroutable"),
        ("channel_messages_unroutable_dropped_total", "counter",
         "Total number of messages published as non-mandatory into an exchange and dropped "
         "as unroutable", "drop_unroutable"),
    ],
    "channel_queue_metrics": [
        ("channel_get_ack_total", "counter",
         "Total number of messages fetched with basic.get in manual acknowledgement mode",
         "get"),
        ("channel_get_total", "counter",
         "Total number of messages fetched with basic.get in automatic acknowledgement mode",
         "get_no_ack"),
        ("channel_messages_delivered_ack_total", "counter",
         "Total number of messages delivered to consumers in manual acknowledgement mode",
         "deliver"),
        ("channel_messages_delivered_total", "counter",
         "Total number of messages delivered to consumers in automatic acknowledgement mode",
         "deliver_no_ack"),
        ("channel_messages_redelivered_total", "counter",
         "Total number of messages redelivered to consumers", "redeliver"),
        ("channel_messages_acked_total", "counter",
         "Total number of messages acknowledged by consumers", "ack"),
        ("channel_get_empty_total", "counter",
         "Total number of times basic.get operations fetched no message", "get_empty"),
    ],
    "connection_coarse_metrics": [
        ("connection_incoming_bytes_total", "counter",
         "Total number of bytes received on a connection", "recv_oct"),
        ("connection_outgoing_bytes_total", "counter",
         "Total number of bytes sent on a connection", "send_oct"),
    ],
    "connection_metrics": [
        ("connection_incoming_packets_total", "counter",
         "Total number of packets received on a connection", "recv_cnt"),
        ("connection_outgoing_packets_total", "counter",
         "Total number of packets sent on a connection", "send_cnt"),
        ("connection_channels", "gauge", "Channels on a connection", "channels"),
    ],
    "channel_queue_exchange_metrics": [
        ("queue_messages_published_total", "counter",
         "Total number of messages published to queues", "publish_out"),
    ],
    # amqpd's own (RabbitMQ's delayed message plugin exports no metric)
    "exchange_delayed_metrics": [
        ("exchange_messages_delayed", "gauge",
         "Messages held by x-delayed-message exchanges until their delay ends",
         "messages_delayed"),
    ],
}  # fmt: skip

# one row per protocol, labelled even in the aggregated /metrics (as RabbitMQ's)
KEYED_BY_PROTOCOL: Final = frozenset({"auth_attempt_metrics"})

# /metrics/detailed only, prefixed rabbitmq_cluster_ (RabbitMQ's METRICS_CLUSTER)
CLUSTER_FAMILIES: Final[dict[str, list[_Def]]] = {
    "vhost_status": [
        ("vhost_status", "gauge", "Whether a given vhost is running", "status"),
    ],
    "exchange_bindings": [
        ("exchange_bindings", "gauge",
         "Number of bindings for an exchange. This value is cluster-wide.", "bindings"),
    ],
    "exchange_names": [
        ("exchange_name", "gauge",
         "Enumerates exchanges without any additional info. This value is cluster-wide. A "
         "cheaper alternative to `exchange_bindings`", "name"),
    ],
}  # fmt: skip
CLUSTER_PREFIX: Final = "rabbitmq_cluster_"

# rabbit_global_counters: (name, HELP); the first group is per protocol, the second per
# protocol and queue type
_GLOBAL_PROTOCOL: Final = (
    ("messages_received", "Total number of messages received from publishers"),
    ("messages_received_confirm",
     "Total number of messages received from publishers expecting confirmations"),
    ("messages_routed", "Total number of messages routed to queues or streams"),
    ("messages_unroutable_dropped",
     "Total number of messages published as non-mandatory into an exchange and dropped as "
     "unroutable"),
    ("messages_unroutable_returned",
     "Total number of messages published as mandatory into an exchange and returned to the "
     "publisher as unroutable"),
    ("messages_confirmed", "Total number of messages confirmed to publishers"),
)  # fmt: skip
_GLOBAL_QUEUE_TYPE: Final = (
    ("messages_delivered", "Total number of messages delivered to consumers"),
    ("messages_delivered_consume_manual_ack",
     "Total number of messages delivered to consumers using basic.consume with manual "
     "acknowledgment"),
    ("messages_delivered_consume_auto_ack",
     "Total number of messages delivered to consumers using basic.consume with automatic "
     "acknowledgment"),
    ("messages_delivered_get_manual_ack",
     "Total number of messages delivered to consumers using basic.get with manual "
     "acknowledgment"),
    ("messages_delivered_get_auto_ack",
     "Total number of messages delivered to consumers using basic.get with automatic "
     "acknowledgment"),
    ("messages_get_empty", "Total number of times basic.get operations fetched no message"),
    ("messages_redelivered", "Total number of messages redelivered to consumers"),
    ("messages_acknowledged", "Total number of messages acknowledged by consumers"),
)  # fmt: skip


_AnyFamily = CounterMetricFamily | GaugeMetricFamily | UnknownMetricFamily


_DEAD_LETTERED: Final = (  # (reason, HELP, the queue type RabbitMQ counts it for)
    ("maxlen", "Total number of messages dead-lettered due to overflow drop-head or "
     "reject-publish-dlx", "rabbit_classic_queue"),
    ("expired", "Total number of messages dead-lettered due to message TTL exceeded",
     "rabbit_classic_queue"),
    ("rejected", "Total number of messages dead-lettered due to basic.reject or basic.nack",
     "rabbit_classic_queue"),
    ("delivery_limit", "Total number of messages dead-lettered due to delivery-limit exceeded",
     "rabbit_quorum_queue"),
)  # fmt: skip


def _family(name: str, kind: str, help_text: str, labels: Iterable[str]) -> _AnyFamily:
    names = list(labels)
    if kind == "counter":
        return CounterMetricFamily(name, help_text, labels=names)
    if kind == "gauge":
        return GaugeMetricFamily(name, help_text, labels=names)
    return UnknownMetricFamily(name, help_text, labels=names)


def _table_families(
    rows: list[scrape.Row], defs: list[_Def], prefix: str, per_object: bool
) -> Iterator[Metric]:
    """One family per definition: a sample per row, or (aggregated) one unlabelled sum."""
    label_names = list(rows[0].labels) if per_object and rows else []
    for name, kind, help_text, key in defs:
        family = _family(prefix + name, kind, help_text, label_names)
        if per_object:
            # samples built directly: add_metric's per-sample work dominates large scrapes
            sample = family.name + "_total" if kind == "counter" else family.name
            family.samples.extend(Sample(sample, row.labels, row.values[key]) for row in rows)
        else:
            family.add_metric([], sum(row.values[key] for row in rows))
        yield family


def _client_version() -> str:
    try:
        return version("prometheus_client")
    except PackageNotFoundError:  # pragma: no cover - it is a dependency
        return ""


class RabbitCollector(Collector):
    """RabbitMQ's metric families for one scrape of ``host``'s broker.

    Args:
        host: the running server.
        mode: ``"aggregated"``, ``"per-object"`` or ``"detailed"``.
        families: (detailed) the table names to report; None: all.
        vhosts: (detailed) only objects of these virtual hosts; None: all.
    """

    def __init__(
        self,
        host: BrokerHost,
        mode: str = "aggregated",
        families: Collection[str] | None = None,
        vhosts: Collection[str] | None = None,
    ) -> None:
        self.host = host
        self.mode = mode
        self.families = families
        self.vhosts = vhosts

    def collect(self) -> Iterator[Metric]:
        """The families of this scrape (prometheus_client calls it at render time)."""
        host = self.host
        broker = host.broker
        node = host.node_sample()
        detailed = self.mode == "detailed"
        prefix = DETAILED_PREFIX if detailed else PREFIX
        per_object = self.mode != "aggregated"
        wanted = [
            table
            for table in FAMILIES
            if not detailed or (self.families is not None and table in self.families)
        ]
        read = scrape.tables(broker, node, wanted, self.vhosts if detailed else None)
        for table in wanted:
            labelled = per_object or table in KEYED_BY_PROTOCOL
            yield from _table_families(read[table], FAMILIES[table], prefix, labelled)
        if detailed and self.families:
            for table, defs in CLUSTER_FAMILIES.items():
                if table in self.families:
                    rows = scrape.cluster_table(broker, table)
                    yield from _table_families(rows, defs, CLUSTER_PREFIX, True)
        if not detailed:
            yield from self._totals()
            yield from self._alarms()
            yield from store_families(broker.statistics.store_io)
        yield from self._identity(node.name)

    def _totals(self) -> Iterator[Metric]:
        totals = scrape.totals(self.host.broker)
        for name, help_text, value in (
            ("connections", "Connections currently open", totals.connections),
            ("channels", "Channels currently open", totals.channels),
            ("consumers", "Consumers currently connected", totals.consumers),
            ("queues", "Queues available", totals.queues),
        ):
            family = GaugeMetricFamily(PREFIX + name, help_text)
            family.add_metric([], value)
            yield family
        counters = totals.counters
        for name, help_text in _GLOBAL_PROTOCOL:
            counter = CounterMetricFamily(f"{PREFIX}global_{name}", help_text, labels=["protocol"])
            counter.add_metric([PROTOCOL], counters[name])
            yield counter
        for name, help_text, value in (
            ("publishers", "Current number of publishers", totals.publishers),
            ("consumers", "Current number of consumers", totals.consumers),
        ):
            gauge = GaugeMetricFamily(f"{PREFIX}global_{name}", help_text, labels=["protocol"])
            gauge.add_metric([PROTOCOL], value)
            yield gauge
        for name, help_text in _GLOBAL_QUEUE_TYPE:
            counter = CounterMetricFamily(
                f"{PREFIX}global_{name}", help_text, labels=["protocol", "queue_type"]
            )
            counter.add_metric([PROTOCOL, QUEUE_TYPE], counters[name])
            yield counter
        for reason, help_text, queue_type in _DEAD_LETTERED:
            counter = CounterMetricFamily(
                f"{PREFIX}global_messages_dead_lettered_{reason}",
                help_text,
                labels=["queue_type", "dead_letter_strategy"],
            )
            for strategy in ("disabled", "at_most_once"):
                counter.add_metric([queue_type, strategy], totals.dead_lettered[strategy][reason])
            yield counter

    def _alarms(self) -> Iterator[Metric]:
        active = self.host.broker.alarms.active
        for name, help_text, on in (
            ("file_descriptor_limit", "is 1 if file descriptor limit alarm is in effect", False),
            (
                "free_disk_space_watermark",
                "is 1 if free disk space watermark alarm is in effect",
                "disk" in active,
            ),
            (
                "memory_used_watermark",
                "is 1 if VM memory watermark alarm is in effect",
                "memory" in active,
            ),
        ):
            family = UnknownMetricFamily(f"{PREFIX}alarms_{name}", help_text)
            family.add_metric([], 1 if on else 0)
            yield family

    def _identity(self, node_name: str) -> Iterator[Metric]:
        if self.mode != "detailed":
            build = UnknownMetricFamily(
                PREFIX + "build_info",
                "RabbitMQ & Erlang/OTP version info",
                labels=[
                    "rabbitmq_version",
                    "prometheus_plugin_version",
                    "prometheus_client_version",
                    "python_version",
                    "product_name",
                    "product_version",
                ],
            )
            build.add_metric(
                [
                    MANAGEMENT_VERSION,
                    __version__,
                    _client_version(),
                    platform.python_version(),
                    PRODUCT_NAME,
                    __version__,
                ],
                1,
            )
            yield build
        broker = self.host.broker
        cluster_id = broker.access.state.global_parameters.get(CLUSTER_ID, "")
        identity = UnknownMetricFamily(
            PREFIX + "identity_info",
            "RabbitMQ node & cluster identity info",
            labels=["rabbitmq_node", "rabbitmq_cluster", "rabbitmq_cluster_permanent_id"],
        )
        identity.add_metric([node_name, broker.cluster_name, str(cluster_id)], 1)
        yield identity


def render(collectors: Iterable[Collector]) -> bytes:
    """The text exposition (format 0.0.4) of ``collectors``."""
    registry = CollectorRegistry(auto_describe=False)
    for collector in collectors:
        registry.register(collector)
    return generate_latest(registry)


class _Collected(Collector):
    """Families already read (on the event loop), rendered later (in a worker thread)."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


_PROCESS = ProcessCollector(registry=None)
_PLATFORM = PlatformCollector(registry=None)


def create_app(host: BrokerHost) -> Starlette:
    """The Prometheus endpoints of ``host``'s broker (RabbitMQ's port 15692 layout)."""

    async def respond(collector: RabbitCollector, *others: Collector) -> Response:
        # The core is read here, on the broker's loop (it is not thread-safe); turning the
        # families into text (most of a large per-object scrape) runs in a worker thread,
        # so the loop keeps serving AMQP meanwhile.
        families = _Collected(list(collector.collect()))
        body = await anyio.to_thread.run_sync(render, [families, *others])
        return Response(body, media_type=CONTENT_TYPE)

    async def aggregated(request: Request) -> Response:
        return await respond(RabbitCollector(host), _PROCESS, _PLATFORM)

    async def per_object(request: Request) -> Response:
        return await respond(RabbitCollector(host, "per-object"), _PROCESS, _PLATFORM)

    async def detailed(request: Request) -> Response:
        params = request.query_params
        families = params.getlist("family")
        vhosts = params.getlist("vhost")
        return await respond(RabbitCollector(host, "detailed", families, vhosts or None))

    return Starlette(
        routes=[
            Route("/metrics", aggregated),
            Route("/metrics/per-object", per_object),
            Route("/metrics/detailed", detailed),
        ],
        middleware=[Middleware(GZipMiddleware, minimum_size=1024)],
    )
