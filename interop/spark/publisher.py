"""Publish one partition's messages on one connection with a window of publisher confirms.

Built on pika's ``SelectConnection`` with a private I/O loop per call (no threads, no asyncio):
callbacks pull messages from the iterator while the window has room, and every ack/nack frees
room and pulls again. The first failure — a nack, a return, a confirm timeout, a closed channel
or connection, or an exception from the iterator itself — stops publishing, closes the
connection and is raised. There is no reconnect: the caller (a Spark task) fails and Spark's
retry republishes the partition.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pika
from pika.spec import Basic

from interop.spark.errors import (
    ChannelClosed,
    ConnectError,
    ConnectionLost,
    PublishError,
    redact_url,
    scrub,
)
from interop.spark.window import ConfirmWindow, WindowStats

__all__ = ["OutgoingMessage", "PublisherSettings", "publish"]

log = logging.getLogger(__name__)
# Seconds a graceful close may take before the socket is dropped (a frozen broker never
# answers connection.close).
CLOSE_GRACE = 2.0


@dataclass(slots=True)
class OutgoingMessage:
    """One message ready for ``basic_publish``.

    Attributes:
        exchange: Target exchange (``""`` is the default exchange).
        routing_key: Routing key.
        body: Message body.
        properties: A ``pika.BasicProperties``.
        message_id: The ``message_id`` property, kept for reports and error texts.
    """

    exchange: str
    routing_key: str
    body: bytes
    properties: Any  # pika.BasicProperties
    message_id: str | None


@dataclass(frozen=True, slots=True)
class PublisherSettings:
    """How to reach the broker and publish.

    Attributes:
        url: AMQP URL (parsed by ``pika.URLParameters``).
        max_in_flight: Window of unconfirmed messages.
        confirm_timeout: Seconds without confirm progress that fail the publish.
        connect_timeout: Seconds for TCP connect, handshake, channel open and
            ``confirm.select``.
        mandatory: Publish with ``mandatory``.
        connection_name: ``connection_name`` client property.
    """

    url: str
    max_in_flight: int = 1000
    confirm_timeout: float = 30.0
    connect_timeout: float = 10.0
    mandatory: bool = True
    connection_name: str = "spark"


def publish(
    settings: PublisherSettings,
    messages: Iterator[OutgoingMessage],
    *,
    connection_factory: Callable[..., Any] = pika.SelectConnection,
    clock: Callable[[], float] = time.monotonic,
) -> WindowStats:
    """Publish every message and wait until the broker confirmed all of them.

    Args:
        settings: Broker URL, window and timeouts.
        messages: The messages, pulled lazily.
        connection_factory: ``pika.SelectConnection`` or a test double with its interface.
        clock: Monotonic clock (a test double can drive virtual time).

    Returns:
        The channel's counters; on return every published message was acked.

    Raises:
        PublishError: A subclass naming the cause (never the password).
        Exception: Whatever ``messages`` raised, unchanged.
    """
    return _PartitionPublish(settings, messages, connection_factory, clock).run()


class _PartitionPublish:
    """One connection's life: connect, confirm.select, pump, drain, close."""

    def __init__(
        self,
        settings: PublisherSettings,
        messages: Iterator[OutgoingMessage],
        connection_factory: Callable[..., Any],
        clock: Callable[[], float],
    ) -> None:
        self._settings = settings
        self._connection_factory = connection_factory
        self._clock = clock
        self._messages = messages
        self._window = ConfirmWindow(settings.max_in_flight, settings.confirm_timeout)
        self._error: BaseException | None = None
        self._exhausted = False
        self._closing = False
        self._conn: Any = None
        self._channel: Any = None
        self._timer: Any = None

    def run(self) -> WindowStats:
        params = pika.URLParameters(self._settings.url)
        properties = dict(params.client_properties or {})
        properties.setdefault("connection_name", self._settings.connection_name)
        params.client_properties = properties
        params.socket_timeout = self._settings.connect_timeout
        params.stack_timeout = self._settings.connect_timeout
        params.blocked_connection_timeout = self._settings.confirm_timeout
        self._conn = self._connection_factory(
            params,
            on_open_callback=self._on_open,
            on_open_error_callback=self._on_open_error,
            on_close_callback=self._on_closed,
        )
        ioloop = self._conn.ioloop
        self._timer = ioloop.call_later(self._settings.connect_timeout, self._on_connect_timeout)
        try:
            ioloop.start()
        finally:
            ioloop.close()
        if self._error is not None:
            raise self._error
        return self._window.stats

    # -- connection set-up -------------------------------------------------------------

    def _on_open(self, conn: Any) -> None:
        conn.channel(on_open_callback=self._on_channel_open)

    def _on_open_error(self, conn: Any, error: BaseException) -> None:
        self._fail(ConnectError(f"cannot connect to {self._where()}: {self._text(error)}"))
        self._conn.ioloop.stop()

    def _on_connect_timeout(self) -> None:
        ms = self._settings.connect_timeout * 1000
        self._fail(
            ConnectError(
                f"connecting to {self._where()} timed out after {ms:.0f} ms "
                "(TCP connect, AMQP handshake, channel open and confirm.select)"
            )
        )

    def _on_channel_open(self, channel: Any) -> None:
        self._channel = channel
        channel.add_on_close_callback(self._on_channel_closed)
        channel.add_on_return_callback(self._on_return)
        channel.confirm_delivery(ack_nack_callback=self._on_confirm, callback=self._on_select_ok)

    def _on_select_ok(self, _frame: Any) -> None:
        self._reset_timer(self._tick_interval(), self._on_tick)
        self._pump()

    # -- publishing --------------------------------------------------------------------

    def _pump(self) -> None:
        if self._closing:
            return
        window = self._window
        try:
            while not self._exhausted and window.room > 0:
                message = next(self._messages, None)
                if message is None:
                    self._exhausted = True
                    break
                self._channel.basic_publish(
                    message.exchange,
                    message.routing_key,
                    message.body,
                    message.properties,
                    self._settings.mandatory,
                )
                window.published(len(message.body), message.message_id, self._clock())
        except Exception as exc:  # from the iterator (bad row, upstream failure) or pika
            self._fail(exc)
            return
        if self._exhausted and window.outstanding == 0:
            self._shutdown()

    def _on_confirm(self, frame: Any) -> None:
        method = frame.method
        ack = isinstance(method, Basic.Ack)
        self._window.confirmed(method.delivery_tag, method.multiple, ack, self._clock())
        if self._window.failure is not None:
            self._fail(self._window.failure)
        else:
            self._pump()

    def _on_return(self, _channel: Any, method: Any, properties: Any, _body: bytes) -> None:
        self._window.returned(
            method.reply_code,
            method.reply_text,
            method.exchange,
            method.routing_key,
            properties.message_id,
        )
        assert self._window.failure is not None
        self._fail(self._window.failure)

    def _on_tick(self) -> None:
        self._window.check_timeout(self._clock())
        if self._window.failure is not None:
            self._fail(self._window.failure)
        else:
            self._reset_timer(self._tick_interval(), self._on_tick)

    def _tick_interval(self) -> float:
        return max(0.05, min(1.0, self._settings.confirm_timeout / 10))

    # -- failures and shutdown ---------------------------------------------------------

    def _on_channel_closed(self, _channel: Any, reason: BaseException) -> None:
        if self._closing:
            return
        code = getattr(reason, "reply_code", None)
        text = getattr(reason, "reply_text", str(reason))
        self._fail(
            ChannelClosed(
                f"channel closed by the broker: {code} {self._text(text)} "
                f"({self._window.outstanding} message(s) unconfirmed)"
            )
        )

    def _on_closed(self, _conn: Any, reason: BaseException) -> None:
        if not self._closing:
            self._fail(
                ConnectionLost(
                    f"connection to {self._where()} lost: {self._text(reason)} "
                    f"({self._window.outstanding} message(s) unconfirmed)"
                )
            )
        self._cancel_timer()
        self._conn.ioloop.stop()

    def _fail(self, error: BaseException) -> None:
        if self._error is None:
            self._error = error
            if isinstance(error, PublishError):
                self._window.fail(error)
        self._shutdown()

    def _shutdown(self) -> None:
        if self._closing:
            return
        self._closing = True
        conn = self._conn
        if conn.is_closed:
            self._cancel_timer()
            conn.ioloop.stop()
            return
        if not conn.is_closing:
            conn.close()
        self._reset_timer(CLOSE_GRACE, self._on_close_grace_expired)

    def _on_close_grace_expired(self) -> None:
        log.warning(
            "amqp sink: %s did not close within %.0f s; dropping the socket",
            self._where(),
            CLOSE_GRACE,
        )
        # pika has no public abort; this is what Connection.close() uses while opening.
        self._conn._adapter_disconnect_stream()
        self._reset_timer(CLOSE_GRACE, self._conn.ioloop.stop)

    def _reset_timer(self, delay: float, callback: Any) -> None:
        self._cancel_timer()
        self._timer = self._conn.ioloop.call_later(delay, callback)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._conn.ioloop.remove_timeout(self._timer)
            self._timer = None

    def _where(self) -> str:
        return redact_url(self._settings.url)

    def _text(self, error: object) -> str:
        text = repr(error) if isinstance(error, BaseException) else str(error)
        return scrub(text, self._settings.url)
