"""Streams over AMQP 0-9-1 with pika against the real server: declare, publish with
confirms, consume from offsets, RabbitMQ's refusals, restart and kill -9 recovery."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any

import httpx
import pika
import pika.exceptions
import pytest

from tests.conftest import node_under_test, running_server
from tests.integration.broker_process import BrokerProcess

STREAM = {"x-queue-type": "stream"}


def _connect(port_or_url: int | str) -> pika.BlockingConnection:
    if isinstance(port_or_url, str):
        return pika.BlockingConnection(pika.URLParameters(port_or_url))
    return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port_or_url))


def _read(
    port_or_url: int | str, count: int, prefetch: int = 50, tag: str = "reader", **arguments: Any
) -> list[tuple[int, bytes, Any, Any]]:
    """Consume ``count`` messages (acking each): (offset, body, method, properties), on a
    connection of its own (pika's blocking cancel and close reject what is still buffered,
    which a stream answers with 540: that connection is dropped at the end)."""
    connection = _connect(port_or_url)
    channel = connection.channel()
    channel.basic_qos(prefetch_count=prefetch)
    got: list[tuple[int, bytes, Any, Any]] = []

    def on_message(ch: Any, method: Any, properties: Any, body: bytes) -> None:
        got.append((properties.headers["x-stream-offset"], body, method, properties))
        ch.basic_ack(method.delivery_tag)

    channel.basic_consume("s", on_message, consumer_tag=tag, arguments=arguments)
    for _ in range(2000):  # bounded: each round waits for the next frames
        if len(got) >= count:
            break
        channel.connection.process_data_events(time_limit=0.05)
    with contextlib.suppress(pika.exceptions.AMQPError):
        connection.close()
    return got


def _publish(channel: Any, bodies: list[bytes], **properties: Any) -> None:
    for body in bodies:
        channel.basic_publish("", "s", body, pika.BasicProperties(**properties))


def test_publish_consume_offsets_and_refusals(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    with node_under_test(tmp_path_factory, data_dir=tmp_path / "data") as server:
        conn = _connect(server.port)
        channel = conn.channel()
        ok = channel.queue_declare("s", durable=True, arguments=STREAM)
        assert ok.method.message_count == 0
        channel.confirm_delivery()
        _publish(channel, [b"m%d" % n for n in range(100)], headers={"k": "v"}, message_id="id")
        assert channel.queue_declare("s", passive=True).method.message_count == 100
        got = _read(server.port, 100, **{"x-stream-offset": "first"})
        assert [offset for offset, *_ in got] == list(range(100))
        _offset, body, method, properties = got[42]
        assert body == b"m42" and not method.redelivered
        assert (method.exchange, method.routing_key) == ("", "s")
        assert properties.message_id == "id" and properties.headers["k"] == "v"
        assert [o for o, *_ in _read(server.port, 3, **{"x-stream-offset": 97})] == [97, 98, 99]
        assert channel.queue_declare("s", passive=True).method.message_count == 100
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
            channel.basic_get("s")
        assert closed.value.reply_code == 540
        assert closed.value.reply_text == (
            "NOT_IMPLEMENTED - basic.get not supported by stream queues queue 's' in vhost '/'"
        )
        conn = _connect(server.port)
        channel = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            channel.basic_consume("s", lambda *a: None)
        assert refused.value.reply_code == 406
        assert "consumer prefetch count is not set" in refused.value.reply_text
        channel = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            channel.queue_declare("s2", durable=False, arguments=STREAM)
        assert refused.value.reply_text == (
            "PRECONDITION_FAILED - invalid property 'non-durable' for queue 's2' in vhost '/'"
        )
        conn.close()


def test_management_api_and_definitions_show_the_stream(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    with node_under_test(tmp_path_factory, http=True, data_dir=tmp_path / "data") as server:
        conn = _connect(server.port)
        channel = conn.channel()
        channel.queue_declare("s", durable=True, arguments={**STREAM, "x-max-age": "1h"})
        channel.confirm_delivery()
        _publish(channel, [b"a", b"b", b"c"])
        channel.basic_qos(prefetch_count=1)
        channel.basic_consume(
            "s", lambda *a: None, consumer_tag="c", arguments={"x-stream-offset": 1}
        )
        conn.process_data_events(time_limit=0.2)
        with httpx.Client(
            base_url=f"http://127.0.0.1:{server.management_port}", auth=("guest", "guest")
        ) as api:
            item = api.get("/api/queues/%2F/s").json()
            assert item["type"] == "stream" and item["messages"] == 3
            assert (item["first_offset"], item["last_offset"], item["segments"]) == (0, 2, 1)
            assert item["consumer_offsets"] == {"c": 2}  # offset 1 sent, unacked (prefetch 1)
            consumers = api.get("/api/consumers").json()
            assert [c["offset"] for c in consumers if c["consumer_tag"] == "c"] == [2]
            queues = api.get("/api/definitions").json()["queues"]
            assert [q["arguments"] for q in queues if q["name"] == "s"] == [
                {"x-queue-type": "stream", "x-max-age": "1h"}
            ]
        conn.close()


def test_restart_keeps_stream_and_tracked_offsets(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    tracking = {"x-stream-automatic-offset-tracking": True}
    data = tmp_path / "data"
    with node_under_test(tmp_path_factory, data_dir=data) as server:
        conn = _connect(server.port)
        channel = conn.channel()
        channel.queue_declare("s", durable=True, arguments={**STREAM, "x-max-age": "7D"})
        channel.confirm_delivery()
        _publish(channel, [b"before-%d" % n for n in range(30)])
        got = _read(
            server.port, 10, prefetch=10, tag="etl", **tracking, **{"x-stream-offset": "first"}
        )
        assert [o for o, *_ in got][:10] == list(range(10))
        seen = len(got)
        conn.close()
    with node_under_test(tmp_path_factory, data_dir=data) as server:
        conn = _connect(server.port)
        channel = conn.channel()
        declared = channel.queue_declare("s", durable=True, arguments={**STREAM, "x-max-age": "7D"})
        assert declared.method.message_count == 30
        channel.confirm_delivery()
        _publish(channel, [b"after"])
        got = _read(server.port, 31 - seen, prefetch=10, tag="etl", **tracking)
        assert [o for o, *_ in got] == list(range(seen, 31))
        assert got[-1][1] == b"after"
        conn.close()


@pytest.mark.slow
def test_kill_9_keeps_every_confirmed_message(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path)
    confirmed: list[bytes] = []
    try:
        conn = _connect(broker.url)
        channel = conn.channel()
        channel.queue_declare("s", durable=True, arguments=STREAM)
        conn.close()
        started = threading.Event()

        def publish() -> None:
            publisher = None
            try:
                publisher = _connect(broker.url)
                pub = publisher.channel()
                pub.confirm_delivery()
                for number in range(1_000_000):
                    body = b"msg-%d" % number + b"x" * 100
                    pub.basic_publish("", "s", body)  # returns once confirmed
                    confirmed.append(body)
                    if number == 200:
                        started.set()
            except pika.exceptions.AMQPError:
                return
            finally:  # its sockets closed here, not whenever the collector finds them
                if publisher is not None and not publisher.is_closed:
                    with contextlib.suppress(pika.exceptions.AMQPError):
                        publisher.close()

        thread = threading.Thread(target=publish, daemon=True)
        thread.start()
        assert started.wait(60)
        broker.kill()
        thread.join(timeout=30)
        broker.restart()
        conn = _connect(broker.url)
        channel = conn.channel()
        count = channel.queue_declare("s", passive=True).method.message_count
        assert count >= len(confirmed)
        got = _read(broker.url, count, prefetch=500, **{"x-stream-offset": "first"})
        assert [o for o, *_ in got] == list(range(count))  # contiguous, nothing torn
        bodies = [body for _o, body, *_ in got]
        assert bodies[: len(confirmed)] == confirmed
        conn.close()
    finally:
        broker.stop()


def test_memory_only_broker_serves_streams_from_a_temporary_directory() -> None:
    with running_server() as server:
        conn = _connect(server.port)
        channel = conn.channel()
        channel.queue_declare("s", durable=True, arguments=STREAM)
        channel.confirm_delivery()
        _publish(channel, [b"a", b"b"])
        got = _read(server.port, 2, **{"x-stream-offset": "first"})
        assert [(o, body) for o, body, *_ in got] == [(0, b"a"), (1, b"b")]
        directory = server.streams.storage_root
        assert directory is not None and directory.exists()
        conn.close()
    assert not directory.exists()  # removed at shutdown
