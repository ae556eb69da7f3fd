"""Shovels between amqpd and a private RabbitMQ 3.10 node, both ways: a cut link, a SIGKILL
of amqpd and a SIGKILL of RabbitMQ during a transfer of persistent messages lose nothing
(on-confirm), and the link comes back by itself each time."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.broker_process import BrokerProcess
from tests.integration.rabbit_node import RABBIT_REASON, RabbitNode
from tests.integration.shovel_support import Sink, count, drain, publish, set_shovel, wait_for
from tests.integration.tcp_proxy import CuttableProxy

pytestmark = pytest.mark.slow

N = 12000
QUIET = ("--no-management", "--no-prometheus")


@pytest.fixture(scope="module")
def rabbit() -> Iterator[RabbitNode]:
    if RABBIT_REASON is not None:
        pytest.fail(f"these tests need RabbitMQ: {RABBIT_REASON}")
    node = RabbitNode(prefix="shovel")
    try:
        node.wait()
        yield node
    finally:
        node.stop()


def _crash_rabbit(rabbit: RabbitNode) -> None:
    rabbit.kill_and_restart()
    rabbit.wait()


def _phase(url: str, queue: str, part: int) -> None:
    wait_for(lambda: count(url, queue) >= part * N // 6, f"{part}/6 of the messages moved")


def test_rabbitmq_to_amqpd(rabbit: RabbitNode, tmp_path: Path) -> None:
    queue = "shovel.r2a"
    publish(rabbit.url, queue, range(N))
    proxy = CuttableProxy(rabbit.port)
    amqpd = BrokerProcess(tmp_path / "a", extra=QUIET)
    try:
        source = f"amqp://guest:guest@127.0.0.1:{proxy.port}/%2F"
        value = {
            "src-uri": source,
            "src-queue": queue,
            "dest-uri": "amqp://",
            "dest-queue": "dst",
            "reconnect-delay": 0.2,
            "src-prefetch-count": 200,
        }
        set_shovel(amqpd.data_dir, "r2a", value)
        _phase(amqpd.url, "dst", 1)
        proxy.cut()
        _phase(amqpd.url, "dst", 2)
        amqpd.kill()
        amqpd = BrokerProcess(tmp_path / "a", extra=QUIET)
        _phase(amqpd.url, "dst", 3)
        _crash_rabbit(rabbit)
        wait_for(lambda: count(rabbit.url, queue) == 0, "the RabbitMQ queue empty")
        seen, _total = drain(amqpd.url, "dst", N)
        assert seen == set(range(N)), f"missing: {sorted(set(range(N)) - seen)[:20]}"
    finally:
        proxy.close()
        amqpd.stop()


def test_amqpd_to_rabbitmq(rabbit: RabbitNode, tmp_path: Path) -> None:
    queue = "shovel.a2r"
    proxy = CuttableProxy(rabbit.port)
    amqpd = BrokerProcess(tmp_path / "a", extra=QUIET)
    sink = Sink(rabbit.url, queue)  # RabbitMQ's consumer: it drains as messages arrive
    try:
        publish(amqpd.url, "src", range(N))
        value = {
            "src-uri": "amqp://",
            "src-queue": "src",
            "dest-uri": f"amqp://guest:guest@127.0.0.1:{proxy.port}/%2F",
            "dest-queue": queue,
            "reconnect-delay": 0.2,
            "src-prefetch-count": 200,
        }
        set_shovel(amqpd.data_dir, "a2r", value)
        sink.wait_for(N // 6)
        proxy.cut()
        sink.wait_for(2 * N // 6)
        _crash_rabbit(rabbit)  # during the transfer: unconfirmed publishes must come again
        sink.wait_for(3 * N // 6)
        amqpd.kill()
        amqpd = BrokerProcess(tmp_path / "a", extra=QUIET)
        wait_for(lambda: count(amqpd.url, "src") == 0, "the amqpd queue empty")
        with contextlib.suppress(AssertionError):
            sink.wait_for(N)
        seen = set(sink.seen)
        assert seen == set(range(N)), f"missing: {sorted(set(range(N)) - seen)[:20]}"
    finally:
        sink.stop()
        proxy.close()
        amqpd.stop()
