"""Spark sink: the confirm window and the partition publisher against a fake pika connection.

No Spark session and no sockets: ``FakeBroker`` stands in for ``pika.SelectConnection`` with a
virtual-time I/O loop, so timeouts take no real time.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import pika
import pika.exceptions
import pytest
from pika.spec import Basic

pytest.importorskip("pyspark", reason="the Spark connector needs pyspark (the spark extra)")


from interop.spark.errors import (
    BrokerNacked,
    ChannelClosed,
    ConfirmTimeout,
    ConnectError,
    MessageReturned,
    PublishError,
)
from interop.spark.options import SinkOptions
from interop.spark.publisher import OutgoingMessage, PublisherSettings, publish
from interop.spark.report import TaskReport, summarize_abort, summarize_commit
from interop.spark.task import TaskInfo
from interop.spark.window import ConfirmWindow
from interop.spark.writer import AmqpStreamWriter

URL = "amqp://guest:s3cret@127.0.0.1:5672/%2F"

# -- ConfirmWindow ------------------------------------------------------------------------


def test_window_settles_multiple_and_single_confirms() -> None:
    window = ConfirmWindow(max_in_flight=4, confirm_timeout=5.0)
    tags = [window.published(10, f"m{i}", now=0.0) for i in range(4)]
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
        window.published(1, f"m{i}", now=0.0)
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
    window.published(1, None, now=0.0)
    window.confirmed(7, multiple=False, ack=True, now=0.0)
    assert isinstance(window.failure, PublishError)
    assert "acked delivery tag 7, which is not outstanding" in str(window.failure)


def test_window_timeout_counts_from_the_last_progress() -> None:
    window = ConfirmWindow(max_in_flight=10, confirm_timeout=3.0)
    window.check_timeout(100.0)  # nothing outstanding: never a timeout
    window.published(1, None, now=100.0)
    window.published(1, None, now=102.0)
    window.confirmed(1, multiple=False, ack=True, now=102.5)
    window.check_timeout(105.4)
    assert window.failure is None
    window.check_timeout(105.5)
    assert isinstance(window.failure, ConfirmTimeout)
    assert str(window.failure) == (
        "no publisher confirm for 3000 ms with 1 message(s) outstanding "
        "(delivery tags 2..2 of 2 published)"
    )


# -- a fake pika SelectConnection ---------------------------------------------------------


class FakeLoop:
    """Runs callbacks in order; when idle, jumps virtual time to the next timer."""

    def __init__(self) -> None:
        self.now = 0.0
        self.ready: deque[Callable[[], None]] = deque()
        self.timers: dict[int, tuple[float, Callable[[], None]]] = {}
        self.ids = itertools.count()
        self.running = False
        self.closed = False

    def call_later(self, delay: float, callback: Callable[[], None]) -> int:
        timer = next(self.ids)
        self.timers[timer] = (self.now + delay, callback)
        return timer

    def remove_timeout(self, timer: int) -> None:
        self.timers.pop(timer, None)

    def soon(self, callback: Callable[[], None]) -> None:
        self.ready.append(callback)

    def start(self) -> None:
        self.running = True
        while self.running:
            if self.ready:
                self.ready.popleft()()
                continue
            assert self.timers, "deadlock: nothing ready and no timer"
            timer, (due, callback) = min(self.timers.items(), key=lambda item: item[1][0])
            del self.timers[timer]
            self.now = max(self.now, due)
            callback()

    def stop(self) -> None:
        self.running = False

    def close(self) -> None:
        self.closed = True


Frame = tuple[Any, ...]
Policy = Callable[[list[tuple[int, OutgoingMessage]]], list[Frame]]


def ack_all(pending: list[tuple[int, OutgoingMessage]]) -> list[Frame]:
    """Coalesced: one ``ack multiple`` for everything received."""
    return [("ack", pending[-1][0], True)]


class FakeBroker:
    """Factory with the ``pika.SelectConnection`` signature; answers publishes by ``policy``."""

    def __init__(self, policy: Policy = ack_all, refuse: bool = False, mute: bool = False) -> None:
        self.policy = policy
        self.refuse = refuse
        self.mute = mute  # never answers (handshake, confirms, close): a frozen broker
        self.loop = FakeLoop()
        self.received: list[OutgoingMessage] = []
        self.params: Any = None
        self.state = "new"
        self.pending: list[tuple[int, OutgoingMessage]] = []

    # pika.SelectConnection(params, on_open_callback=…, on_open_error_callback=…, …)
    def __call__(self, params: Any, **callbacks: Any) -> FakeBroker:
        self.params = params
        self.callbacks = callbacks
        self.state = "opening"
        if self.refuse:
            error = pika.exceptions.AMQPConnectionError(f"refused {URL}")
            self.loop.soon(lambda: self._open_error(error))
        elif not self.mute:
            self.loop.soon(self._opened)
        return self

    @property
    def ioloop(self) -> FakeLoop:
        return self.loop

    @property
    def is_closed(self) -> bool:
        return self.state == "closed"

    @property
    def is_closing(self) -> bool:
        return self.state == "closing"

    def _opened(self) -> None:
        self.state = "open"
        self.callbacks["on_open_callback"](self)

    def _open_error(self, error: Exception) -> None:
        self.state = "closed"
        self.callbacks["on_open_error_callback"](self, error)

    def channel(self, on_open_callback: Callable[[Any], None]) -> None:
        self.loop.soon(lambda: on_open_callback(self))

    # channel interface (the fake is its own channel)
    def add_on_close_callback(self, callback: Callable[..., None]) -> None:
        self.on_channel_close = callback

    def add_on_return_callback(self, callback: Callable[..., None]) -> None:
        self.on_return = callback

    def confirm_delivery(self, ack_nack_callback: Callable[..., None], callback: Any) -> None:
        self.on_confirm = ack_nack_callback
        self.loop.soon(lambda: callback(None))

    def basic_publish(
        self, exchange: str, routing_key: str, body: bytes, properties: Any, mandatory: bool
    ) -> None:
        assert mandatory
        if not self.pending and not self.mute:
            self.loop.soon(self._answer)
        self.received.append(OutgoingMessage(exchange, routing_key, body, properties, None))
        self.pending.append((len(self.received), self.received[-1]))

    def _answer(self) -> None:
        pending, self.pending = self.pending, []
        for frame in self.policy(pending):
            if frame[0] in ("ack", "nack"):
                cls = Basic.Ack if frame[0] == "ack" else Basic.Nack
                method = cls(delivery_tag=frame[1], multiple=frame[2])
                self.on_confirm(type("Frame", (), {"method": method})())
            elif frame[0] == "return":
                message = frame[1]
                method = Basic.Return(312, "NO_ROUTE", message.exchange, message.routing_key)
                self.on_return(self, method, message.properties, message.body)
            elif frame[0] == "close_channel":
                self.on_channel_close(self, pika.exceptions.ChannelClosedByBroker(*frame[1:]))

    def close(self) -> None:
        self.state = "closing"
        if not self.mute:
            self.loop.soon(self._closed)

    def _closed(self) -> None:
        self.state = "closed"
        error = pika.exceptions.ConnectionClosedByClient(200, "Normal shutdown")
        self.callbacks["on_close_callback"](self, error)

    def _adapter_disconnect_stream(self) -> None:
        self.state = "aborted"
        self.loop.soon(self._closed)


def messages(n: int) -> Iterator[OutgoingMessage]:
    for i in range(n):
        props = pika.BasicProperties(message_id=f"m{i}")
        yield OutgoingMessage("", "q", b"x" * 10, props, f"m{i}")


def run(broker: FakeBroker, source: Iterator[OutgoingMessage], **settings: Any) -> Any:
    config = PublisherSettings(url=URL, connection_name="spark-t:1.2.0", **settings)
    return publish(config, source, connection_factory=broker, clock=lambda: broker.loop.now)


# -- publisher ------------------------------------------------------------------------------


def test_publishes_everything_within_the_window_then_closes() -> None:
    broker = FakeBroker()
    stats = run(broker, messages(2500), max_in_flight=100)
    assert (stats.published, stats.acked, stats.max_outstanding) == (2500, 2500, 100)
    assert [m.properties.message_id for m in broker.received] == [f"m{i}" for i in range(2500)]
    assert broker.state == "closed" and broker.loop.closed
    props = broker.params.client_properties
    assert props["connection_name"] == "spark-t:1.2.0"
    assert broker.params.blocked_connection_timeout == 30.0


def test_single_out_of_order_acks() -> None:
    def reverse(pending: list[tuple[int, OutgoingMessage]]) -> list[Frame]:
        return [("ack", tag, False) for tag, _ in reversed(pending)]

    stats = run(FakeBroker(reverse), messages(50), max_in_flight=7)
    assert (stats.published, stats.acked, stats.max_outstanding) == (50, 50, 7)


def test_window_of_one_waits_for_each_confirm() -> None:
    stats = run(FakeBroker(), messages(20), max_in_flight=1)
    assert (stats.acked, stats.max_outstanding) == (20, 1)


def test_empty_iterator_publishes_nothing() -> None:
    stats = run(FakeBroker(), iter([]))
    assert stats.published == 0


def test_nack_stops_publishing_and_fails() -> None:
    def overflow(pending: list[tuple[int, OutgoingMessage]]) -> list[Frame]:
        last = pending[-1][0]
        return [("ack", last, True)] if last <= 20 else [("nack", last, True)]

    broker = FakeBroker(overflow)
    with pytest.raises(
        BrokerNacked, match=r"broker nacked 10 message\(s\): delivery tags 21\.\.30"
    ):
        run(broker, messages(1000), max_in_flight=10)
    assert len(broker.received) == 30 and broker.state == "closed"


def test_return_fails_before_the_ack() -> None:
    def unroutable(pending: list[tuple[int, OutgoingMessage]]) -> list[Frame]:
        return [("return", pending[0][1]), ("ack", pending[-1][0], True)]

    with pytest.raises(MessageReturned) as info:
        run(FakeBroker(unroutable), messages(5))
    assert "312 NO_ROUTE exchange='' routing_key='q' message_id='m0'" in str(info.value)


def test_channel_closed_by_broker() -> None:
    def refuse(pending: list[tuple[int, OutgoingMessage]]) -> list[Frame]:
        return [("close_channel", 406, "PRECONDITION_FAILED - user_id mismatch")]

    with pytest.raises(ChannelClosed, match="406 PRECONDITION_FAILED - user_id mismatch"):
        run(FakeBroker(refuse), messages(5))


def test_confirm_timeout_on_a_frozen_broker_drops_the_socket(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broker = FakeBroker(policy=lambda pending: [])
    with pytest.raises(ConfirmTimeout, match="no publisher confirm for 1500 ms with 10 message"):
        run(broker, messages(100), max_in_flight=10, confirm_timeout=1.5)
    assert 1.5 <= broker.loop.now < 1.8
    # the broker answered connection.close: no need to drop the socket
    assert broker.state == "closed"

    frozen = FakeBroker()
    frozen.mute = False

    def freeze(pending: list[tuple[int, OutgoingMessage]]) -> list[Frame]:
        frozen.mute = True  # from now on nothing answers, not even connection.close
        return []

    frozen.policy = freeze
    with caplog.at_level(logging.WARNING), pytest.raises(ConfirmTimeout):
        run(frozen, messages(100), max_in_flight=10, confirm_timeout=1.5)
    assert frozen.state == "closed"  # aborted, then the loop saw the stream close
    assert "did not close within 2 s; dropping the socket" in caplog.text
    assert "s3cret" not in caplog.text


def test_iterator_exception_is_raised_unchanged() -> None:
    def rows() -> Iterator[OutgoingMessage]:
        yield from messages(3)
        raise ValueError("bad row 3")

    broker = FakeBroker()
    with pytest.raises(ValueError, match="bad row 3"):
        run(broker, rows())
    assert broker.state == "closed"


def test_connect_failures_never_show_the_password() -> None:
    with pytest.raises(ConnectError) as info:
        run(FakeBroker(refuse=True), messages(1))
    text = str(info.value)
    assert "cannot connect to amqp://guest:***@127.0.0.1:5672/%2F" in text
    assert "s3cret" not in text
    with pytest.raises(ConnectError, match="timed out after 250 ms"):
        run(FakeBroker(mute=True), messages(1), connect_timeout=0.25)


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
        ),
    ]
    line = summarize_commit(reports, "amqp://guest:***@h/")
    assert line == (
        "amqp sink: job committed rows=1000 acked=1000 bytes=10000 tasks=2 retries_seen=1 "
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
    assert record.getMessage().startswith("amqp sink: batch 7 committed rows=1000")
    assert "query=qid target=amqp://guest:***@127.0.0.1:5672/%2F" in record.getMessage()


def test_task_identity_outside_spark() -> None:
    task = TaskInfo.current()
    assert task == TaskInfo()
    assert task.id_prefix() == "app-0-0"
    stream = TaskInfo(partition=2, attempt=1, stage=5, batch_id=9, query_id="q")
    assert stream.id_prefix() == "q-9-2"
    assert stream.connection_name(None) == "spark-app:5.2.1"
    assert stream.connection_name("etl") == "etl:5.2.1"
