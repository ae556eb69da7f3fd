"""A ``Link``: one pika ``SelectConnection`` with one confirm channel, on its own I/O loop.

Theory of operation. ``open_link`` creates an I/O loop and a connection on it and runs the loop
until the channel is in confirm mode (the link is *ready*) or opening failed; a timer bounds the
whole of it (TCP connect, AMQP handshake, channel open, ``confirm.select``). A ready link has
no thread of its own: its loop runs only while a task publishes on it (``run()`` until the task
calls ``stop()``) or while it is being closed. pika's callbacks (ack/nack, return, channel
closed, connection closed) are forwarded to whichever ``LinkListener`` is attached, i.e. the
task publishing on it; between tasks none is, and events are dropped (a link that closed while
idle is noticed through ``alive``). ``next_tag`` is the channel's next delivery tag, so a
later task on the same channel knows where its tags start.

``close()`` sends ``connection.close`` and runs the loop until the broker answers, dropping
the socket after ``CLOSE_GRACE`` seconds (a frozen broker never answers); ``abort()`` drops it
at once (the connection is already lost or the broker is frozen).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import pika
import pika.connection
import pika.exceptions
from pika.adapters.select_connection import IOLoop
from pika.spec import Basic

from interop.spark.errors import ConnectError, redact_url, scrub
from interop.spark.message import OutgoingMessage
from interop.spark.retry import is_retryable_open_error

__all__ = ["Link", "LinkListener", "LinkSettings", "Transport", "open_link"]

log = logging.getLogger(__name__)
# Seconds a graceful close may take before the socket is dropped.
CLOSE_GRACE = 2.0


class LinkListener(Protocol):
    """What a link reports to the task publishing on it."""

    def on_confirm(self, tag: int, multiple: bool, ack: bool) -> None:
        """A ``basic.ack`` (``ack``) or ``basic.nack`` arrived."""

    def on_return(self, method: Any, properties: Any) -> None:
        """A ``basic.return`` arrived (pika's method frame and properties)."""

    def on_channel_closed(self, reason: BaseException) -> None:
        """The broker closed the channel (``ChannelClosedByBroker``)."""

    def on_connection_closed(self, reason: BaseException) -> None:
        """The connection closed (pika's reason)."""


@dataclass(frozen=True, slots=True)
class LinkSettings:
    """How to open a link.

    Attributes:
        url: AMQP URL (``pika.URLParameters``).
        connect_timeout: Seconds for TCP connect, handshake, channel open, ``confirm.select``.
        blocked_timeout: pika's ``blocked_connection_timeout`` (seconds).
        connection_name: ``connection_name`` client property.
    """

    url: str
    connect_timeout: float = 5.0
    blocked_timeout: float = 30.0
    connection_name: str = "spark"

    def parameters(self) -> pika.URLParameters:
        """pika parameters: the URL plus timeouts and the connection name.

        Heartbeats are off unless the URL sets ``heartbeat``: an idle link's loop does not
        run between tasks, so pika could not answer them, and confirms already bound how long
        a dead connection goes unnoticed while publishing.
        """
        params = pika.URLParameters(self.url)
        properties = dict(params.client_properties or {})
        properties.setdefault("connection_name", self.connection_name)
        params.client_properties = properties
        params.socket_timeout = self.connect_timeout
        params.stack_timeout = self.connect_timeout + 1.0  # our own timer fires first
        params.blocked_connection_timeout = self.blocked_timeout
        if "heartbeat=" not in self.url.partition("?")[2]:
            params.heartbeat = 0
        return params


@dataclass(slots=True)
class Transport:
    """The outside world of a publisher (tests pass doubles with virtual time).

    Attributes:
        connection_factory: ``pika.SelectConnection`` or a double with its interface.
        ioloop_factory: Creates an I/O loop for one link.
        clock: Monotonic clock.
        sleep: Waits between reconnect attempts.
        jitter: Random float in [0, 1) for backoff jitter.
    """

    connection_factory: Callable[..., Any] = pika.SelectConnection
    ioloop_factory: Callable[[], Any] = IOLoop
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    jitter: Callable[[], float] = random.random


class Link:
    """A connection and its confirm channel; see the module docstring.

    Attributes:
        settings: How it was opened (the pool keys on it).
        next_tag: Delivery tag of the channel's next publish.
        listener: The task publishing on it, or None.
        last_used: Clock reading when it was last checked into a pool.
    """

    def __init__(self, settings: LinkSettings, ioloop: Any) -> None:
        self.settings = settings
        self.ioloop = ioloop
        self.next_tag = 1
        self.listener: LinkListener | None = None
        self.last_used = 0.0
        self.conn: Any = None
        self.channel: Any = None
        self.closed_reason: BaseException | None = None
        self._running = False

    @property
    def alive(self) -> bool:
        """True while the connection and channel are open as far as pika knows."""
        return (
            self.closed_reason is None
            and self.conn is not None
            and bool(self.conn.is_open)
            and self.channel is not None
            and bool(self.channel.is_open)
        )

    def publish(self, message: OutgoingMessage, mandatory: bool) -> None:
        """``basic_publish`` on the confirm channel (buffered until the loop runs)."""
        self.channel.basic_publish(
            message.exchange, message.routing_key, message.body, message.properties, mandatory
        )

    def run(self) -> None:
        """Run the loop until ``stop()``."""
        self._running = True
        try:
            self.ioloop.start()
        finally:
            self._running = False

    def stop(self) -> None:
        """Make ``run()`` return. A no-op when the loop is not running: pika would remember
        the request and end the *next* start at once, before it flushed anything."""
        if self._running:
            self.ioloop.stop()

    def call_later(self, delay: float, callback: Callable[[], None]) -> Any:
        """A timer on the link's loop."""
        return self.ioloop.call_later(delay, callback)

    def cancel(self, timer: Any) -> None:
        """Cancel a timer from ``call_later``."""
        self.ioloop.remove_timeout(timer)

    def close(self) -> None:
        """Close gracefully (dropping the socket after ``CLOSE_GRACE`` s) and free the loop."""
        self.listener = None
        conn = self.conn
        if conn is not None and not conn.is_closed:
            if not conn.is_closing:
                conn.close()
            grace = self.ioloop.call_later(CLOSE_GRACE, self._grace_expired)
            self.run()
            self.ioloop.remove_timeout(grace)
        self.ioloop.close()

    def abort(self) -> None:
        """Drop the socket without a close handshake and free the loop."""
        self.listener = None
        conn = self.conn
        if conn is not None and not conn.is_closed:
            _drop(conn, "dropped by the amqp sink (connection lost or broker not answering)")
            stop = self.ioloop.call_later(CLOSE_GRACE, self.stop)
            self.run()
            self.ioloop.remove_timeout(stop)
        self.ioloop.close()

    def _grace_expired(self) -> None:
        log.warning(
            "amqp sink: %s did not close within %.0f s; dropping the socket",
            redact_url(self.settings.url),
            CLOSE_GRACE,
        )
        _drop(self.conn, "connection.close not answered")
        self.ioloop.call_later(CLOSE_GRACE, self.stop)

    # -- pika callbacks, forwarded ----------------------------------------------------------

    def on_confirm(self, frame: Any) -> None:
        method = frame.method
        if self.listener is not None:
            self.listener.on_confirm(
                method.delivery_tag, method.multiple, isinstance(method, Basic.Ack)
            )

    def on_return(self, _channel: Any, method: Any, properties: Any, _body: bytes) -> None:
        if self.listener is not None:
            self.listener.on_return(method, properties)

    def on_channel_closed(self, _channel: Any, reason: BaseException) -> None:
        if self.listener is not None:
            self.listener.on_channel_closed(reason)

    def on_connection_closed(self, _conn: Any, reason: BaseException) -> None:
        self.closed_reason = reason
        if self.listener is not None:
            self.listener.on_connection_closed(reason)
        else:
            self.stop()  # closing, or idle: whoever runs the loop is waiting for this


def _drop(conn: Any, why: str) -> None:
    """Close the socket without the close handshake; pika then reports ``StreamLostError``.

    pika has no public abort: ``_terminate_stream`` is what it uses itself on a fatal error.
    """
    conn._terminate_stream(pika.exceptions.StreamLostError(why))


def open_link(settings: LinkSettings, transport: Transport) -> Link:
    """Open a connection and a confirm channel; return the ready link.

    Raises:
        ConnectError: Opening failed or timed out. ``retryable`` is False for refusals
            (bad credentials, unknown vhost, wrong protocol) and for a server that accepted
            the TCP connection but never started the AMQP handshake.
    """
    return _Opening(settings, transport).run()


class _Opening:
    """Drives one link from nothing to ready (or to a ``ConnectError``)."""

    def __init__(self, settings: LinkSettings, transport: Transport) -> None:
        self._settings = settings
        self._transport = transport
        self._link = Link(settings, transport.ioloop_factory())
        self._error: ConnectError | None = None
        self._ready = False

    def run(self) -> Link:
        link = self._link
        link.conn = self._transport.connection_factory(
            self._settings.parameters(),
            on_open_callback=self._on_open,
            on_open_error_callback=self._on_open_error,
            on_close_callback=self._on_closed,
            custom_ioloop=link.ioloop,
        )
        timer = link.call_later(self._settings.connect_timeout, self._on_timeout)
        link.run()
        link.cancel(timer)
        if self._ready:
            return link
        link.ioloop.close()
        assert self._error is not None
        raise self._error

    def _on_open(self, conn: Any) -> None:
        conn.channel(on_open_callback=self._on_channel_open)

    def _on_channel_open(self, channel: Any) -> None:
        link = self._link
        link.channel = channel
        channel.add_on_close_callback(self._on_channel_closed)
        channel.add_on_return_callback(link.on_return)
        channel.confirm_delivery(ack_nack_callback=link.on_confirm, callback=self._on_select_ok)

    def _on_select_ok(self, _frame: Any) -> None:
        if self._error is not None:
            return  # too late: the connection is being dropped
        self._ready = True
        self._link.stop()

    def _on_channel_closed(self, channel: Any, reason: BaseException) -> None:
        if self._ready:
            self._link.on_channel_closed(channel, reason)
        else:
            self._fail(f"the broker closed the channel while opening: {self._text(reason)}", False)

    def _on_open_error(self, _conn: Any, error: BaseException) -> None:
        retryable = is_retryable_open_error(error)
        hint = "" if retryable else self._hint(error)
        self._fail(f"cannot connect to {self._where()}: {self._text(error)}{hint}", retryable)

    def _on_closed(self, conn: Any, reason: BaseException) -> None:
        if self._ready:
            self._link.on_connection_closed(conn, reason)
        else:
            self._fail(f"connection to {self._where()} closed while opening: {self._text(reason)}")

    def _on_timeout(self) -> None:
        """Record why; pika's own ``stack_timeout`` (1 s later) aborts a connection that is
        still opening (``close()`` then would trip an assertion in pika's workflow), and an
        open one whose channel or ``confirm.select`` did not answer is dropped here."""
        ms = self._settings.connect_timeout * 1000
        conn = self._link.conn
        if (
            getattr(conn, "connection_state", None)
            == pika.connection.Connection.CONNECTION_PROTOCOL
        ):
            self._error = ConnectError(
                f"{self._where()} accepted the TCP connection but sent no AMQP handshake within "
                f"{ms:.0f} ms (connectTimeoutMs): is this an AMQP 0-9-1 port, and is the broker "
                "running (not stopped or overloaded)?",
                retryable=True,
            )
            self._error.no_handshake = True
        else:
            self._error = ConnectError(
                f"connecting to {self._where()} timed out after {ms:.0f} ms (connectTimeoutMs: "
                "TCP connect, AMQP handshake, channel open and confirm.select)",
                retryable=True,
            )
        if conn.is_open:
            _drop(conn, "channel open or confirm.select not answered")
        self._link.call_later(CLOSE_GRACE + 1.0, self._link.stop)  # safety stop

    def _fail(self, text: str, retryable: bool = True) -> None:
        if self._error is None and not self._ready:
            self._error = ConnectError(text, retryable=retryable)
        self._link.stop()

    @staticmethod
    def _hint(error: BaseException) -> str:
        if isinstance(
            error,
            (pika.exceptions.AuthenticationError, pika.exceptions.ProbableAuthenticationError),
        ):
            return " (check the user name and password in the url option; not retried)"
        if isinstance(error, pika.exceptions.ProbableAccessDeniedError):
            return " (check the vhost in the url option and the user's permissions; not retried)"
        return " (not retried)"

    def _where(self) -> str:
        return redact_url(self._settings.url)

    def _text(self, error: object) -> str:
        text = repr(error) if isinstance(error, BaseException) else str(error)
        return scrub(text, self._settings.url)
