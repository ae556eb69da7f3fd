"""The session's listener thread: calls message listeners one at a time, in order.

JMS sessions are single-threaded, so one thread per session calls every listener of that
session (round-robin over its consumers). The thread waits on the session's condition for a
deliverable message (or the end of a redelivery delay), calls the listener without holding
the lock, then reports the outcome so the session can ack or redeliver.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Generic, TypeVar

from interop.jms.ports import ListenerConsumer, ListenerSession

__all__ = ["Dispatcher"]

log = logging.getLogger(__name__)

ConsumerT = TypeVar("ConsumerT", bound=ListenerConsumer)


class Dispatcher(Generic[ConsumerT]):
    """Runs the message listeners of one session on a daemon thread."""

    def __init__(self, session: ListenerSession[ConsumerT]) -> None:
        self._session = session
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="jms-session", daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop after the running listener (if any) returns; waits unless called from it."""
        session = self._session
        with session._cond:
            self._stopping = True
            session._cond.notify_all()
        if not self.is_current_thread():
            self._thread.join()

    def is_current_thread(self) -> bool:
        """True when called from this dispatcher's thread (i.e. from a listener)."""
        return threading.current_thread() is self._thread

    def _run(self) -> None:
        session = self._session
        while True:
            with session._cond:
                while True:
                    if self._stopping:
                        return
                    picked = session._next_for_listener(time.monotonic())
                    if isinstance(picked, tuple):
                        break
                    session._wait(picked)
                consumer, delivery = picked
                listener = consumer._listener
            failed = False
            try:
                if listener is not None:
                    listener(delivery.message)
            except Exception:
                failed = True
                log.warning(
                    "message listener raised on message %s (delivery %d)",
                    delivery.message.message_id,
                    delivery.counter + 1,
                    exc_info=True,
                )
            session._listener_done(consumer, delivery, failed)
