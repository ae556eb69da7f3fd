"""Long durable queues keep memory bounded: bodies leave memory once committed and come
back in order when consumers reach them (RabbitMQ's lazy-queue behaviour). What is in
memory is read as an operator reads it (``amqpd ctl list-queues messages_ready_ram
message_bytes_ready``), so the tests also run against a ``--workers`` node
(`tests/conftest.py` node_under_test)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pika
import pytest

from amqpd.cli.ctl import main as ctl
from amqpd.model.queue import HOT_WINDOW
from tests.conftest import node_under_test

PERSISTENT = pika.BasicProperties(delivery_mode=2)
COUNT = 3 * HOT_WINDOW + 100


def _body(n: int) -> bytes:
    return b"%06d" % n + b"." * 1018


def _queue(data: Path, queue: str) -> dict[str, int]:
    """``queue``'s row of ``amqpd ctl list-queues``: ready messages, how many of them hold
    their body in memory, and their bytes."""
    out = io.StringIO()
    columns = ("name", "messages_ready", "messages_ready_ram", "message_bytes_ready")
    listing = ["list-queues", *columns, "--data-dir", str(data), "--format", "json"]
    assert ctl(listing, out) == 0
    [row] = [row for row in json.loads(out.getvalue()) if row["name"] == queue]
    return {key: int(row[key]) for key in columns[1:]}


def _publish(port: int, queue: str) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    ch = conn.channel()
    ch.queue_declare(queue, durable=True)
    ch.confirm_delivery()
    for n in range(COUNT):
        ch.basic_publish("", queue, _body(n), PERSISTENT)
    conn.close()


def _consume_all(port: int, queue: str) -> list[bytes]:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    ch = conn.channel()
    bodies = [ch.basic_get(queue, auto_ack=True)[2] for _ in range(10)]  # basic.get path
    ch.basic_qos(prefetch_count=200)
    for method, _props, body in ch.consume(queue, inactivity_timeout=5):
        if method is None:
            break
        bodies.append(body)
        ch.basic_ack(method.delivery_tag)
        if len(bodies) == COUNT:
            break
    ch.cancel()
    conn.close()
    return bodies


def test_long_queue_pages_bodies_out_and_back_in_order(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    with node_under_test(tmp_path_factory, data_dir=data) as server:
        _publish(server.port, "long")
        queue = _queue(data, "long")
        resident = queue["messages_ready_ram"]
        assert resident <= HOT_WINDOW + 1, f"{resident} bodies still in memory"
        assert queue["messages_ready"] == COUNT
        assert queue["message_bytes_ready"] == COUNT * 1024
        assert _consume_all(server.port, "long") == [_body(n) for n in range(COUNT)]


def test_restart_loads_only_the_head_bodies(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    with node_under_test(tmp_path_factory, data_dir=data) as server:
        _publish(server.port, "long")
    with node_under_test(tmp_path_factory, data_dir=data) as server:
        queue = _queue(data, "long")
        assert queue == {
            "messages_ready": COUNT,
            "messages_ready_ram": HOT_WINDOW,
            "message_bytes_ready": COUNT * 1024,
        }
        assert _consume_all(server.port, "long") == [_body(n) for n in range(COUNT)]
