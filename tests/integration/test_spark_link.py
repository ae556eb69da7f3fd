"""The sink's publisher with real pika sockets, without Spark: what a fake cannot show.

A port that accepts TCP but never speaks AMQP, a refused login, and a pooled connection whose
broker was killed and restarted while it sat idle between two tasks.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from interop.spark.errors import ConnectError
from interop.spark.message import OutgoingMessage
from interop.spark.pool import LinkPool
from interop.spark.publisher import PublisherSettings, publish
from tests.integration.broker_process import BrokerProcess

pytest.importorskip("pyspark", reason="the Spark connector needs pyspark (the spark extra)")


def _messages(start: int, count: int) -> Iterator[OutgoingMessage]:
    for i in range(start, start + count):
        props = pika.BasicProperties(message_id=f"m{i}", delivery_mode=2)
        yield OutgoingMessage("", "q", b'{"n": %d}' % i, props, f"m{i}")


def _count(url: str) -> int:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        return int(conn.channel().queue_declare("q", passive=True).method.message_count)
    finally:
        conn.close()


def test_a_port_that_never_speaks_amqp_fails_after_the_connect_timeout() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        url = f"amqp://guest:guest@127.0.0.1:{server.getsockname()[1]}/%2F"
        settings = PublisherSettings(url=url, connect_timeout=0.3, delivery_timeout=60.0)
        with pytest.raises(ConnectError) as info:
            publish(settings, _messages(0, 1))
    assert "sent no AMQP handshake within 300 ms (connectTimeoutMs)" in str(info.value)


def test_a_refused_login_is_not_retried(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    try:
        url = broker.url.replace("guest:guest", "guest:wrong")
        with pytest.raises(ConnectError) as info:
            publish(PublisherSettings(url=url, delivery_timeout=60.0), _messages(0, 1))
        text = str(info.value)
        assert "ACCESS_REFUSED" in text and "not retried" in text and ":wrong@" not in text
    finally:
        broker.stop()


def test_a_pooled_connection_outlives_a_broker_restart(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    pool = LinkPool(reaper=False)
    try:
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        conn.channel().queue_declare("q", durable=True)
        conn.close()
        settings = PublisherSettings(url=broker.url, max_in_flight=100)
        first = publish(settings, _messages(0, 500), pool=pool)
        assert first.window.acked == 500 and not first.reused
        second = publish(settings, _messages(500, 500), pool=pool)
        assert second.reused and second.reconnects == 0
        broker.kill()  # while the task's connection sits idle in the pool
        broker.restart()
        third = publish(settings, _messages(1000, 500), pool=pool)
        assert third.window.acked == 500 and third.reconnects == 1
        assert _count(broker.url) == 1500  # persistent, durable: nothing lost
    finally:
        pool.close_all()
        broker.stop()


def test_a_bad_row_closes_gracefully_after_what_was_published(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    try:
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        conn.channel().queue_declare("q", durable=True)
        conn.close()

        def rows() -> Iterator[OutgoingMessage]:
            yield from _messages(0, 700)  # all inside the first window, before any confirm
            raise ValueError("row 700: bad priority")

        with pytest.raises(ValueError, match="row 700"):
            publish(PublisherSettings(url=broker.url), rows())
        # the connection was closed with connection.close, after flushing the 700 publishes
        assert _count(broker.url) == 700
    finally:
        broker.stop()
