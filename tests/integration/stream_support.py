"""Stream brokers for the ``amqp-stream`` Spark source tests, as a parameter.

``STREAM_BROKERS`` names the brokers the source is tested against: a private RabbitMQ 3.10
node and amqpd (a ``BrokerProcess``, so that it can be killed).
``StreamBroker.crash_and_restart`` is what the exactly-once test calls for its (optional)
broker kill step.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest
from pika.adapters.select_connection import IOLoop

from tests.integration.broker_process import BrokerProcess
from tests.integration.rabbit_node import RABBIT_REASON, RabbitNode

# the --workers passes (scripts/test-all, AMQPD_TEST_WORKERS=N) run these against amqpd only:
# RabbitMQ's side ran in the main pass
STREAM_BROKERS: tuple[str, ...] = (
    ("amqpd",) if os.environ.get("AMQPD_TEST_WORKERS") else ("rabbitmq", "amqpd")
)


class StreamBroker:
    """A broker with streams: its URL, declare/publish helpers and a crash."""

    def __init__(self, kind: str, base: Path) -> None:
        self.kind = kind
        self.rabbit: RabbitNode | None = None
        self.amqpd: BrokerProcess | None = None
        if kind == "rabbitmq":
            if RABBIT_REASON is not None:
                pytest.fail(f"these tests need RabbitMQ: {RABBIT_REASON}")
            self.rabbit = RabbitNode(prefix="sparksrc")
            self.rabbit.wait()
            self.url = self.rabbit.url
        else:
            self.amqpd = BrokerProcess(base / "amqpd", extra=("--no-management",))
            self.url = self.amqpd.url

    @property
    def can_crash_mid_write(self) -> bool:
        """Whether a crash mid-write still leaves each message id once in the stream: the
        sink republishes what was unconfirmed, so the broker must deduplicate (amqpd's
        ``x-message-deduplication``); RabbitMQ 3.10 streams do not."""
        return self.kind == "amqpd"

    @property
    def dedup_arguments(self) -> dict[str, Any]:
        """Stream arguments that make the broker drop a message whose id it already has
        (for the crash step; RabbitMQ 3.10 streams have no such argument)."""
        if self.kind == "amqpd":
            return {"x-message-deduplication": True, "x-deduplication-window": 100_000}
        return {}

    def crash_and_restart(self) -> None:
        """SIGKILL the broker, then start it again on the same port and data."""
        if self.rabbit is not None:
            self.rabbit.kill_and_restart()
            self.rabbit.wait()
        else:
            assert self.amqpd is not None
            self.amqpd.kill()
            self.amqpd.reap()
            self.amqpd.restart()

    def stop(self) -> None:
        if self.rabbit is not None:
            self.rabbit.stop()
        if self.amqpd is not None:
            self.amqpd.stop()

    def declare(self, stream: str, **arguments: Any) -> None:
        """Declare a stream (arguments such as ``x-max-length-bytes`` added)."""
        conn = pika.BlockingConnection(pika.URLParameters(self.url))
        try:
            args = {"x-queue-type": "stream", **arguments}
            conn.channel().queue_declare(stream, durable=True, arguments=args)
        finally:
            conn.close()

    def publish(self, stream: str, numbers: range, size: int = 0) -> None:
        """Publish one message per number with confirms (a window of 500): body
        ``{"n": number}`` padded to ``size`` bytes, message id ``m{number}``, routing key
        the stream, header ``n``, AMQP timestamp 1,700,000,000 + number.

        On RabbitMQ, then wait until ``queue.declare(passive)`` counts the messages: its count
        lags by up to ~5 s, and while it says 0 the source probes the stream's end only for
        ``emptyProbeMs`` (300 ms), which a busy machine can miss. A user who reads at once
        after publishing to RabbitMQ sees the same lag (docs/spark.md, `emptyProbeMs`)."""
        publish_confirmed(self.url, stream, numbers, size)
        if self.rabbit is not None and len(numbers) > 0:
            self._wait_counted(stream)

    def wait_retention(self, stream: str, published: int, size: int, timeout: float = 90.0) -> int:
        """Wait until the stream's first kept offset is past 0 and answer how many messages
        it then holds in all (``published`` and more). amqpd applies retention at the
        append's sync; RabbitMQ when a segment rolls over, on its own schedule, and it was
        seen (once, on a quiet machine) to keep offset 0 for a minute after the last roll:
        so every 15 s without retention one more segment's worth of messages is published
        (numbers go on from ``published``), which rolls a segment and evaluates retention
        again. Polls: no event says so."""
        deadline = time.monotonic() + timeout
        nudge_at = time.monotonic() + 15.0
        while (first := self._first_offset(stream)) is None or first == 0:
            assert time.monotonic() < deadline, f"{stream}: retention never removed offset 0"
            if time.monotonic() >= nudge_at:
                self.publish(stream, range(published, published + 100), size=size)
                published += 100
                nudge_at = time.monotonic() + 15.0
            time.sleep(0.5)
        return published

    def _first_offset(self, stream: str) -> int | None:
        """The offset of the first message a ``x-stream-offset: first`` consumer gets, on a
        connection of its own that is then thrown away: RabbitMQ sends a whole chunk
        whatever the prefetch, pika rejects what it buffered when the consumer is cancelled,
        and RabbitMQ answers a reject on a stream by closing the connection (540)."""
        conn = pika.BlockingConnection(pika.URLParameters(self.url))
        first: Any = None
        try:
            channel = conn.channel()
            channel.basic_qos(prefetch_count=1)
            for _method, props, _body in channel.consume(
                stream, arguments={"x-stream-offset": "first"}, inactivity_timeout=5
            ):
                first = None if props is None else props.headers.get("x-stream-offset")
                break
            conn.close()
        except pika.exceptions.AMQPConnectionError:
            pass  # the 540 above, after the offset was read
        return None if first is None else int(first)

    def _wait_counted(self, stream: str, timeout: float = 60.0) -> None:
        """Poll the passive declare (RabbitMQ offers no event for its count)."""
        deadline = time.monotonic() + timeout
        conn = pika.BlockingConnection(pika.URLParameters(self.url))
        try:
            channel = conn.channel()
            while channel.queue_declare(stream, passive=True).method.message_count == 0:
                assert time.monotonic() < deadline, f"RabbitMQ never counted {stream}'s messages"
                conn.sleep(0.2)
        finally:
            conn.close()


def publish_confirmed(url: str, stream: str, numbers: range, size: int = 0) -> None:
    """See ``StreamBroker.publish`` (pika's blocking adapter confirms one at a time)."""
    loop = IOLoop()
    todo = iter(numbers)
    state = {"sent": 0, "acked": 0, "done": False, "error": None}
    window = 500
    channel: Any = None

    def pump() -> None:
        while state["sent"] - state["acked"] < window:
            number = next(todo, None)
            if number is None:
                state["done"] = True
                break
            body = f'{{"n": {number}}}'.encode().ljust(size)
            props = pika.BasicProperties(
                message_id=f"m{number}",
                delivery_mode=2,
                timestamp=1_700_000_000 + number,
                headers={"n": number},
            )
            channel.basic_publish("", stream, body, props)
            state["sent"] += 1
        if state["done"] and state["acked"] == state["sent"]:
            conn.close()

    def on_confirm(frame: Any) -> None:
        method = frame.method
        if isinstance(method, pika.spec.Basic.Nack):
            state["error"] = f"nacked {method.delivery_tag}"
            conn.close()
            return
        state["acked"] = method.delivery_tag if method.multiple else state["acked"] + 1
        pump()

    def on_channel(ch: Any) -> None:
        nonlocal channel
        channel = ch
        ch.confirm_delivery(on_confirm, callback=lambda _frame: pump())

    def on_closed(_conn: Any, reason: BaseException) -> None:
        if not isinstance(reason, pika.exceptions.ConnectionClosedByClient):
            state["error"] = repr(reason)
        loop.stop()

    conn = pika.SelectConnection(
        pika.URLParameters(url),
        on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
        on_open_error_callback=lambda _c, e: on_closed(_c, e),
        on_close_callback=on_closed,
        custom_ioloop=loop,
    )
    loop.start()
    loop.close()
    assert state["error"] is None, state["error"]
    assert state["acked"] == len(numbers)


def stream_broker_fixture(request: pytest.FixtureRequest, base: Path) -> Iterator[StreamBroker]:
    broker = StreamBroker(request.param, base)
    try:
        yield broker
    finally:
        broker.stop()


def spark_env() -> dict[str, str | None]:
    """Set what the Spark workers need; returns the previous values for ``restore_env``."""
    saved = {k: os.environ.get(k) for k in ("PYSPARK_PYTHON", "SPARK_LOCAL_IP")}
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    return saved


def restore_env(saved: dict[str, str | None]) -> None:
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def wait_for_path(path: Path, what: str, proc: Any, timeout: float = 300.0) -> None:
    """Wait until ``path`` exists (a file the subprocess ``proc`` writes; no event to wait
    on); fail at once if ``proc`` exits first."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"the process exited ({proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what} ({path})"
        time.sleep(0.1)
