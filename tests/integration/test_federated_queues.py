"""Federated queues amqpd -> amqpd over real sockets (RabbitMQ's design): messages move to
the broker whose consumer wants them, nothing moves without a consumer, messages follow a
consumer that moves to the other broker and come back (two brokers federating each other,
each message delivered once), and a SIGKILL of either broker during a continuous confirmed
transfer of persistent messages loses nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from tests.integration.broker_process import BrokerProcess
from tests.integration.fedqueue_support import (
    Collector,
    Publisher,
    consumers,
    federate,
    link_running,
    links,
)
from tests.integration.shovel_support import count, publish, wait_for
from tests.integration.tcp_proxy import CuttableProxy

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # a busy machine

QUIET = ("--no-management", "--no-prometheus")


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    """Two brokers: A and B (B federates from A unless a test says otherwise)."""
    brokers = [
        BrokerProcess(tmp_path / "a", extra=QUIET),
        BrokerProcess(tmp_path / "b", extra=QUIET),
    ]
    try:
        yield brokers[0], brokers[1]
    finally:
        for broker in brokers:
            if broker.proc.poll() is None:
                broker.stop()


def _declare(url: str, queue: str = "fq") -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        conn.channel().queue_declare(queue, durable=True)
    finally:
        conn.close()


def _take(channel: Any, queue: str, n: int, ack: bool = True) -> list[tuple[int, Any]]:
    """Receive ``n`` messages from ``queue`` (consuming), acking each unless told not to;
    returns (body, properties) pairs. Fails if they do not come within the deadline."""
    got: list[tuple[int, Any]] = []
    for method, props, body in channel.consume(queue, inactivity_timeout=60):
        assert body is not None, f"only {len(got)} of {n} messages arrived"
        got.append((int(body), props))
        if ack:
            channel.basic_ack(method.delivery_tag)
        if len(got) == n:
            break
    return got


def _received_from(props: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = (props.headers or {}).get("x-received-from", [])
    return found


def test_messages_move_only_while_the_downstream_has_a_consumer(
    pair: tuple[BrokerProcess, BrokerProcess],
) -> None:
    a, b = pair
    publish(a.url, "fq", range(100))  # no consumer on A
    federate(b.data_dir, "up", a.url, prefetch_count=10)
    _declare(b.url)
    wait_for(lambda: link_running(b.data_dir), "the link running")
    [link] = links(b.data_dir)
    assert (link["type"], link["queue"], link["upstream"], link["upstream_queue"]) == (
        "queue",
        "fq",
        "up",
        "fq",
    )
    assert link["uri"] == f"amqp://127.0.0.1:{a.port}/%2F"  # no credentials
    assert consumers(a.data_dir, "fq") == []  # B has no consumer: the link does not consume
    assert (count(a.url, "fq"), count(b.url, "fq")) == (100, 0)

    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    channel = conn.channel()
    channel.basic_qos(prefetch_count=5)
    got = _take(channel, "fq", 100)
    assert [body for body, _props in got] == list(range(100))  # in order, each once
    headers = got[0][1].headers
    assert headers["x-received-from"] == [
        {
            "uri": f"amqp://127.0.0.1:{a.port}/%2F",
            "queue": "fq",
            "redelivered": False,
            "visit-count": 1,
        }
    ]
    assert (headers["x-original-exchange"], headers["x-original-routing-key"]) == ("", "fq")
    [link_consumer] = consumers(a.data_dir, "fq")
    assert link_consumer["consumer_tag"] == "federation-link-up"
    assert link_consumer["arguments"] == {"x-priority": -1}

    channel.cancel()
    wait_for(lambda: consumers(a.data_dir, "fq") == [], "the link to stop consuming upstream")
    publish(a.url, "fq", range(100, 150))
    assert (count(a.url, "fq"), count(b.url, "fq")) == (50, 0)
    got = _take(channel, "fq", 50)  # a consumer again: they move
    assert [body for body, _props in got] == list(range(100, 150))
    conn.close()
    assert count(a.url, "fq") == 0


def test_upstream_consumers_win_over_the_link(
    pair: tuple[BrokerProcess, BrokerProcess],
) -> None:
    """The link consumes at x-priority -1: while A's own consumer has credit, A's messages
    go to it, not to B."""
    a, b = pair
    _declare(a.url)
    federate(b.data_dir, "up", a.url, prefetch_count=10)
    down = pika.BlockingConnection(pika.URLParameters(b.url))
    down_channel = down.channel()
    down_channel.queue_declare("fq", durable=True)
    down_channel.basic_consume("fq", lambda *args: None)  # wants messages, never gets any
    wait_for(lambda: len(consumers(a.data_dir, "fq")) == 1, "the link consuming on A")
    up = pika.BlockingConnection(pika.URLParameters(a.url))
    up_channel = up.channel()
    up_channel.basic_qos(prefetch_count=1000)
    got: list[int] = []

    def take(channel: Any, method: Any, _props: Any, body: bytes) -> None:
        got.append(int(body))
        channel.basic_ack(method.delivery_tag)

    up_channel.basic_consume("fq", take)
    publish(a.url, "fq", range(200))
    while len(got) < 200:
        up.process_data_events(time_limit=60)
    assert sorted(got) == list(range(200))
    up.close()
    down.close()
    assert count(b.url, "fq") == 0


def test_messages_follow_the_consumer_and_flow_back(
    pair: tuple[BrokerProcess, BrokerProcess],
) -> None:
    """A and B federate the queue from each other (ActiveMQ's replayWhenNoConsumers):
    a consumer on B takes part of A's messages; when it leaves with messages still at B
    and a consumer appears on A, they come back. Each message is delivered once."""
    a, b = pair
    federate(a.data_dir, "b", b.url, prefetch_count=20)
    federate(b.data_dir, "a", a.url, prefetch_count=20)
    _declare(a.url)
    _declare(b.url)
    publish(a.url, "fq", range(300))
    wait_for(lambda: link_running(a.data_dir) and link_running(b.data_dir), "both links")

    on_b = pika.BlockingConnection(pika.URLParameters(b.url))
    channel_b = on_b.channel()
    channel_b.basic_qos(prefetch_count=10)
    acked = [body for body, _props in _take(channel_b, "fq", 90)]
    held = _take(channel_b, "fq", 10, ack=False)  # B's consumer is now blocked
    wait_for(lambda: consumers(a.data_dir, "fq") == [], "B's link to stop consuming on A")
    on_b.close()  # the 10 held ones go back to B's queue
    stranded = count(b.url, "fq")
    assert stranded >= len(held)
    assert consumers(b.data_dir, "fq") == []  # A has no consumer: its link is idle

    on_a = pika.BlockingConnection(pika.URLParameters(a.url))
    channel_a = on_a.channel()
    channel_a.basic_qos(prefetch_count=10)
    rest = _take(channel_a, "fq", 300 - len(acked))
    bodies = [body for body, _props in rest]
    assert sorted(acked + bodies) == list(range(300))  # each message once
    came_back = [props for _body, props in rest if len(_received_from(props)) == 2]
    assert len(came_back) >= stranded  # moved A -> B -> A
    entry = came_back[0].headers["x-received-from"]
    assert [item["uri"] for item in entry] == [
        f"amqp://127.0.0.1:{b.port}/%2F",
        f"amqp://127.0.0.1:{a.port}/%2F",
    ]
    on_a.close()
    assert (count(a.url, "fq"), count(b.url, "fq")) == (0, 0)


N = 3000


def _crash_during_transfer(victim: BrokerProcess, a: BrokerProcess, b: BrokerProcess) -> None:
    """B federates from A; a publisher writes N persistent messages to A with confirms
    while a consumer on B takes them; ``victim`` is SIGKILLed and restarted mid-way."""
    federate(b.data_dir, "up", a.url, prefetch_count=100, reconnect_delay=0.5)
    collector = Collector(b.url, "fq")
    collector.start()
    publisher = Publisher(a.url, "fq", N)
    publisher.start()
    try:
        wait_for(lambda: len(collector.bodies) >= N // 5, "the transfer under way")
        victim.kill()
        victim.restart()
        wait_for(lambda: not publisher.is_alive(), "every message published and confirmed")
        confirmed = set(publisher.confirmed)
        assert confirmed == set(range(N))
        wait_for(lambda: confirmed <= set(collector.bodies), "every confirmed message consumed")
    finally:
        collector.finish()
    duplicates = len(collector.bodies) - len(set(collector.bodies))
    assert duplicates <= N  # at most once more each (on-confirm: at least once)
    assert set(collector.bodies) == confirmed


def test_kill_downstream_during_transfer_loses_nothing(
    pair: tuple[BrokerProcess, BrokerProcess],
) -> None:
    a, b = pair
    _crash_during_transfer(b, a, b)


def test_kill_upstream_during_transfer_loses_nothing(
    pair: tuple[BrokerProcess, BrokerProcess],
) -> None:
    a, b = pair
    _crash_during_transfer(a, a, b)


def test_a_cut_and_a_silently_partitioned_link_come_back_and_lose_nothing(
    pair: tuple[BrokerProcess, BrokerProcess],
) -> None:
    """The link to the upstream goes through a proxy that resets it once, then freezes it
    (a partition that closes nothing: the link's heartbeats notice); it comes back each
    time by itself and every confirmed message reaches the downstream consumer."""
    a, b = pair
    proxy = CuttableProxy(a.port)
    try:
        uri = f"amqp://guest:guest@127.0.0.1:{proxy.port}/%2F?heartbeat=2"
        federate(b.data_dir, "up", uri, prefetch_count=100, reconnect_delay=0.2)
        collector = Collector(b.url, "fq")
        collector.start()
        publisher = Publisher(a.url, "fq", N)
        publisher.start()
        try:
            wait_for(lambda: len(collector.bodies) >= N // 5, "the transfer under way")
            proxy.cut()
            wait_for(lambda: len(collector.bodies) >= 2 * N // 5, "the transfer going on")
            before = proxy.accepted
            proxy.freeze()
            wait_for(lambda: proxy.accepted > before, "the link reconnected after the partition")
            wait_for(lambda: not publisher.is_alive(), "every message published and confirmed")
            confirmed = set(publisher.confirmed)
            wait_for(lambda: confirmed <= set(collector.bodies), "every confirmed message consumed")
        finally:
            collector.finish()
        assert set(collector.bodies) == confirmed == set(range(N))
    finally:
        proxy.close()
