"""The Prometheus exposition (amqpd/shell/metrics.py): RabbitMQ's metric names, types and
labels, and their values after known traffic through the sans-IO engine."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
from pamqp import commands
from prometheus_client.parser import text_string_to_metric_families

from amqpd.model.broker import Broker, BrokerConfig
from amqpd.model.statistics import NodeSample, StoreIO
from amqpd.shell import metrics
from amqpd.shell.store_io import CountingBodyReader, CountingStore
from amqpd.wire.codec import PROTOCOL_HEADER
from persistence.journal import Journal
from persistence.records import Batch, OpKind
from tests.unit.engine_driver import Client
from tests.unit.protocol_support import (
    advance,
    connect,
    declare,
    deliveries,
    publish_frames,
    rpc,
    split,
)


class _Host:
    """A BrokerHost without a server: the broker and a fixed node sample."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.sample = NodeSample(
            name="amqpd@test",
            uptime=12_500,
            mem_used=50_000_000,
            mem_limit=400_000_000,
            disk_free=9_000_000_000,
            disk_free_limit=50_000_000,
            fd_used=17,
            fd_total=1024,
            sockets_used=3,
            sockets_total=900,
        )

    def node_sample(self) -> NodeSample:
        return self.sample

    def after_core(self) -> None:
        pass

    async def admin_request(self, request: dict[str, Any]) -> Any:
        raise NotImplementedError


Families = dict[str, tuple[str, str, dict[tuple[tuple[str, str], ...], float]]]


