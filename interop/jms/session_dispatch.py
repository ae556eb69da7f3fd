"""A session's listener thread and receive bookkeeping (part of `interop.jms.session.Session`).

JMS sessions are single-threaded: one `interop.jms.dispatcher.Dispatcher` thread per session
calls every listener of the session, round-robin over its consumers; ``receive`` and
listeners never mix on one session (checked both ways). Everything here runs with the
session's condition ``_cond`` as the session module says.
"""

from __future__ import annotations

import logging
import time

from interop.jms.consumer import MessageConsumer
from interop.jms.delivery import Delivery
from interop.jms.dispatcher import Dispatcher
from interop.jms.errors import IllegalStateException, JMSException
from interop.jms.ports import MessageListener
from interop.jms.session_link import SessionLink

__all__ = ["SessionDispatch"]

log = logging.getLogger(__name__)


class SessionDispatch(SessionLink):
    """Listener dispatch and the receive/listener exclusivity of a session (mixin)."""

    _rr: int
    _in_listener: bool
    _receivers: int
    _dispatcher: Dispatcher[MessageConsumer] | None

    def _next_for_listener(self, now: float) -> tuple[MessageConsumer, Delivery] | float | None:
        """Dispatcher: the next (consumer, delivery) for a listener, or when to look again
        (a monotonic time), or None (nothing to wait for)."""
        if self._closed or self._error is not None or not self._started:
            return None
        consumers = self._consumers
        count = len(consumers)
        wake: float | None = None
        for offset in range(count):
            consumer = consumers[(self._rr + offset) % count]
            if consumer._listener is None or consumer.closed:
                continue
            delivery, when = consumer._take(now)
            if delivery is not None:
                self._rr = (self._rr + offset + 1) % count
                self._acks.before_app(consumer, delivery)
                self._in_listener = True
                return consumer, delivery
            if when is not None and (wake is None or when < wake):
                wake = when
        return wake

    def _listener_done(self, consumer: MessageConsumer, delivery: Delivery, failed: bool) -> None:
        with self._cond:
            self._in_listener = False
            if self._error is None and not (self._closed and delivery.settled):
                self._acks.after_app(consumer, delivery, failed, time.monotonic())
            self._cond.notify_all()
        try:
            self._acks_written()
        except JMSException as exc:
            log.warning("after the listener returned: %s", exc)

    def _ensure_dispatcher(self) -> None:
        if self._dispatcher is None:
            self._dispatcher = Dispatcher(self)
            self._dispatcher.start()

    @property
    def _started(self) -> bool:
        """The connection is started: messages may reach the application."""
        return self._connection.started

    def _begin_receive(self) -> None:
        """A receive starts: the exclusivity rule, receive side."""
        with self._cond:
            if any(consumer._listener is not None for consumer in self._consumers):
                raise IllegalStateException(
                    "Cannot synchronously receive a message when a MessageListener is set"
                )
            self._receivers += 1

    def _end_receive(self) -> None:
        """A receive ended."""
        with self._cond:
            self._receivers -= 1

    def _wait(self, until: float | None) -> None:
        """Wait on the condition until notified or the monotonic deadline."""
        if until is None:
            self._cond.wait()
        else:
            self._cond.wait(max(0.0, until - time.monotonic()))

    def _set_listener(self, consumer: MessageConsumer, listener: MessageListener | None) -> None:
        with self._cond:
            self._check_open()
            if listener is not None and self._receivers > 0:
                raise IllegalStateException(
                    "A MessageListener cannot be set if receive() is outstanding on a session"
                )
            consumer._listener = listener
            if listener is not None:
                self._ensure_dispatcher()
            self._cond.notify_all()

    def _wait_listener_idle(self) -> None:
        """Connection.stop(): wait for a running listener to return."""
        dispatcher = self._dispatcher
        if dispatcher is not None and dispatcher.is_current_thread():
            return
        with self._cond:
            while self._in_listener:
                self._cond.wait(0.1)

    def _notify(self) -> None:
        with self._cond:
            self._cond.notify_all()
