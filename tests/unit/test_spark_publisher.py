"""Spark sink: the confirm window and the partition publisher against a fake pika connection.

No Spark session and no sockets: ``FakeBroker`` stands in for ``pika.SelectConnection`` with a
virtual-time I/O loop, so timeouts take no real time.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import pika
import pika.connection
import pika.exceptions
import pytest
from pika.spec import Basic

pytest.importorskip("pyspark", reason="the Spark connector needs pyspark (the spark extra)")


from interop.spark.errors import (
    BrokerNacked,
    ChannelClosed,
    ConfirmTimeout,
    ConnectError,
    ConnectionLost,
    MessageReturned,
    PublishError,
)
from interop.spark.link import Transport
from interop.spark.message import OutgoingMessage
from interop.spark.options import SinkOptions
from interop.spark.pool import LinkPool
from interop.spark.publisher import PublisherSettings, PublishStats, publish
from interop.spark.report import TaskReport, summarize_abort, summarize_commit
from interop.spark.task import TaskInfo
from interop.spark.window import ConfirmWindow
from interop.spark.writer import AmqpStreamWriter

URL = "amqp://guest:s3cret@127.0.0.1:5672/%2F"


def msg(i: int, size: int = 10) -> OutgoingMessage:
    return OutgoingMessage("", "q", b"x" * size, pika.BasicProperties(message_id=f"m{i}"), f"m{i}")


# -- ConfirmWindow ------------------------------------------------------------------------


def test_window_settles_multiple_and_single_confirms() -> None:
    window = ConfirmWindow(max_in_flight=4, confirm_timeout=5.0)
    tags = [window.published(msg(i), now=0.0) for i in range(4)]
    assert tags == [1, 2, 3, 4] and window.room == 0 and window.stats.max_outstanding == 4
    assert window.confirmed(3, multiple=False, ack=True, now=1.0) == 1
    assert window.confirmed(2, multiple=True, ack=True, now=1.0) == 2  # tags 1 and 2
    assert window.outstanding == 1 and window.room == 3
    assert window.confirmed(2, multiple=True, ack=True, now=1.0) == 0  # nothing left below 2
    assert window.confirmed(4, multiple=True, ack=True, now=1.0) == 1
    assert window.failure is None
    stats = window.stats
    assert (stats.published, stats.acked, stats.nacked, stats.bytes) == (4, 4, 0, 40)
    assert (stats.first_message_id, stats.last_message_id) == ("m0", "m3")


def test_window_nack_multiple_is_the_failure() -> None:
    window = ConfirmWindow(max_in_flight=10, confirm_timeout=5.0)
    for i in range(6):
        window.published(msg(i), now=0.0)
    window.confirmed(2, multiple=True, ack=True, now=0.0)
    window.confirmed(5, multiple=True, ack=False, now=0.0)
    assert isinstance(window.failure, BrokerNacked)
    assert "broker nacked 3 message(s): delivery tags 3..5 (multiple=True), 'm2'..'m4'" in str(
        window.failure
    )
    assert window.stats.nacked == 3 and window.room == 0
    window.returned(312, "NO_ROUTE", "", "q", "m5")
    assert isinstance(window.failure, BrokerNacked)  # the first failure is kept


def test_window_unknown_single_tag_is_a_protocol_error() -> None:
    window = ConfirmWindow(max_in_flight=10, confirm_timeout=5.0)
    window.published(msg(0), now=0.0)
    window.confirmed(7, multiple=False, ack=True, now=0.0)
    assert isinstance(window.failure, PublishError)
    assert "acked delivery tag 7, which is not outstanding" in str(window.failure)


def test_window_stall_counts_from_the_last_progress() -> None:
    window = ConfirmWindow(max_in_flight=10, confirm_timeout=3.0)
    assert window.stalled(100.0) is None  # nothing outstanding: never stalled
    window.published(msg(0), now=100.0)
    window.published(msg(1), now=102.0)
    window.confirmed(1, multiple=False, ack=True, now=102.5)
    assert window.stalled(105.4) is None
    stalled = window.stalled(105.5)
    assert isinstance(stalled, ConfirmTimeout) and window.failure is None
    assert str(stalled) == (
        "no publisher confirm for 3000 ms with 1 message(s) outstanding "
        "(delivery tags 2..2, 2 published)"
    )


def test_window_rebase_hands_back_the_unconfirmed_in_order() -> None:
    window = ConfirmWindow(max_in_flight=10, confirm_timeout=3.0)
    for i in range(5):
        window.published(msg(i), now=0.0)
    window.confirmed(2, multiple=True, ack=True, now=0.0)
    window.confirmed(4, multiple=False, ack=True, now=0.0)
    again = window.rebase(next_tag=1)
    assert [m.message_id for m in again] == ["m2", "m4"] and window.outstanding == 0
    assert [window.published(m, now=1.0, again=True) for m in again] == [1, 2]
    assert (window.stats.published, window.stats.republished) == (5, 2)
    window.confirmed(2, multiple=True, ack=True, now=1.0)
    assert window.stats.acked == 5 and window.failure is None


# -- a fake broker behind pika's SelectConnection interface ------------------------------


class FakeLoop:
    """Runs callbacks in order; when idle, jumps virtual time to the next timer."""

    def __init__(self) -> None:
        self.now = 0.0
        self.ready: deque[Callable[[], None]] = deque()
        self.timers: dict[int, tuple[float, Callable[[], None]]] = {}
        self.ids = itertools.count()
        self.running = False
        self.stopping = False

    def call_later(self, delay: float, callback: Callable[[], None]) -> int:
        timer = next(self.ids)
        self.timers[timer] = (self.now + delay, callback)
        return timer

    def remove_timeout(self, timer: int) -> None:
        self.timers.pop(timer, None)

    def soon(self, callback: Callable[[], None]) -> None:
        self.ready.append(callback)

    def start(self) -> None:
        # like pika's IOLoop: a stop() requested while not running ends the next start()
        assert not self.running, "IOLoop is not reentrant"
        self.running = True
        try:
            while not self.stopping:
                if self.ready:
                    self.ready.popleft()()
                    continue
                assert self.timers, "deadlock: nothing ready and no timer"
                timer, (due, callback) = min(self.timers.items(), key=lambda item: item[1][0])
                del self.timers[timer]
                self.now = max(self.now, due)
                callback()
        finally:
            self.running = self.stopping = False

    def stop(self) -> None:
        self.stopping = True

    def close(self) -> None:
        pass


Frame = tuple[Any, ...]
Policy = Callable[[list[tuple[int, OutgoingMessage]]], list[Frame]]


def ack_all(pending: list[tuple[int, OutgoingMessage]]) -> list[Frame]:
    """Coalesced: one ``ack multiple`` for everything received."""
    return [("ack", pending[-1][0], True)]


class FakeServer:
    """A broker on one virtual-time loop; ``connect`` has ``pika.SelectConnection``'s signature.

    ``down_until``: connections before that time are refused. ``refusal``: every connection
    fails to open with this error. ``silent``: TCP accepted, no AMQP handshake. ``mute``: no
    answers at all once connected (a frozen broker). ``kill_after``: after that many
    publishes in total, the broker dies (every connection lost, unconfirmed publishes
    forgotten) and stays down for ``outage`` seconds.
    """

    def __init__(self, policy: Policy = ack_all) -> None:
        self.policy = policy
        self.loop = FakeLoop()
        self.down_until = 0.0
        self.refusal: Exception | None = None
        self.silent = False
        self.mute = False
        self.kill_after: int | None = None
        self.outage = 0.0
        self.received: list[OutgoingMessage] = []
        self.confirmed: list[str | None] = []
        self.connections: list[FakeConnection] = []
        self.slept: list[float] = []

    def transport(self) -> Transport:
        return Transport(
            connection_factory=self.connect,
            ioloop_factory=lambda: self.loop,
            clock=lambda: self.loop.now,
            sleep=self.sleep,
            jitter=lambda: 0.5,
        )

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.loop.now += seconds

    def connect(self, params: Any, **callbacks: Any) -> FakeConnection:
        conn = FakeConnection(self, params, callbacks)
        self.connections.append(conn)
        if self.loop.now < self.down_until:
            refused = pika.exceptions.AMQPConnectionError("ConnectionRefusedError(111)")
            self.loop.soon(lambda: conn.open_failed(refused))
        elif self.refusal is not None:
            error = self.refusal
            self.loop.soon(lambda: conn.open_failed(error))
        elif self.silent:  # pika's stack_timeout aborts the handshake
            conn.connection_state = pika.connection.Connection.CONNECTION_PROTOCOL
            aborted = pika.exceptions.ConnectionOpenAborted("Timeout while setting up AMQP")
            self.loop.call_later(params.stack_timeout, lambda: conn.open_failed(aborted))
        elif not self.mute:
            self.loop.soon(conn.opened)
        return conn

    def kill(self) -> None:
        self.down_until = self.loop.now + self.outage
        for conn in self.connections:
            if conn.state in ("open", "closing"):
                conn.lost(pika.exceptions.StreamLostError("Transport indicated EOF"))


class FakeConnection:
    """One connection and its one channel (the fake is its own channel)."""

    def __init__(self, server: FakeServer, params: Any, callbacks: dict[str, Any]) -> None:
        self.server = server
        self.params = params
        self.callbacks = callbacks
        self.state = "opening"
        self.connection_state = pika.connection.Connection.CONNECTION_INIT
        self.pending: list[tuple[int, OutgoingMessage]] = []
        self.tags = 0
        self.channel_open = False

    is_open = property(lambda self: self.state == "open")
    is_closed = property(lambda self: self.state == "closed")
    is_closing = property(lambda self: self.state == "closing")

    def opened(self) -> None:
        if self.state == "opening":
            self.state = "open"
            self.connection_state = pika.connection.Connection.CONNECTION_OPEN
            self.callbacks["on_open_callback"](self)

    def open_failed(self, error: Exception) -> None:
        if self.state == "opening":
            self.state = "closed"
            self.callbacks["on_open_error_callback"](self, error)

    def lost(self, error: Exception) -> None:
        self.state = "closed"
        self.pending = []
        if self.channel_open:
            self.channel_open = False
            self.on_channel_close(self, error)
        self.callbacks["on_close_callback"](self, error)

    def channel(self, on_open_callback: Callable[[Any], None]) -> None:
        def opened() -> None:
            self.channel_open = True
            on_open_callback(self)

        self.server.loop.soon(opened)

    def add_on_close_callback(self, callback: Callable[..., None]) -> None:
        self.on_channel_close = callback

    def add_on_return_callback(self, callback: Callable[..., None]) -> None:
        self.on_return = callback

    def confirm_delivery(self, ack_nack_callback: Callable[..., None], callback: Any) -> None:
        self.on_confirm = ack_nack_callback
        self.server.loop.soon(lambda: callback(None))

    def basic_publish(
        self, exchange: str, routing_key: str, body: bytes, properties: Any, mandatory: bool
    ) -> None:
        assert mandatory
        if self.state != "open":
            raise pika.exceptions.ConnectionWrongStateError("connection closed")
        server = self.server
        if not self.pending and not server.mute:
            server.loop.soon(self._answer)
        message = OutgoingMessage(exchange, routing_key, body, properties, properties.message_id)
        server.received.append(message)
        self.tags += 1
        self.pending.append((self.tags, message))
        if server.kill_after is not None and len(server.received) == server.kill_after:
            server.loop.soon(server.kill)

    def _answer(self) -> None:
        if self.state != "open" or not self.pending:
            return
        pending, self.pending = self.pending, []
        for frame in self.server.policy(pending):
            if frame[0] in ("ack", "nack"):
                cls = Basic.Ack if frame[0] == "ack" else Basic.Nack
                if frame[0] == "ack":
                    done = [m for t, m in pending if t <= frame[1]] if frame[2] else []
                    done += [m for t, m in pending if t == frame[1] and not frame[2]]
                    self.server.confirmed.extend(m.message_id for m in done)
                method = cls(delivery_tag=frame[1], multiple=frame[2])
                self.on_confirm(type("Frame", (), {"method": method})())
            elif frame[0] == "return":
                message = frame[1]
                method = Basic.Return(312, "NO_ROUTE", message.exchange, message.routing_key)
                self.on_return(self, method, message.properties, message.body)
            elif frame[0] == "close_channel":
                self.channel_open = False
                self.on_channel_close(self, pika.exceptions.ChannelClosedByBroker(*frame[1:]))

    def close(self) -> None:
        if self.state == "opening":
            aborted = pika.exceptions.ConnectionOpenAborted("close() before open")
            self.server.loop.soon(lambda: self.open_failed(aborted))
            return
        self.state = "closing"
        if not self.server.mute:
            self.server.loop.soon(self._closed)

    def _closed(self) -> None:
        if self.state == "closing":
            self.lost(pika.exceptions.ConnectionClosedByClient(200, "Normal shutdown"))

    def _terminate_stream(self, error: Exception) -> None:
        if self.state != "closed":
            self.server.loop.soon(lambda: self.lost(error))


def messages(n: int) -> Iterator[OutgoingMessage]:
    for i in range(n):
        yield msg(i)


def run(
    server: FakeServer,
    source: Iterator[OutgoingMessage],
    pool: LinkPool | None = None,
    **settings: Any,
) -> PublishStats:
    config = PublisherSettings(url=URL, connection_name="spark-t:worker-1", **settings)
    return publish(config, source, transport=server.transport(), pool=pool)


# -- publisher ------------------------------------------------------------------------------


def test_publishes_everything_within_the_window_then_closes() -> None:
    server = FakeServer()
    stats = run(server, messages(2500), max_in_flight=100).window
    assert (stats.published, stats.acked, stats.max_outstanding) == (2500, 2500, 100)
    assert [m.message_id for m in server.received] == [f"m{i}" for i in range(2500)]
    [conn] = server.connections
    assert conn.state == "closed"
    assert conn.params.client_properties["connection_name"] == "spark-t:worker-1"
    assert conn.params.blocked_connection_timeout == 30.0
    assert conn.params.heartbeat == 0  # an idle pooled link cannot answer heartbeats


def test_single_out_of_order_acks() -> None:
    def reverse(pending: list[tuple[int, OutgoingMessage]]) -> list[Frame]:
        return [("ack", tag, False) for tag, _ in reversed(pending)]

    stats = run(FakeServer(reverse), messages(50), max_in_flight=7).window
    assert (stats.published, stats.acked, stats.max_outstanding) == (50, 50, 7)


def test_window_of_one_waits_for_each_confirm() -> None:
    stats = run(FakeServer(), messages(20), max_in_flight=1).window
    assert (stats.acked, stats.max_outstanding) == (20, 1)


def test_empty_iterator_publishes_nothing() -> None:
    assert run(FakeServer(), iter([])).window.published == 0


def test_nack_stops_publishing_and_fails_without_reconnecting() -> None:
    def overflow(pending: list[tuple[int, OutgoingMessage]]) -> list[Frame]:
        last = pending[-1][0]
        return [("ack", last, True)] if last <= 20 else [("nack", last, True)]

    server = FakeServer(overflow)
    with pytest.raises(
        BrokerNacked, match=r"broker nacked 10 message\(s\): delivery tags 21\.\.30"
    ):
        run(server, messages(1000), max_in_flight=10)
    assert len(server.received) == 30 and len(server.connections) == 1
    assert server.connections[0].state == "closed"


def test_return_fails_before_the_ack() -> None:
    def unroutable(pending: list[tuple[int, OutgoingMessage]]) -> list[Frame]:
        return [("return", pending[0][1]), ("ack", pending[-1][0], True)]

    with pytest.raises(MessageReturned) as info:
        run(FakeServer(unroutable), messages(5))
    assert "312 NO_ROUTE exchange='' routing_key='q' message_id='m0'" in str(info.value)


def test_channel_closed_by_broker_is_not_retried() -> None:
    def refuse(pending: list[tuple[int, OutgoingMessage]]) -> list[Frame]:
        return [("close_channel", 404, "NOT_FOUND - no exchange 'x' in vhost '/'")]

    server = FakeServer(refuse)
    with pytest.raises(ChannelClosed, match="404 NOT_FOUND - no exchange 'x'") as info:
        run(server, messages(5))
    assert not info.value.retryable and "not retried" in str(info.value)
    assert len(server.connections) == 1 and server.slept == []


@pytest.mark.parametrize("outage", [5.0, 30.0])
def test_broker_restart_is_ridden_out_and_nothing_is_lost(outage: float) -> None:
    server = FakeServer()
    server.kill_after, server.outage = 1234, outage
    stats = run(server, messages(5000), max_in_flight=100)
    window = stats.window
    assert (window.published, window.acked) == (5000, 5000)
    assert set(server.confirmed) == {f"m{i}" for i in range(5000)}
    # what was unconfirmed at the kill went out again first, in order, on the new link
    assert window.republished > 0 and stats.reconnects == 1
    again = [m.message_id for m in server.received[1234 : 1234 + window.republished]]
    assert again == sorted(again, key=lambda i: int(i[1:]))
    # exponential backoff: 0.1 s doubling to 2 s (jitter fixed at the midpoint)
    assert server.slept[:5] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6])
    assert set(server.slept[5:]) <= {2.0}
    assert outage <= sum(server.slept) < outage + 2.0


def test_broker_down_longer_than_the_delivery_timeout_fails_with_connection_lost() -> None:
    server = FakeServer()
    server.kill_after, server.outage = 300, 1000.0
    with pytest.raises(ConnectionLost) as info:
        run(server, messages(5000), max_in_flight=100, delivery_timeout=20.0)
    text = str(info.value)
    assert text.startswith("connection to amqp://guest:***@127.0.0.1:5672/%2F lost: ")
    assert "StreamLostError" in text and "gave up after 1" in text
    assert "deliveryTimeout 20000 ms" in text and "last error: cannot connect" in text
    assert "s3cret" not in text and not info.value.retryable
    assert 18.0 <= server.loop.now <= 20.0


def test_delivery_timeout_zero_fails_at_the_first_loss() -> None:
    server = FakeServer()
    server.kill_after, server.outage = 50, 1.0
    with pytest.raises(ConnectionLost, match=r"gave up after 0\.0 s"):
        run(server, messages(500), max_in_flight=10, delivery_timeout=0.0)
    assert server.slept == []


def test_broker_not_up_yet_is_waited_for() -> None:
    server = FakeServer()
    server.down_until = 3.0
    stats = run(server, messages(100))
    assert stats.window.acked == 100 and stats.reconnects == 1
    assert len(server.connections) == 1 + len(server.slept)


def test_frozen_broker_stalls_confirms_then_the_task_reconnects() -> None:
    server = FakeServer()
    answered = 0

    def freeze_once(pending: list[tuple[int, OutgoingMessage]]) -> list[Frame]:
        nonlocal answered
        answered += 1
        if answered == 3:
            server.mute = True  # no confirms, no close-ok: the socket must be dropped
            server.loop.call_later(4.0, lambda: setattr(server, "mute", False))
        return ack_all(pending)

    server.policy = freeze_once
    stats = run(server, messages(1000), max_in_flight=10, confirm_timeout=1.5)
    assert stats.window.acked == 1000 and stats.reconnects >= 1
    assert set(server.confirmed) == {f"m{i}" for i in range(1000)}


def test_confirm_timeout_is_the_error_when_the_broker_stays_frozen() -> None:
    server = FakeServer(policy=lambda pending: [])
    with pytest.raises(ConfirmTimeout, match="no publisher confirm for 1500 ms with 10 message"):
        run(server, messages(100), max_in_flight=10, confirm_timeout=1.5, delivery_timeout=5.0)


def test_iterator_exception_is_raised_unchanged() -> None:
    def rows() -> Iterator[OutgoingMessage]:
        yield from messages(3)
        raise ValueError("bad row 3")

    server = FakeServer()
    with pytest.raises(ValueError, match="bad row 3"):
        run(server, rows())
    assert server.connections[0].state == "closed" and server.slept == []


def test_refusals_fail_at_once_and_never_show_the_password() -> None:
    server = FakeServer()
    server.refusal = pika.exceptions.ProbableAuthenticationError(
        "ConnectionClosedByBroker: (403) 'ACCESS_REFUSED - Login was refused'"
    )
    with pytest.raises(ConnectError) as info:
        run(server, messages(1))
    text = str(info.value)
    assert "cannot connect to amqp://guest:***@127.0.0.1:5672/%2F" in text
    assert "check the user name and password" in text and "s3cret" not in text
    assert len(server.connections) == 1 and server.slept == []
    server.refusal = pika.exceptions.ProbableAccessDeniedError("(530) NOT_ALLOWED")
    with pytest.raises(ConnectError, match="check the vhost"):
        run(server, messages(1))


def test_a_server_that_never_speaks_amqp_fails_after_the_connect_timeout() -> None:
    server = FakeServer()
    server.silent = True
    with pytest.raises(ConnectError) as info:
        run(server, messages(1), connect_timeout=0.25)
    assert "sent no AMQP handshake within 250 ms (connectTimeoutMs)" in str(info.value)
    assert len(server.connections) == 1 and server.loop.now < 3.0


def test_links_are_reused_across_tasks_and_closed_when_idle() -> None:
    server = FakeServer()
    pool = LinkPool(clock=lambda: server.loop.now, reaper=False)
    first = run(server, messages(30), pool=pool, max_in_flight=7)
    second = run(server, (msg(i) for i in range(30, 50)), pool=pool, max_in_flight=7)
    assert not first.reused and second.reused and len(server.connections) == 1
    assert second.window.acked == 20  # tags continued at 31 on the same channel
    assert pool.close_idle() == 0  # not idle long enough
    server.loop.now += 60.0
    assert pool.close_idle() == 1 and server.connections[0].state == "closed"
    # a link that died while idle is noticed and replaced
    run(server, messages(5), pool=pool)
    server.kill()
    third = run(server, messages(5), pool=pool)
    assert not third.reused and len(server.connections) == 3
    pool.close_all()


# -- reports, commit lines, task identity --------------------------------------------------


def test_commit_and_abort_summary_lines(caplog: pytest.LogCaptureFixture) -> None:
    reports = [
        TaskReport(
            partition=0,
            attempt=0,
            stage=3,
            published=600,
            acked=600,
            bytes=6000,
            seconds=0.5,
            max_outstanding=100,
        ),
        TaskReport(
            partition=1,
            attempt=1,
            stage=3,
            published=400,
            acked=400,
            bytes=4000,
            seconds=1.25,
            max_outstanding=80,
            republished=37,
            reconnects=2,
            reused_connection=True,
        ),
    ]
    line = summarize_commit(reports, "amqp://guest:***@h/")
    assert line == (
        "amqp sink: job committed published=1000 confirmed=1000 returned=0 nacked=0 "
        "republished=37 reconnects=2 retries=1 tasks=2 reused_connections=1 bytes=10000 "
        "slowest_task=p1.a1:1.25s/400rows max_outstanding=100 target=amqp://guest:***@h/"
    )
    assert summarize_abort([reports[0], None], "t").startswith(
        "amqp sink: job aborted: 1 of 2 tasks had finished; their 600 confirmed messages stay"
    )
    writer = AmqpStreamWriter(SinkOptions(url=URL, routing_key="q"), None)  # type: ignore[arg-type]
    reports[0].query_id = "qid"
    with caplog.at_level(logging.INFO, logger="interop.spark"):
        writer.commit(list(reports), 7)
    [record] = caplog.records
    assert record.name == "interop.spark" and record.levelno == logging.INFO
    assert record.getMessage().startswith("amqp sink: batch 7 committed published=1000")
    assert "query=qid target=amqp://guest:***@127.0.0.1:5672/%2F" in record.getMessage()


def test_task_identity_outside_spark() -> None:
    task = TaskInfo.current()
    assert task == TaskInfo()
    assert task.id_prefix() == "app-0-0"
    stream = TaskInfo(partition=2, attempt=1, stage=5, batch_id=9, query_id="q")
    assert stream.id_prefix() == "q-9-2"
    assert stream.connection_name(None) == f"spark-app:worker-{os.getpid()}"
    assert stream.connection_name("etl") == f"etl:worker-{os.getpid()}"
