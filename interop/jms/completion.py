"""Asynchronous sends: JMS 2.0 completion listeners, ActiveMQ's producer window.

Theory of operation
-------------------
An asynchronous send (`MessageProducer.send` with a ``completion_listener``, or any
persistent send outside a transaction when ``use_async_send`` is on) publishes and returns
at once, with the publish's future (completed by the publisher confirm, failed by a
``basic.nack`` or a lost channel; the transport fails it too if its I/O thread ends first).
The future's own callback, on the I/O thread, only gives the bytes back to the producer's
`ProducerWindow`. The send also queues (future, callback) on the session's `Completions`
thread, which waits for each future in turn and calls the listener's
``on_completion(message)`` or ``on_exception(message, exception)``: one thread per session,
entries in send order, keeps the JMS rule that a session's completion callbacks run one at
a time in the order of the sends, even though a broker may confirm out of order (RabbitMQ
nacks a refused publish at once but acks a persistent one after its fsync).

`ProducerWindow` is ActiveMQ's ``producerWindowSize``: the bytes sent asynchronously and
not yet confirmed; a send that would pass the limit waits until confirms free enough
(one message is always allowed when nothing is outstanding, so a message larger than the
window still goes).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future, wait
from typing import Any, Protocol

from interop.jms.errors import IllegalStateException, JMSException
from interop.jms.messages import Message

__all__ = ["CompletionListener", "Completions", "ProducerWindow"]

log = logging.getLogger(__name__)


class CompletionListener(Protocol):
    """JMS 2.0 ``CompletionListener``: told how an asynchronous send ended."""

    def on_completion(self, message: Message) -> None:
        """The broker confirmed ``message``."""
        ...

    def on_exception(self, message: Message, exception: Exception) -> None:
        """``message`` was refused (``basic.nack``) or its fate is unknown (connection lost)."""
        ...


class Completions:
    """The thread that runs a session's completion callbacks, in send order."""

    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue[tuple[Future[None], Callable[[], None]] | None] = (
            queue.SimpleQueue()
        )
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._started = False
        self._lock = threading.Lock()

    def submit(self, future: Future[None], callback: Callable[[], None]) -> None:
        """Run ``callback`` once ``future`` is done and every callback submitted before it
        has run (call in send order)."""
        with self._lock:
            if not self._started:
                self._started = True
                self._thread.start()
        self._queue.put((future, callback))

    def _run(self) -> None:
        while True:
            entry = self._queue.get()
            if entry is None:
                return
            future, callback = entry
            wait([future])  # confirms may come out of order (a nack before an fsync'd ack)
            try:
                callback()
            except Exception:
                log.exception("completion listener raised")

    def is_current_thread(self) -> bool:
        """True inside a completion callback."""
        return threading.current_thread() is self._thread

    def close(self, timeout: float) -> None:
        """Run what is queued, then stop (waits unless called from a callback)."""
        with self._lock:
            started, self._started = self._started, True
        if not started:
            return
        self._queue.put(None)
        if not self.is_current_thread():
            self._thread.join(timeout)


class ProducerWindow:
    """Bytes sent asynchronously and not yet confirmed, bounded by ``limit`` (0: no bound)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.outstanding = 0
        self._cond = threading.Condition()

    def acquire(self, size: int, timeout: float) -> None:
        """Wait until ``size`` more bytes fit.

        Raises:
            JMSException: no room within ``timeout`` seconds (confirms stopped coming).
        """
        with self._cond:
            fits = self._cond.wait_for(
                lambda: (
                    self.limit == 0
                    or self.outstanding == 0
                    or self.outstanding + size <= self.limit
                ),
                timeout,
            )
            if not fits:
                raise JMSException(
                    f"producer window full for {timeout} s ({self.outstanding} bytes "
                    f"unconfirmed, producerWindowSize {self.limit}): the broker stopped "
                    "confirming"
                )
            self.outstanding += size

    def release(self, size: int) -> None:
        """``size`` bytes were confirmed (or failed)."""
        with self._cond:
            self.outstanding -= size
            self._cond.notify_all()

    def wait_empty(self, timeout: float) -> bool:
        """Wait until nothing is outstanding; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self.outstanding == 0, timeout)


def as_completion_listener(listener: Any) -> CompletionListener:
    """Check that ``listener`` has ``on_completion`` and ``on_exception``.

    Raises:
        IllegalStateException: it has not (as JMS raises for a null listener).
    """
    for method in ("on_completion", "on_exception"):
        if not callable(getattr(listener, method, None)):
            raise IllegalStateException(
                f"a completion listener needs on_completion(message) and "
                f"on_exception(message, exception); {listener!r} has no {method}"
            )
    return listener  # type: ignore[no-any-return]