def _parse(text: str) -> Families:
    """name -> (type, help, {sorted labels: value}) for every sample of the exposition."""
    out: Families = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            _, _, values = out.setdefault(sample.name, (family.type, family.documentation, {}))
            values[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def _get(host: _Host, path: str, headers: dict[str, str] | None = None) -> httpx.Response:
    """GET ``path`` from the metrics app in process (no socket)."""
    transport = httpx.ASGITransport(app=metrics.create_app(host))

    async def get() -> httpx.Response:
        async with httpx.AsyncClient(transport=transport, base_url="http://metrics") as http:
            return await http.get(path, headers=headers)

    return anyio.run(get)


def _scrape(host: _Host, path: str = "/metrics") -> Families:
    response = _get(host, path)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return _parse(response.text)


def _value(families: Families, name: str, **labels: str) -> float:
    return families[name][2][tuple(sorted(labels.items()))]


def _traffic() -> tuple[Broker, Any]:
    """Two queues; 3 messages published to q1 (one fetched and acked, one fetched and left
    unacked), 1 to q2, 1 unroutable; a confirm channel; a consumer on q2."""
    broker = Broker(BrokerConfig(vhosts=("/", "other")))
    client = connect(broker, 1, 2)
    client.conn.stats.host, client.conn.stats.port = "127.0.0.1", 5672
    declare(client, 1, "q1")
    declare(client, 1, "q2")
    declare(client, 1, "q1")  # declared again: declared, not created
    for _ in range(3):
        client.send(1, *publish_frames("q1", b"abcd"))
    client.send(1, *publish_frames("q2", b"xy"))
    client.send(1, *publish_frames("nowhere", b"z"))
    client.send(1, commands.Basic.Get(queue="q1", no_ack=False))
    [first] = deliveries(client.received())
    client.send(1, commands.Basic.Ack(delivery_tag=first.method.delivery_tag))
    client.send(1, commands.Basic.Get(queue="q1", no_ack=False))
    assert len(deliveries(client.received())) == 1
    rpc(client, 2, commands.Confirm.Select(), commands.Confirm.SelectOk)
    client.send(2, *publish_frames("q2", b"confirmed"))
    client.received()
    client.send(2, commands.Basic.Consume(queue="q2", no_ack=True))
    delivered, _consume_ok = split(client.received())
    assert len(delivered) == 2
    return broker, client


def test_aggregated_names_types_help_and_values() -> None:
    broker, _client = _traffic()
    found = _scrape(_Host(broker))
    assert found["rabbitmq_connections"][:2] == ("gauge", "Connections currently open")
    assert _value(found, "rabbitmq_connections") == 1
    assert _value(found, "rabbitmq_channels") == 2
    assert _value(found, "rabbitmq_consumers") == 1
    assert _value(found, "rabbitmq_queues") == 2
    # q1: 2 left, one of them unacked; q2: both delivered to the no-ack consumer
    assert found["rabbitmq_queue_messages_ready"][0] == "gauge"
    assert _value(found, "rabbitmq_queue_messages_ready") == 1
    assert _value(found, "rabbitmq_queue_messages_unacked") == 1
    assert _value(found, "rabbitmq_queue_messages") == 2
    assert _value(found, "rabbitmq_queue_messages_bytes") == 8
    assert _value(found, "rabbitmq_queue_consumers") == 1
    received = found["rabbitmq_global_messages_received_total"]
    assert received[:2] == ("counter", "Total number of messages received from publishers")
    proto = {"protocol": "amqp091"}
    qtype = {"protocol": "amqp091", "queue_type": "rabbit_classic_queue"}
    assert _value(found, "rabbitmq_global_messages_received_total", **proto) == 6
    assert _value(found, "rabbitmq_global_messages_received_confirm_total", **proto) == 1
    assert _value(found, "rabbitmq_global_messages_routed_total", **proto) == 5
    assert _value(found, "rabbitmq_global_messages_unroutable_dropped_total", **proto) == 1
    assert _value(found, "rabbitmq_global_messages_unroutable_returned_total", **proto) == 0
    assert _value(found, "rabbitmq_global_messages_confirmed_total", **proto) == 1
    assert _value(found, "rabbitmq_global_messages_delivered_total", **qtype) == 4
    assert _value(found, "rabbitmq_global_messages_delivered_get_manual_ack_total", **qtype) == 2
    assert _value(found, "rabbitmq_global_messages_delivered_consume_auto_ack_total", **qtype) == 2
    assert _value(found, "rabbitmq_global_messages_acknowledged_total", **qtype) == 1
    assert _value(found, "rabbitmq_global_messages_redelivered_total", **qtype) == 0
    assert _value(found, "rabbitmq_global_publishers", **proto) == 2
    assert _value(found, "rabbitmq_channel_messages_published_total") == 6
    assert _value(found, "rabbitmq_queue_messages_published_total") == 5  # routed copies
    assert _value(found, "rabbitmq_channel_get_ack_total") == 2
    assert _value(found, "rabbitmq_connection_channels") == 2
    assert _value(found, "rabbitmq_connection_incoming_bytes_total") > 0
    assert _value(found, "rabbitmq_connections_opened_total") == 1
    assert _value(found, "rabbitmq_channels_opened_total") == 2
    assert _value(found, "rabbitmq_queues_declared_total") == 3
    assert _value(found, "rabbitmq_queues_created_total") == 2
    assert _value(found, "rabbitmq_queues_deleted_total") == 0


def test_node_figures_alarms_and_identity() -> None:
    broker, _client = _traffic()
    host = _Host(broker)
    found = _scrape(host)
    assert _value(found, "rabbitmq_process_resident_memory_bytes") == 50_000_000
    assert _value(found, "rabbitmq_resident_memory_limit_bytes") == 400_000_000
    assert _value(found, "rabbitmq_disk_space_available_bytes") == 9_000_000_000
    assert _value(found, "rabbitmq_disk_space_available_limit_bytes") == 50_000_000
    assert _value(found, "rabbitmq_process_open_fds") == 17
    assert _value(found, "rabbitmq_process_max_fds") == 1024
    assert _value(found, "rabbitmq_process_open_tcp_sockets") == 3
    assert _value(found, "rabbitmq_process_max_tcp_sockets") == 900
    assert _value(found, "rabbitmq_erlang_uptime_seconds") == 12.5
    assert found["rabbitmq_alarms_memory_used_watermark"][0] == "unknown"
    assert _value(found, "rabbitmq_alarms_memory_used_watermark") == 0
    assert _value(found, "rabbitmq_alarms_free_disk_space_watermark") == 0
    broker.access.state.global_parameters["cluster_name"] = "prod"
    broker.access.state.global_parameters["internal_cluster_id"] = "rabbitmq-cluster-id-x"
    [(labels, one)] = _scrape(host)["rabbitmq_identity_info"][2].items()
    assert one == 1 and dict(labels) == {  # RabbitMQ 3.10.8's labels
        "rabbitmq_node": "amqpd@test",
        "rabbitmq_cluster": "prod",
        "rabbitmq_cluster_permanent_id": "rabbitmq-cluster-id-x",
    }
    [(labels, one)] = found["rabbitmq_build_info"][2].items()
    assert dict(labels)["product_name"] == "amqpd"
    assert dict(labels)["rabbitmq_version"] == "3.10.8"
    assert "process_cpu_seconds_total" in found  # the process collector stands in for Erlang's
    broker.alarms.memory_limit = 1000
    broker.memory_used(2000)
    assert _value(_scrape(host), "rabbitmq_alarms_memory_used_watermark") == 1


def test_per_object_labels_each_queue() -> None:
    broker, _client = _traffic()
    found = _scrape(_Host(broker), "/metrics/per-object")
    assert _value(found, "rabbitmq_queue_messages_ready", vhost="/", queue="q1") == 1
    assert _value(found, "rabbitmq_queue_messages_unacked", vhost="/", queue="q1") == 1
    assert _value(found, "rabbitmq_queue_messages", vhost="/", queue="q2") == 0
    assert _value(found, "rabbitmq_queue_consumers", vhost="/", queue="q2") == 1
    channels = found["rabbitmq_channel_messages_published_total"][2]
    assert sorted(channels.values()) == [1, 5]
    assert {dict(labels)["channel"] for labels in channels} == {
        "127.0.0.1:5672 -> 127.0.0.1:5672 (1)",
        "127.0.0.1:5672 -> 127.0.0.1:5672 (2)",
    }
    assert _value(found, "rabbitmq_queues") == 2  # the totals are there too
    routed = {"exchange_vhost": "/", "exchange": ""}
    assert _value(found, "rabbitmq_queue_messages_published_total", **routed) == 5


def test_detailed_reports_only_the_families_and_vhosts_asked_for() -> None:
    broker, _client = _traffic()
    other = connect(broker, vhost="other")
    declare(other, 1, "elsewhere")
    host = _Host(broker)
    found = _scrape(host, "/metrics/detailed?family=queue_coarse_metrics&vhost=other")
    assert set(found) == {
        "rabbitmq_detailed_queue_messages_ready",
        "rabbitmq_detailed_queue_messages_unacked",
        "rabbitmq_detailed_queue_messages",
        "rabbitmq_identity_info",
    }
    assert list(found["rabbitmq_detailed_queue_messages"][2]) == [
        (("queue", "elsewhere"), ("vhost", "other"))
    ]
    assert set(_scrape(host, "/metrics/detailed")) == {"rabbitmq_identity_info"}


def test_detailed_cluster_families() -> None:
    broker, client = _traffic()
    rpc(
        client,
        1,
        commands.Exchange.Declare(exchange="ex", exchange_type="topic"),
        commands.Exchange.DeclareOk,
    )
    for key in ("a.#", "b.*"):
        rpc(
            client,
            1,
            commands.Queue.Bind(queue="q1", exchange="ex", routing_key=key),
            commands.Queue.BindOk,
        )
    path = "/metrics/detailed?family=exchange_bindings&family=vhost_status"
    found = _scrape(_Host(broker), path)
    labels = {"vhost": "/", "exchange": "ex", "type": "topic"}
    assert _value(found, "rabbitmq_cluster_exchange_bindings", **labels) == 2
    assert (
        _value(
            found,
            "rabbitmq_cluster_exchange_bindings",
            **{**labels, "exchange": "amq.direct", "type": "direct"},
        )
        == 0
    )
    exchanges = {dict(key)["exchange"] for key in found["rabbitmq_cluster_exchange_bindings"][2]}
    assert "" not in exchanges  # the default exchange is not listed
    assert _value(found, "rabbitmq_cluster_vhost_status", vhost="other") == 1
    assert "rabbitmq_cluster_exchange_name" not in found


def test_churn_counts_closes_and_deletes() -> None:
    broker, client = _traffic()
    rpc(client, 1, commands.Queue.Delete(queue="q1"), commands.Queue.DeleteOk)
    close = commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
    rpc(client, 2, close, commands.Channel.CloseOk)
    client.conn.connection_lost()
    found = _scrape(_Host(broker))
    assert _value(found, "rabbitmq_queues_deleted_total") == 1
    assert _value(found, "rabbitmq_channels_closed_total") == 2
    assert _value(found, "rabbitmq_connections_closed_total") == 1
    assert _value(found, "rabbitmq_connections") == 0
    # closed channels' counts stay in the global counters, not in the per-channel families
    proto = {"protocol": "amqp091"}
    assert _value(found, "rabbitmq_global_messages_received_total", **proto) == 6
    assert _value(found, "rabbitmq_channel_messages_published_total") == 0


def test_dead_lettered_messages_by_reason_and_strategy() -> None:
    broker = Broker()
    client = connect(broker)
    declare(client, 1, "dlq")
    dlx = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}
    declare(client, 1, "with-dlx", arguments=dlx)
    declare(client, 1, "plain", arguments={"x-max-length": 1})
    for queue in ("with-dlx", "with-dlx", "plain", "plain", "plain"):  # plain drops 2 heads
        client.send(1, *publish_frames(queue, b"m"))
    client.send(1, commands.Basic.Get(queue="with-dlx", no_ack=False))
    [got] = deliveries(client.received())
    client.send(1, commands.Basic.Reject(delivery_tag=got.method.delivery_tag, requeue=False))
    declare(client, 1, "ttl", arguments=dlx)
    client.send(1, *publish_frames("ttl", b"short-lived", expiration="1000"))
    advance(broker, 5.0, client)
    found = _scrape(_Host(broker))
    family = "rabbitmq_global_messages_dead_lettered_{}_total"
    classic = "rabbit_classic_queue"
    assert found[family.format("rejected")][:2] == (
        "counter",
        "Total number of messages dead-lettered due to basic.reject or basic.nack",
    )
    assert (
        _value(
            found,
            family.format("rejected"),
            queue_type=classic,
            dead_letter_strategy="at_most_once",
        )
        == 1
    )
    assert (
        _value(found, family.format("maxlen"), queue_type=classic, dead_letter_strategy="disabled")
        == 2
    )
    assert (
        _value(
            found, family.format("expired"), queue_type=classic, dead_letter_strategy="at_most_once"
        )
        == 1
    )
    quorum = "rabbit_quorum_queue"
    assert (
        _value(
            found,
            family.format("delivery_limit"),
            queue_type=quorum,
            dead_letter_strategy="disabled",
        )
        == 0
    )
    # the dead-lettered messages reached the dead-letter queue
    assert (
        _value(
            _scrape(_Host(broker), "/metrics/per-object"),
            "rabbitmq_queue_messages_ready",
            vhost="/",
            queue="dlq",
        )
        == 2
    )


