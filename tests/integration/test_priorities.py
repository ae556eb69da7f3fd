"""Priority queues (x-max-priority), consumer priorities (x-priority) and single active
consumer (x-single-active-consumer), as RabbitMQ 3.x does them (each scenario was run against
RabbitMQ 3.10 with the same results)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pika
import pytest

from tests.conftest import node_under_test
from tests.integration.ext_support import connect


@pytest.fixture
def conn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[pika.BlockingConnection]:
    with node_under_test(tmp_path_factory) as server:
        connection = connect(server.port)
        yield connection
        if connection.is_open:
            connection.close()


def _wait_for(conn: pika.BlockingConnection, done: Callable[[], bool], timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out waiting for deliveries"
        conn.process_data_events(time_limit=0.05)


def test_priority_queue_delivers_higher_priority_first_fifo_within(
    conn: pika.BlockingConnection,
) -> None:
    ch = conn.channel()
    ch.queue_declare("prio", arguments={"x-max-priority": 5})
    ch.confirm_delivery()
    for body, priority in (
        (b"p0", None),
        (b"p3-a", 3),
        (b"p9", 9),  # above x-max-priority: treated as 5
        (b"p1", 1),
        (b"p3-b", 3),
        (b"p5", 5),
    ):
        ch.basic_publish("", "prio", body, pika.BasicProperties(priority=priority))
    assert ch.queue_declare("prio", passive=True).method.message_count == 6

    order = []
    while True:
        method, _props, body = ch.basic_get("prio")
        if method is None:
            break
        order.append(body)
        if body == b"p5" and not method.redelivered:
            ch.basic_nack(method.delivery_tag, requeue=True)  # back to its place: first again
            ch.basic_publish("", "prio", b"p5-later", pika.BasicProperties(priority=5))
        else:
            ch.basic_ack(method.delivery_tag)
    assert order == [b"p9", b"p5", b"p5", b"p5-later", b"p3-a", b"p3-b", b"p1", b"p0"]


def test_consumer_priority_serves_higher_priority_consumers_while_they_have_credit(
    conn: pika.BlockingConnection,
) -> None:
    ch = conn.channel()
    ch.queue_declare("work")
    got: list[tuple[str, bytes]] = []
    consumers = {"default": None, "high": 10, "middle": 5}
    channels = []
    for name, priority in consumers.items():
        consumer_ch = conn.channel()
        consumer_ch.basic_qos(prefetch_count=1)
        arguments = {"x-priority": priority} if priority is not None else None

        def on_message(_ch: Any, _method: Any, _props: Any, body: bytes, name: str = name) -> None:
            got.append((name, body))

        consumer_ch.basic_consume("work", on_message, arguments=arguments)
        channels.append(consumer_ch)
    for n in range(5):
        ch.basic_publish("", "work", b"%d" % n)
    _wait_for(conn, lambda: len(got) == 3)
    # (pika runs the callbacks channel by channel, so compare who got what, not the order)
    assert dict(got) == {"high": b"0", "middle": b"1", "default": b"2"}  # then no credit
    assert ch.queue_declare("work", passive=True).method.message_count == 2
    for consumer_ch in channels:
        consumer_ch.close()


def test_single_active_consumer_fails_over_in_registration_order(
    conn: pika.BlockingConnection,
) -> None:
    ch = conn.channel()
    ch.queue_declare("sac", arguments={"x-single-active-consumer": True})
    got: list[tuple[int, bytes, bool]] = []
    channels = []
    for number in range(3):
        consumer_ch = conn.channel()
        consumer_ch.basic_qos(prefetch_count=10)

        def on_message(_ch: Any, method: Any, _props: Any, body: bytes, n: int = number) -> None:
            got.append((n, body, method.redelivered))

        consumer_ch.basic_consume("sac", on_message, consumer_tag=f"c{number}")
        channels.append(consumer_ch)
    # all three are registered (RabbitMQ counts waiting consumers too)
    assert ch.queue_declare("sac", passive=True).method.consumer_count == 3
    ch.basic_publish("", "sac", b"1")
    ch.basic_publish("", "sac", b"2")
    _wait_for(conn, lambda: len(got) == 2)
    assert got == [(0, b"1", False), (0, b"2", False)]  # only the first consumer, not round-robin

    channels[0].close()  # unacked 1 and 2 go back; consumer 1 (next registered) takes over
    _wait_for(conn, lambda: len(got) == 4)
    ch.basic_publish("", "sac", b"3")
    _wait_for(conn, lambda: len(got) == 5)
    assert got[2:] == [(1, b"1", True), (1, b"2", True), (1, b"3", False)]
    assert ch.queue_declare("sac", passive=True).method.consumer_count == 2
    channels[2].basic_cancel("c2")
    channels[1].basic_cancel("c1")
    declared = ch.queue_declare("sac", passive=True).method
    assert (declared.consumer_count, declared.message_count) == (0, 0)  # 3 unacked on c1
    channels[1].close()
    assert ch.queue_declare("sac", passive=True).method.message_count == 3
    channels[2].close()
