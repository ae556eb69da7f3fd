"""One AMQP connection on its own I/O thread (pika ``SelectConnection``), and its channels.

Theory of operation
-------------------
pika objects are not thread-safe, so every pika call runs on the connection's I/O thread.
Application threads hand work over with ``ioloop.add_callback_threadsafe`` (FIFO, so frames
leave in the order the application asked for them) and, for a request with a reply
(``queue.declare``, ``basic.consume``, ``tx.commit``…), wait on a ``Future`` that the reply
callback completes. When a channel or the connection closes, every future still waiting on
it fails with a `JMSException` carrying the broker's reply code and text, so no caller
waits forever (`interop.jms.channel` holds the per-channel part). Acks, rejects and
publishes are fire-and-forget: they are queued and sent in order; a publish returns a
future completed by the publisher confirm (confirm channels) or as soon as it is written
(transacted channels).

*On the wire.* pika's ``basic_ack`` only appends the frame to the transport's write buffer;
the socket write happens when the ioloop next sees the socket writable. `ChannelLink.written`
returns a future that completes once every frame queued before it has left that buffer
(handed to the kernel with ``send``): a caller that waits for it knows its acknowledgement
survives the process being killed, as with ActiveMQ, which writes the ack on the caller's
thread. The future fails when the channel or the connection closes first.

A blocking call from the I/O thread itself would deadlock, so it raises instead.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Final, TypeVar

import pika
import pika.exceptions
import pika.spec

from interop.jms.errors import IllegalStateException, JMSException

__all__ = ["Transport", "error_from"]

log = logging.getLogger(__name__)

T = TypeVar("T")
REQUEST_TIMEOUT: Final = 60.0
"""Seconds to wait for any broker reply before giving up (the connection is then suspect)."""


def error_from(reason: object, what: str) -> JMSException:
    """A `JMSException` for a pika close reason (keeps the AMQP reply code and text)."""
    code = getattr(reason, "reply_code", None)
    text = getattr(reason, "reply_text", None)
    if isinstance(code, int) and code:
        return JMSException(f"{what}: {code} {text}", reply_code=code, reply_text=str(text))
    return JMSException(f"{what}: {reason!r}")


class Transport:
    """A pika ``SelectConnection`` whose ioloop runs on a dedicated daemon thread."""

    def __init__(self, parameters: Any, name: str, on_lost: Callable[[JMSException], None]) -> None:
        """Prepare (not open) the connection.

        Args:
            parameters: ``pika.ConnectionParameters`` / ``URLParameters``.
            name: Used in the thread name.
            on_lost: Called on the I/O thread when the connection closes without
                `close()` having been called.
        """
        self._parameters = parameters
        self._on_lost = on_lost
        self._thread = threading.Thread(target=self._run, name=f"jms-io-{name}", daemon=True)
        self._connection: Any = None
        self._opened: Future[None] = Future()
        self._closing = False
        self._done = threading.Event()
        self._waiting: set[Future[Any]] = set()
        self._waiting_lock = threading.Lock()
        self.error: JMSException | None = None

    @property
    def parameters(self) -> Any:
        """The pika connection parameters (host, port, virtual host)."""
        return self._parameters

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self, timeout: float) -> None:
        """Connect; returns once the AMQP connection is open.

        Raises:
            JMSException: the broker cannot be reached or refused the connection.
        """
        self._thread.start()
        try:
            self._opened.result(timeout)
        except FutureTimeout:
            self.close()
            raise JMSException(f"could not connect within {timeout} s") from None

    def _run(self) -> None:
        try:
            self._connection = pika.SelectConnection(
                self._parameters,
                on_open_callback=self._on_open,
                on_open_error_callback=self._on_open_error,
                on_close_callback=self._on_close,
            )
            self._connection.ioloop.start()
        except Exception as exc:  # pragma: no cover - pika internals failing
            log.exception("I/O thread failed")
            self.error = JMSException(f"I/O thread failed: {exc!r}")
            if not self._opened.done():
                self._opened.set_exception(self.error)
        finally:
            if self._connection is not None:
                self._connection.ioloop.close()  # its wake-up socket pair
            self._done.set()
            with self._waiting_lock:
                waiting, self._waiting = self._waiting, set()
            for future in waiting:  # work posted after the loop's last turn never runs
                self._fail_waiter(future)

    def _fail_waiter(self, future: Future[Any]) -> None:
        if not future.done():
            with contextlib.suppress(InvalidStateError):  # completed meanwhile
                future.set_exception(self.error or JMSException("connection closed"))

    def _on_open(self, _connection: Any) -> None:
        self._opened.set_result(None)

    def _on_open_error(self, connection: Any, error: object) -> None:
        self.error = error_from(error, "cannot connect")
        if not self._opened.done():
            self._opened.set_exception(self.error)
        connection.ioloop.stop()

    def _on_close(self, connection: Any, reason: object) -> None:
        self.error = error_from(reason, "connection closed")
        connection.ioloop.stop()
        if not self._closing:
            log.warning("connection lost: %s", self.error)
            self._on_lost(self.error)

    def close(self) -> None:
        """Close the connection and stop the I/O thread (idempotent)."""
        self._closing = True
        if self._done.is_set() or self._connection is None:
            return

        def shut() -> None:
            if self._connection.is_open:
                self._connection.close()
            elif not self._connection.is_closing:
                self._connection.ioloop.stop()

        try:
            self._connection.ioloop.add_callback_threadsafe(shut)
        except Exception:  # the loop is already gone
            return
        if threading.current_thread() is not self._thread:
            self._done.wait(REQUEST_TIMEOUT)

    def abort(self) -> None:
        """Drop the socket without an AMQP ``connection.close`` (as a crash or a network
        failure would) and stop the I/O thread; the broker requeues what was unacked."""
        self._closing = True
        if self._done.is_set() or self._connection is None:
            return

        def drop() -> None:
            stream = getattr(self._connection, "_transport", None)
            if stream is not None and self._connection.is_open:
                stream.abort()  # pika then reports the lost stream and stops the loop
            else:
                self._connection.ioloop.stop()

        try:
            self._connection.ioloop.add_callback_threadsafe(drop)
        except Exception:  # the loop is already gone
            return
        if threading.current_thread() is not self._thread:
            self._done.wait(REQUEST_TIMEOUT)

    @property
    def is_open(self) -> bool:
        """True until the connection closed."""
        return self._opened.done() and not self._done.is_set() and self.error is None

    # -- handing work to the I/O thread --------------------------------------------------------
    def post(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the I/O thread soon (in submission order); errors are logged.

        Raises:
            JMSException: the connection is closed.
        """
        if self._done.is_set() or self._connection is None:
            raise self.error or JMSException("connection is closed")

        def guarded() -> None:
            try:
                fn()
            except Exception:
                log.exception("error in I/O callback")

        try:
            self._connection.ioloop.add_callback_threadsafe(guarded)
        except Exception as exc:
            raise self.error or JMSException(f"connection is closed ({exc!r})") from None

    def has_capability(self, name: str) -> bool:
        """True when the broker announced capability ``name`` in ``connection.start``
        (amqpd's ``consumer_selectors``: the ``x-selector`` consumer argument)."""
        capabilities = getattr(self._connection, "server_capabilities", None) or {}
        return bool(capabilities.get(name))

    def unwritten_bytes(self) -> int | None:
        """I/O thread: bytes pika has not yet handed to the socket; None when the connection
        is not open (nothing more will be written)."""
        connection = self._connection
        if connection is None or not connection.is_open:
            return None
        stream = getattr(connection, "_transport", None)  # pika's AbstractStreamTransport
        return 0 if stream is None else int(stream.get_write_buffer_size())

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the I/O thread after ``delay`` seconds."""
        self.post(lambda: self._connection.ioloop.call_later(delay, fn))

    def track(self, future: Future[Any]) -> None:
        """Fail ``future`` if the I/O thread ends before completing it (work posted after
        the loop's last turn never runs)."""
        with self._waiting_lock:
            self._waiting.add(future)
        future.add_done_callback(self._untrack)
        if self._done.is_set():
            self._fail_waiter(future)

    def _untrack(self, future: Future[Any]) -> None:
        with self._waiting_lock:
            self._waiting.discard(future)

    def wait(self, future: Future[T], what: str) -> T:
        """Wait for a reply posted to the I/O thread.

        Raises:
            IllegalStateException: called on the I/O thread (would deadlock).
            JMSException: no reply within the request timeout, or the failure it reports.
        """
        if threading.current_thread() is self._thread:
            raise IllegalStateException(f"blocking call ({what}) from an I/O callback")
        with self._waiting_lock:
            self._waiting.add(future)
        if self._done.is_set():  # the I/O thread ended: nothing will complete it
            self._fail_waiter(future)
        try:
            return future.result(REQUEST_TIMEOUT)
        except FutureTimeout:
            raise JMSException(f"no reply to {what} within {REQUEST_TIMEOUT} s") from None
        finally:
            with self._waiting_lock:
                self._waiting.discard(future)

    def call(self, fn: Callable[[], T], what: str) -> T:
        """Run ``fn`` on the I/O thread and return its result."""
        future: Future[T] = Future()

        def run() -> None:
            try:
                future.set_result(fn())
            except Exception as exc:
                future.set_exception(exc)

        self.post(run)
        return self.wait(future, what)

    def channel(self, on_open_callback: Callable[[Any], None]) -> None:
        """I/O thread: open a pika channel (`interop.jms.channel.open_channel`)."""
        self._connection.channel(on_open_callback=on_open_callback)
