"""Celery's QoS on amqpd behaves as on RabbitMQ (issue 21, item 10), driven through kombu
exactly as a Celery worker drives it.

kombu decides from Connection.Start's ``product`` / ``version`` whether basic.qos follows
RabbitMQ's semantics (``qos_semantics_matches_spec`` False for RabbitMQ 3.3 to 3.x). A
Celery worker then sets its prefetch with ``global=true``: one limit for its channel,
shared by the consumers of all its queues and changed on the fly when an ETA/countdown
task is held (``QoS.increment_eventually``). With per-consumer ``global=false`` the
increase never reached the running consumer and three queues held three prefetches.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import kombu
import kombu.common
import pytest

from amqpd.shell.server import Server

DEADLINE = 15.0


def drain_until(conn: kombu.Connection, done: Any, what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        with contextlib.suppress(TimeoutError):
            conn.drain_events(timeout=0.2)


def sync(channel: Any) -> None:
    """A round trip on ``channel``: frames on a channel are ordered, so every delivery the
    broker sent before answering has been handed to the consumer callback when it returns
    (py-amqp dispatches them while it waits for the reply)."""
    channel.queue_declare(queue="celery", passive=True)


def test_kombu_uses_rabbitmq_qos_semantics_and_celerys_prefetch_changes_apply(
    server: Server,
) -> None:
    url = f"amqp://guest:guest@127.0.0.1:{server.port}//"
    with kombu.Connection(url) as conn:
        conn.connect()
        props = conn.connection.server_properties
        assert props["product"] == "RabbitMQ" and props["capabilities"]["consumer_priorities"]
        assert conn.qos_semantics_matches_spec is False  # so Celery sets qos_global=True
        qos_global = not conn.qos_semantics_matches_spec

        channel = conn.channel()
        names = ["celery", "celery.high", "celery.low"]
        queues = [kombu.Queue(name, routing_key=name, channel=channel) for name in names]
        with kombu.Producer(channel) as producer:
            for queue in queues:
                queue.declare()
                for n in range(10):
                    producer.publish({"n": n}, routing_key=queue.name)

        held: list[kombu.Message] = []
        qos = kombu.common.QoS(
            lambda prefetch_count: channel.basic_qos(0, prefetch_count, qos_global), 2
        )
        qos.update()
        with kombu.Consumer(channel, queues, callbacks=[lambda _b, m: held.append(m)]):
            drain_until(conn, lambda: len(held) >= 2, "the first prefetch")
            sync(channel)
            assert len(held) == 2  # one prefetch for the worker's channel, not one per queue

            # an ETA task is held: Celery raises the prefetch and the running consumer gets more
            qos.increment_eventually()
            qos.update()
            drain_until(conn, lambda: len(held) >= 3, "the raised prefetch")
            sync(channel)
            assert len(held) == 3

            # the ETA task runs: the prefetch goes back down and nothing more arrives until acks
            qos.decrement_eventually()
            qos.update()
            held[0].ack()
            sync(channel)
            assert len(held) == 3
            held[1].ack()
            drain_until(conn, lambda: len(held) >= 4, "a message after the acks")
