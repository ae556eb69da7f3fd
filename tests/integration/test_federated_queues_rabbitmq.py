"""Federated queues between amqpd and a private RabbitMQ 3.10 node, both ways: amqpd's link
federating from a RabbitMQ queue, and RabbitMQ's own federation plugin federating from an
amqpd queue. In each, nothing moves while the downstream has no consumer, a consumer on the
downstream gets every message once, and the link consumes upstream at x-priority -1."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from tests.integration.broker_process import BrokerProcess
from tests.integration.fedqueue_support import Collector, consumers, federate, link_running
from tests.integration.rabbit_node import RABBIT_REASON, RabbitNode
from tests.integration.shovel_support import count, publish, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # a busy machine

N = 2000
QUIET = ("--no-management", "--no-prometheus")


@pytest.fixture(scope="module")
def rabbit() -> Iterator[RabbitNode]:
    if RABBIT_REASON is not None:
        pytest.fail(f"these tests need RabbitMQ: {RABBIT_REASON}")
    node = RabbitNode(prefix="fedq", plugins=("rabbitmq_federation",))
    try:
        node.wait()
        yield node
    finally:
        node.stop()


def _consumer_count(url: str, queue: str) -> int:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        return int(conn.channel().queue_declare(queue, passive=True).method.consumer_count)
    finally:
        conn.close()


def _rabbitmqctl_out(rabbit: RabbitNode, *args: str) -> str:
    done = subprocess.run(
        ["rabbitmqctl", "-n", rabbit.node, "-q", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _rabbitmqctl(rabbit: RabbitNode, *args: str) -> None:
    _rabbitmqctl_out(rabbit, *args)


def _received_from(props: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = (props.headers or {}).get("x-received-from", [])
    return found


def _first_message(url: str, queue: str) -> Any:
    """Consume one message (acked) and return its properties."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = conn.channel()
        for method, props, body in channel.consume(queue, inactivity_timeout=60):
            assert body is not None, "no message arrived"
            channel.basic_ack(method.delivery_tag)
            return props
    finally:
        conn.close()


def test_amqpd_federates_a_queue_from_rabbitmq(rabbit: RabbitNode, tmp_path: Path) -> None:
    queue = "fq.r2a"
    publish(rabbit.url, queue, range(N))
    amqpd = BrokerProcess(tmp_path / "a", extra=QUIET)
    try:
        federate(amqpd.data_dir, "rabbit", rabbit.url, pattern=r"^fq\.", prefetch_count=100)
        conn = pika.BlockingConnection(pika.URLParameters(amqpd.url))
        conn.channel().queue_declare(queue, durable=True)
        conn.close()
        wait_for(lambda: link_running(amqpd.data_dir), "the link running")
        assert _consumer_count(rabbit.url, queue) == 0  # no consumer downstream: idle
        assert (count(rabbit.url, queue), count(amqpd.url, queue)) == (N, 0)

        props = _first_message(amqpd.url, queue)
        assert _received_from(props) == [
            {
                "uri": f"amqp://127.0.0.1:{rabbit.port}/%2F",
                "queue": queue,
                "redelivered": False,
                "visit-count": 1,
            }
        ]
        collector = Collector(amqpd.url, queue)
        collector.start()
        try:
            wait_for(lambda: len(set(collector.bodies)) == N - 1, "every message at amqpd")
            # the consumer still waits, so the link still consumes upstream, as RabbitMQ's
            listed = _rabbitmqctl_out(rabbit, "list_consumers", "queue_name", "consumer_tag")
            assert f"{queue}\tfederation-link-rabbit" in listed.splitlines()
        finally:
            collector.finish()
        assert sorted(collector.bodies) == list(range(1, N))  # each once
        assert count(rabbit.url, queue) == 0
        wait_for(lambda: _consumer_count(rabbit.url, queue) == 0, "the link idle again")
    finally:
        amqpd.stop()


def test_rabbitmq_federates_a_queue_from_amqpd(rabbit: RabbitNode, tmp_path: Path) -> None:
    """RabbitMQ's own federation plugin, with amqpd as the upstream: it needs the
    consumer_priorities capability, consumes with nowait at x-priority -1 and cancels
    when its queue no longer wants messages."""
    queue = "fq.a2r"
    amqpd = BrokerProcess(tmp_path / "a", extra=QUIET)
    try:
        publish(amqpd.url, queue, range(N))
        upstream = {"uri": amqpd.url, "prefetch-count": 100}
        _rabbitmqctl(rabbit, "set_parameter", "federation-upstream", "amqpd", json.dumps(upstream))
        definition = json.dumps({"federation-upstream-set": "all"})
        _rabbitmqctl(rabbit, "set_policy", "--apply-to", "queues", "fq", r"^fq\.", definition)
        conn = pika.BlockingConnection(pika.URLParameters(rabbit.url))
        conn.channel().queue_declare(queue, durable=True)
        conn.close()
        # RabbitMQ's link connects (its queue has no consumer: it does not consume)
        wait_for(lambda: _rabbit_link_running(rabbit), "RabbitMQ's link connected to amqpd")
        assert _consumer_count(amqpd.url, queue) == 0
        assert (count(amqpd.url, queue), count(rabbit.url, queue)) == (N, 0)

        props = _first_message(rabbit.url, queue)
        [entry] = _received_from(props)
        assert entry["queue"] == queue and entry["visit-count"] == 1
        collector = Collector(rabbit.url, queue)
        collector.start()
        try:
            wait_for(lambda: len(set(collector.bodies)) == N - 1, "every message at RabbitMQ")
            # RabbitMQ's link consumes from amqpd at x-priority -1 with its default tag
            assert consumers(amqpd.data_dir, queue) == [
                {
                    "queue_name": queue,
                    "consumer_tag": "federation-link-amqpd",
                    "arguments": {"x-priority": -1},
                }
            ]
        finally:
            collector.finish()
        assert sorted(collector.bodies) == list(range(1, N))
        assert count(amqpd.url, queue) == 0
        wait_for(lambda: _consumer_count(amqpd.url, queue) == 0, "RabbitMQ's link cancelled")
    finally:
        _rabbitmqctl(rabbit, "clear_policy", "fq")
        amqpd.stop()


def _rabbit_link_running(rabbit: RabbitNode) -> bool:
    """RabbitMQ's queue link is running (its federation status, read with ``eval``: the
    plugin's CLI command is not found for a node with a private plugins file)."""
    done = subprocess.run(
        ["rabbitmqctl", "-n", rabbit.node, "eval", "rabbit_federation_status:status()."],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return (
        done.returncode == 0 and "{type,queue}" in done.stdout and "{status,running}" in done.stdout
    )
