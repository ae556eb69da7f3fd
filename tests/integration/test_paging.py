"""Long durable queues keep memory bounded: bodies leave memory once committed and come
back in order when consumers reach them (RabbitMQ's lazy-queue behaviour)."""

from __future__ import annotations

from pathlib import Path

import pika

from amqpd.model.queue import HOT_WINDOW
from amqpd.shell.server import Server
from tests.conftest import running_server

PERSISTENT = pika.BasicProperties(delivery_mode=2)
COUNT = 3 * HOT_WINDOW + 100


def _body(n: int) -> bytes:
    return b"%06d" % n + b"." * 1018


def _resident_bodies(server: Server, queue: str) -> int:
    entries = server.broker.vhosts["/"].queues[queue].ready
    return sum(1 for entry in entries if entry.message.body is not None)


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


def test_long_queue_pages_bodies_out_and_back_in_order(tmp_path: Path) -> None:
    with running_server(data_dir=tmp_path) as server:
        _publish(server.port, "long")
        resident = _resident_bodies(server, "long")
        assert resident <= HOT_WINDOW + 1, f"{resident} bodies still in memory"
        assert server.broker.vhosts["/"].queues["long"].ready_bytes == COUNT * 1024
        assert _consume_all(server.port, "long") == [_body(n) for n in range(COUNT)]


def test_restart_loads_only_the_head_bodies(tmp_path: Path) -> None:
    with running_server(data_dir=tmp_path) as server:
        _publish(server.port, "long")
    with running_server(data_dir=tmp_path) as server:
        assert _resident_bodies(server, "long") == HOT_WINDOW
        queue = server.broker.vhosts["/"].queues["long"]
        assert queue.message_count == COUNT and queue.ready_bytes == COUNT * 1024
        assert _consume_all(server.port, "long") == [_body(n) for n in range(COUNT)]
