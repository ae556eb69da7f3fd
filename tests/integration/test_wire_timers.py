"""Timers run when the core's deadline is due, not on a periodic tick (issue 21, items 9 and
11). Each server here ticks periodically only once an hour (``tick_interval=3600``), so
everything these tests see happen on time was driven by the deadline the core reported:
heartbeats every half interval, message TTL / expiration dead-lettering, x-expires. Under
AMQPD_TEST_WORKERS the first three run against a node (its default tick; the connections
handed over to the worker serving "/").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pika
import pika.exceptions
import pytest
from pamqp.heartbeat import Heartbeat

from tests.conftest import node_under_test, running_server
from tests.integration.raw_client import RawClient

HOURLY = 3600.0
DEADLINE = 15.0  # generous: a busy machine; without deadline-driven timers it is an hour


def wait_for(condition: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.02)  # polling an observable condition: the broker offers no event
    pytest.fail(f"{what} did not happen within {DEADLINE} s")


def test_heartbeat_1_client_gets_heartbeats_without_periodic_ticks(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with (
        node_under_test(tmp_path_factory, HOURLY) as srv,
        RawClient.open(srv.port, heartbeat=1) as client,
    ):
        for _ in range(5):
            channel, frame = client.read_frame(timeout=DEADLINE)
            assert isinstance(frame, Heartbeat) and channel == 0, frame
            client.send(0, Heartbeat())
        client.open_channel(1)  # still open: the broker saw our heartbeats


def test_silent_heartbeat_1_client_is_dropped_without_periodic_ticks(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with (
        node_under_test(tmp_path_factory, HOURLY) as srv,
        RawClient.open(srv.port, heartbeat=1) as client,
    ):
        frames = client.read_until_closed(timeout=DEADLINE)
        assert frames and all(isinstance(f, Heartbeat) for _c, f in frames), frames


@pytest.mark.parametrize(
    ("queue_arguments", "properties"),
    [
        ({"x-message-ttl": 100}, pika.BasicProperties()),
        ({}, pika.BasicProperties(expiration="100")),
    ],
)
def test_ttl_dead_letters_on_time_without_periodic_ticks(
    tmp_path_factory: pytest.TempPathFactory,
    queue_arguments: dict[str, Any],
    properties: pika.BasicProperties,
) -> None:
    """The delayed-retry pattern (TTL + DLX) works from the queue's own deadline."""
    with node_under_test(tmp_path_factory, HOURLY) as srv:
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", srv.port))
        try:
            ch = conn.channel()
            ch.exchange_declare("retry-dlx", "fanout")
            ch.queue_declare("retry-dlq")
            ch.queue_bind("retry-dlq", "retry-dlx")
            ch.queue_declare(
                "retry-wait", arguments={"x-dead-letter-exchange": "retry-dlx", **queue_arguments}
            )
            ch.basic_publish("", "retry-wait", b"try again", properties)

            def dead_lettered() -> bytes | None:
                _method, _props, body = ch.basic_get("retry-dlq", auto_ack=True)
                return body

            assert wait_for(dead_lettered, "dead-lettering") == b"try again"
            assert ch.queue_declare("retry-wait", passive=True).method.message_count == 0
        finally:
            conn.close()


def test_x_expires_deletes_the_queue_without_periodic_ticks() -> None:
    """In this process whatever AMQPD_TEST_WORKERS says: the periodic tick is an
    in-process setting (a node's timers always run on their deadlines)."""
    with running_server(tick_interval=HOURLY) as srv:
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", srv.port))
        try:
            conn.channel().queue_declare("short-lived", arguments={"x-expires": 200})
            vhost = srv.broker.vhosts["/"]
            wait_for(lambda: "short-lived" not in vhost.queues, "x-expires")
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
                conn.channel().queue_declare("short-lived", passive=True)
            assert info.value.reply_code == 404
        finally:
            conn.close()