def test_login_attempts() -> None:
    broker, _client = _traffic()
    refused = Client(broker)
    refused.conn.receive_data(PROTOCOL_HEADER)
    refused.send(
        0,
        commands.Connection.StartOk(
            client_properties={"capabilities": {"authentication_failure_close": True}},
            mechanism="PLAIN",
            response="\0guest\0wrong",
        ),
    )
    found = _scrape(_Host(broker))
    proto = {"protocol": "amqp091"}
    assert found["rabbitmq_auth_attempts_total"][:2] == (
        "counter",
        "Total number of authorization attempts",
    )
    assert _value(found, "rabbitmq_auth_attempts_total", **proto) == 2
    assert _value(found, "rabbitmq_auth_attempts_succeeded_total", **proto) == 1
    assert _value(found, "rabbitmq_auth_attempts_failed_total", **proto) == 1


def test_a_scrape_is_gzipped_when_asked() -> None:
    broker, _client = _traffic()
    response = _get(_Host(broker), "/metrics", {"Accept-Encoding": "gzip"})
    assert response.headers["content-encoding"] == "gzip"
    assert "rabbitmq_queues" in response.text


def test_persistent_paged_out_and_store_families() -> None:
    broker = Broker(BrokerConfig(), Journal())
    client = connect(broker)
    declare(client, 1, "durable", durable=True)
    for _ in range(3):
        client.send(1, *publish_frames("durable", b"12345", delivery_mode=2))
    client.send(1, *publish_frames("durable", b"transient"))
    client.received()
    queue = broker.vhosts["/"].queues["durable"]
    paged = next(iter(queue.ready)).message
    paged.body = None  # as paging.page_out leaves a body in the store only
    queue.residency.dropped(paged)
    io = broker.statistics.store_io
    io.write_ops, io.write_bytes, io.messages_written, io.read_ops = 2, 300, 3, 1
    found = _scrape(_Host(broker))
    assert _value(found, "rabbitmq_queue_messages_persistent") == 3
    assert _value(found, "rabbitmq_queue_messages_persistent_bytes") == 15
    assert _value(found, "rabbitmq_queue_messages_paged_out") == 1
    assert _value(found, "rabbitmq_queue_messages_paged_out_bytes") == 5
    # in memory: the four but the paged-out one (its body is in the store only)
    assert _value(found, "rabbitmq_queue_messages_ready_ram") == 3
    assert _value(found, "rabbitmq_queue_messages_ram") == 3
    assert _value(found, "rabbitmq_queue_messages_ram_bytes") == 19
    assert found["rabbitmq_queue_messages_persistent"][1] == "Persistent messages"
    assert _value(found, "rabbitmq_io_write_ops_total") == 2
    assert _value(found, "rabbitmq_io_write_bytes_total") == 300
    assert _value(found, "rabbitmq_msg_store_write_total") == 3
    assert _value(found, "rabbitmq_io_read_ops_total") == 1
    assert found["rabbitmq_io_sync_ops_total"][0] == "counter"


def test_the_store_counters_count_transactions_and_pages() -> None:
    io = StoreIO()

    class _Store:
        async def apply(self, batch: Batch, *, inline: bool = False) -> None:
            return None

    class _Reader:
        def read_bodies(self, queue: Any, after_seq: int, limit: int) -> list[tuple[int, bytes]]:
            return [(1, b"abc"), (2, b"de")]

        def close(self) -> None:
            return None

    row = ("/", "q", 1, "", "q", b"hh", b"body", False, 0, None)
    batch = Batch(
        1, [(OpKind.INSERT_MESSAGE, [row, row]), (OpKind.DELETE_MESSAGE, [("/", "q", 0)])]
    )
    anyio.run(CountingStore(_Store(), io).apply, batch)  # type: ignore[arg-type]
    assert (io.write_ops, io.sync_ops, io.messages_written, io.write_bytes) == (1, 1, 2, 12)
    reader = CountingBodyReader(_Reader(), io)
    assert reader.read_bodies(("/", "q"), 0, 10) == [(1, b"abc"), (2, b"de")]
    assert (io.read_ops, io.messages_read, io.read_bytes) == (1, 2, 5)
