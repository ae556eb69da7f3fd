"""Publish one partition's messages with a window of publisher confirms, riding out lost
connections.

Theory of operation. A partition is published over one or more *links* (a connection and its
confirm channel, ``link.py``), one at a time:

    ACQUIRE ──> PUBLISH ──(every message confirmed)──> DONE: link back to the pool
       ^           │
       │           ├──(nack, return, channel error, bad row, refusal)──> FAILED: raise
       │           │
       └─ BACKOFF <┴──(connection lost, confirms stalled, broker not reachable)

ACQUIRE takes an idle link from the worker's pool or opens one. PUBLISH first republishes the
messages the previous link left unconfirmed (the confirm window keeps them, in order), then
pulls new ones from the iterator while the window has room; every ack frees room and pulls
again. A failure the broker chose (a nack, a return, a channel closed with a reply code, bad
credentials) and an exception from the iterator end the task at once: a retry would fail the
same way. A lost connection, a ``confirmTimeoutMs`` without confirm progress (the socket is
dropped) or a failed reconnect goes to BACKOFF: wait (exponential, with jitter) and ACQUIRE
again, until ``deliveryTimeout`` has passed since the outage began (an ack on a new link ends
the outage); then the task fails with ``ConnectionLost`` (``ConfirmTimeout`` if confirms
stalled, ``ConnectError`` if no connection was ever made). Republishing makes duplicates of
messages the broker had taken but not yet confirmed: delivery stays at-least-once.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pika.exceptions

from interop.spark.errors import (
    ChannelClosed,
    ConfirmTimeout,
    ConnectError,
    ConnectionLost,
    PublishError,
    redact_url,
    scrub,
)
from interop.spark.link import Link, LinkSettings, Transport, open_link
from interop.spark.message import OutgoingMessage
from interop.spark.pool import LinkPool
from interop.spark.retry import Backoff, is_retryable_close
from interop.spark.window import ConfirmWindow, WindowStats

__all__ = ["PublishStats", "PublisherSettings", "publish"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PublisherSettings:
    """How to reach the broker and publish.

    Attributes:
        url: AMQP URL (parsed by ``pika.URLParameters``).
        max_in_flight: Window of unconfirmed messages.
        confirm_timeout: Seconds without confirm progress after which the connection is
            dropped and the unconfirmed messages republished on a new one.
        connect_timeout: Seconds for TCP connect, handshake, channel open and
            ``confirm.select``.
        delivery_timeout: Seconds a task keeps reconnecting after an outage began (0: fail at
            the first lost connection).
        idle_timeout: Seconds an idle connection stays in the worker's pool (0: close it when
            the task ends).
        mandatory: Publish with ``mandatory``.
        connection_name: ``connection_name`` client property.
    """

    url: str
    max_in_flight: int = 1000
    confirm_timeout: float = 30.0
    connect_timeout: float = 5.0
    delivery_timeout: float = 120.0
    idle_timeout: float = 60.0
    mandatory: bool = True
    connection_name: str = "spark"

    def link_settings(self) -> LinkSettings:
        """What the link is opened with (and pooled by)."""
        return LinkSettings(
            url=self.url,
            connect_timeout=self.connect_timeout,
            blocked_timeout=self.confirm_timeout,
            connection_name=self.connection_name,
        )


@dataclass(slots=True)
class PublishStats:
    """What publishing one partition took.

    Attributes:
        window: The confirm window's counters (published, acked, republished…).
        reconnects: Links opened after the first one failed or was lost.
        reused: True when the first link came from the worker's pool.
    """

    window: WindowStats
    reconnects: int = 0
    reused: bool = False


def publish(
    settings: PublisherSettings,
    messages: Iterator[OutgoingMessage],
    *,
    transport: Transport | None = None,
    pool: LinkPool | None = None,
) -> PublishStats:
    """Publish every message and wait until the broker confirmed all of them.

    Args:
        settings: Broker URL, window and timeouts.
        messages: The messages, pulled lazily.
        transport: pika, the clock and sleep (tests pass doubles).
        pool: Where idle links are kept between tasks; None opens and closes one per call.

    Returns:
        The counters; on return every published message was acked.

    Raises:
        PublishError: A subclass naming the cause (never the password).
        Exception: Whatever ``messages`` raised, unchanged.
    """
    return _PartitionPublish(settings, messages, transport or Transport(), pool).run()


class _PartitionPublish:
    """The state machine of the module docstring; it is the ``LinkListener`` of its link."""

    def __init__(
        self,
        settings: PublisherSettings,
        messages: Iterator[OutgoingMessage],
        transport: Transport,
        pool: LinkPool | None,
    ) -> None:
        self._settings = settings
        self._link_settings = settings.link_settings()
        self._messages = messages
        self._transport = transport
        self._pool = pool
        self._window = ConfirmWindow(settings.max_in_flight, settings.confirm_timeout)
        self._backoff = Backoff(jitter=transport.jitter)
        self._stats = PublishStats(self._window.stats)
        self._exhausted = False
        self._resend: deque[OutgoingMessage] = deque()
        self._link: Link | None = None
        self._timer: Any = None
        self._fatal: BaseException | None = None  # ends the task
        self._lost: PublishError | None = None  # ends this link; reconnect
        self._outage: tuple[float, PublishError] | None = None  # since when, first cause
        self._connected = False

    def run(self) -> PublishStats:
        while True:
            error = self._one_link()
            if error is None:
                return self._stats
            self._back_off(error)

    # -- ACQUIRE and PUBLISH -----------------------------------------------------------------

    def _one_link(self) -> PublishError | None:
        """Publish on one link; None when done, else the retryable reason it ended."""
        link = None if self._pool is None else self._pool.checkout(self._link_settings)
        if link is not None and not self._connected:
            self._stats.reused = True
        if link is None:
            try:
                link = open_link(self._link_settings, self._transport)
            except ConnectError as exc:
                if not exc.retryable or (exc.no_handshake and not self._connected):
                    raise
                return exc
        if self._connected or self._outage is not None:
            self._stats.reconnects += 1
        self._connected = True
        self._backoff.reset()
        acked = self._window.stats.acked
        self._link = link
        link.listener = self
        self._resend = deque(self._window.rebase(link.next_tag))
        self._timer = link.call_later(self._tick_interval(), self._on_tick)
        self._pump()
        if not self._finished():
            link.run()
        link.cancel(self._timer)
        link.listener = None
        link.next_tag = self._window.next_tag
        self._link = None
        if self._window.stats.acked > acked:
            self._outage = None
        if self._fatal is not None:
            link.close()
            raise self._fatal
        if self._lost is not None:
            lost, self._lost = self._lost, None
            link.abort()
            return lost
        if self._pool is None:
            link.close()
        else:
            self._pool.checkin(link, self._settings.idle_timeout)
        return None

    def _finished(self) -> bool:
        done = self._exhausted and not self._resend and self._window.outstanding == 0
        return done or self._fatal is not None or self._lost is not None

    def _pump(self) -> None:
        link = self._link
        if link is None:
            return
        if self._finished():
            link.stop()
            return
        window, clock, mandatory = self._window, self._transport.clock, self._settings.mandatory
        while window.room > 0 and (self._resend or not self._exhausted):
            again = bool(self._resend)
            if again:
                message = self._resend.popleft()
            else:
                try:
                    pulled = next(self._messages, None)
                except Exception as exc:  # from the iterator (bad row, upstream failure)
                    self._fatal = exc
                    break
                if pulled is None:
                    self._exhausted = True
                    break
                message = pulled
            try:
                link.publish(message, mandatory)
            except (pika.exceptions.AMQPConnectionError, pika.exceptions.AMQPChannelError) as exc:
                self._resend.appendleft(message)  # not sent: it goes out on the next link
                self._lose(
                    ConnectionLost(f"publishing to {self._where()} failed: {self._text(exc)}")
                )
                return
            window.published(message, clock(), again=again)
        if self._finished():
            link.stop()

    # -- LinkListener ------------------------------------------------------------------------

    def on_confirm(self, tag: int, multiple: bool, ack: bool) -> None:
        self._window.confirmed(tag, multiple, ack, self._transport.clock())
        if self._window.failure is not None:
            self._fail(self._window.failure)
        else:
            self._pump()

    def on_return(self, method: Any, properties: Any) -> None:
        self._window.returned(
            method.reply_code,
            method.reply_text,
            method.exchange,
            method.routing_key,
            properties.message_id,
        )
        assert self._window.failure is not None
        self._fail(self._window.failure)

    def on_channel_closed(self, reason: BaseException) -> None:
        if not isinstance(reason, pika.exceptions.ChannelClosedByBroker):
            return  # the connection went away; on_connection_closed says why
        self._fail(
            ChannelClosed(
                f"channel closed by the broker: {reason.reply_code} "
                f"{self._text(reason.reply_text)} ({self._window.outstanding} message(s) "
                "unconfirmed; not retried: the broker refused the publish)"
            )
        )

    def on_connection_closed(self, reason: BaseException) -> None:
        text = (
            f"connection to {self._where()} lost: {self._text(reason)} "
            f"({self._window.outstanding} message(s) unconfirmed)"
        )
        if is_retryable_close(reason):
            self._lose(ConnectionLost(text))
        else:
            self._fail(ConnectionLost(text + "; not retried", retryable=False))
        if self._link is not None:
            self._link.stop()

    # -- timers, failures ----------------------------------------------------------------------

    def _on_tick(self) -> None:
        link = self._link
        if link is None:
            return
        stalled = self._window.stalled(self._transport.clock())
        if stalled is not None:
            self._lose(stalled)
        else:
            self._timer = link.call_later(self._tick_interval(), self._on_tick)

    def _tick_interval(self) -> float:
        return max(0.05, min(1.0, self._settings.confirm_timeout / 10))

    def _fail(self, error: BaseException) -> None:
        if self._fatal is None and self._lost is None:
            self._fatal = error
            if isinstance(error, PublishError):
                self._window.fail(error)
        if self._link is not None:
            self._link.stop()

    def _lose(self, error: PublishError) -> None:
        if self._fatal is None and self._lost is None:
            self._lost = error
        if self._link is not None:
            self._link.stop()

    # -- BACKOFF -------------------------------------------------------------------------------

    def _back_off(self, error: PublishError) -> None:
        clock = self._transport.clock
        now = clock()
        if self._outage is None:
            self._outage = (now, error)
            log.warning(
                "amqp sink: %s; reconnecting for up to %.0f s (deliveryTimeout)",
                error,
                self._settings.delivery_timeout,
            )
        since, first = self._outage
        delay = self._backoff.delay()
        if now + delay - since > self._settings.delivery_timeout:
            raise self._give_up(first, error, now - since)
        self._transport.sleep(delay)

    def _give_up(self, first: PublishError, last: PublishError, waited: float) -> PublishError:
        ms = self._settings.delivery_timeout * 1000
        detail = (
            f"; gave up after {waited:.1f} s of retrying (deliveryTimeout {ms:.0f} ms, "
            f"{self._stats.reconnects} reconnect(s), {self._window.outstanding + len(self._resend)}"
            f" message(s) unconfirmed)"
        )
        if last is not first:
            detail += f"; last error: {last}"
        if not self._connected:
            return ConnectError(f"{first}{detail}", retryable=False)
        if isinstance(first, ConfirmTimeout):
            return ConfirmTimeout(f"{first}{detail}", retryable=False)
        return ConnectionLost(f"{first}{detail}", retryable=False)

    def _where(self) -> str:
        return redact_url(self._settings.url)

    def _text(self, error: object) -> str:
        text = repr(error) if isinstance(error, BaseException) else str(error)
        return scrub(text, self._settings.url)
