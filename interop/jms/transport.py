"""One AMQP connection on its own I/O thread (pika ``SelectConnection``), and its channels.

Theory of operation
-------------------
pika objects are not thread-safe, so every pika call runs on the connection's I/O thread.
Application threads hand work over with ``ioloop.add_callback_threadsafe`` (FIFO, so frames
leave in the order the application asked for them) and, for a request with a reply
(``queue.declare``, ``basic.consume``, ``tx.commit``…), wait on a ``Future`` that the reply
callback completes. When a channel or the connection closes, every future still waiting on
it fails with a `JMSException` carrying the broker's reply code and text, so no caller
waits forever. Acks, rejects and publishes are fire-and-forget: they are queued and sent in
order; a publish returns a future completed by the publisher confirm (confirm channels) or
as soon as it is written (transacted channels).

*On the wire.* pika's ``basic_ack`` only appends the frame to the transport's write buffer;
the socket write happens when the ioloop next sees the socket writable. `ChannelLink.written`
returns a future that completes once every frame queued before it has left that buffer
(handed to the kernel with ``send``): a caller that waits for it knows its acknowledgement
survives the process being killed, as with ActiveMQ, which writes the ack on the caller's
thread. The future fails when the channel or the connection closes first.

A blocking call from the I/O thread itself would deadlock, so it raises instead.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Final, TypeVar, cast

import pika
import pika.spec

from interop.jms.codec import Outgoing
from interop.jms.errors import IllegalStateException, JMSException

__all__ = ["ChannelLink", "Transport", "error_from"]

log = logging.getLogger(__name__)

T = TypeVar("T")
REQUEST_TIMEOUT: Final = 60.0
"""Seconds to wait for any broker reply before giving up (the connection is then suspect)."""

_WRITE_POLL: Final = 0.0005
"""Seconds between looks at a full write buffer (`ChannelLink.written`)."""

MessageCallback = Callable[[Any, Any, Any, bytes], None]


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
        self.error: JMSException | None = None

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

    def wait(self, future: Future[T], what: str) -> T:
        """Wait for a reply posted to the I/O thread.

        Raises:
            IllegalStateException: called on the I/O thread (would deadlock).
            JMSException: no reply within the request timeout, or the failure it reports.
        """
        if threading.current_thread() is self._thread:
            raise IllegalStateException(f"blocking call ({what}) from an I/O callback")
        try:
            return future.result(REQUEST_TIMEOUT)
        except FutureTimeout:
            raise JMSException(f"no reply to {what} within {REQUEST_TIMEOUT} s") from None

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

    def open_channel(self) -> ChannelLink:
        """Open a channel (blocking)."""
        future: Future[ChannelLink] = Future()

        def opened(channel: Any) -> None:
            future.set_result(ChannelLink(self, channel))

        def start() -> None:
            try:
                self._connection.channel(on_open_callback=opened)
            except Exception as exc:
                future.set_exception(error_from(exc, "cannot open a channel"))

        self.post(start)
        return self.wait(future, "channel.open")


class ChannelLink:
    """One pika channel: blocking requests, queued acks and publishes, close handling."""

    def __init__(self, transport: Transport, channel: Any) -> None:
        self.transport = transport
        self.channel = channel
        self.error: JMSException | None = None
        self.on_close: Callable[[JMSException], None] | None = None
        self.on_consumer_cancelled: Callable[[str], None] | None = None
        self._closing = False
        self._closed: Future[None] = Future()
        self._pending: set[Future[Any]] = set()
        self._confirm_mode = False
        self._publish_seq = 0
        self._unconfirmed: dict[int, Future[None]] = {}
        self._get_lock = threading.Lock()
        self._get_future: Future[Any] | None = None
        channel.add_on_close_callback(self._on_channel_closed)
        channel.add_on_cancel_callback(self._on_cancel)
        channel.add_callback(self._on_get_empty, [pika.spec.Basic.GetEmpty], one_shot=False)

    # -- close -------------------------------------------------------------------------------
    def _on_channel_closed(self, _channel: Any, reason: object) -> None:
        error = error_from(reason, "channel closed")
        self.error = error
        for future in [*self._pending, *self._unconfirmed.values()]:
            if not future.done():
                future.set_exception(error)
        self._pending.clear()
        self._unconfirmed.clear()
        if self._get_future is not None and not self._get_future.done():
            self._get_future.set_exception(error)
        self._closed.set_result(None)
        if not self._closing and self.on_close is not None:
            self.on_close(error)

    def _on_cancel(self, method_frame: Any) -> None:
        if self.on_consumer_cancelled is not None:
            self.on_consumer_cancelled(str(method_frame.method.consumer_tag))

    def close(self) -> None:
        """Close the channel (idempotent; the broker requeues what is still unacked)."""
        self._closing = True
        if self.error is not None:
            return

        def start() -> None:
            if self.channel.is_open:
                self.channel.close()

        try:
            self.transport.post(start)
            self.transport.wait(self._closed, "channel.close")
        except JMSException:
            pass  # the connection is gone: the channel is closed with it

    @property
    def is_open(self) -> bool:
        """True until the channel closed."""
        return self.error is None and not self._closing

    # -- requests with a reply ---------------------------------------------------------------------
    def request(self, start: Callable[[Callable[[Any], None]], None], what: str) -> Any:
        """Run ``start(done)`` on the I/O thread and wait until it calls ``done(value)``."""
        future: Future[Any] = Future()

        def run() -> None:
            if self.error is not None:
                future.set_exception(self.error)
                return
            self._pending.add(future)

            def done(value: Any) -> None:
                self._pending.discard(future)
                if not future.done():
                    future.set_result(value)

            try:
                start(done)
            except Exception as exc:
                self._pending.discard(future)
                if not future.done():
                    future.set_exception(error_from(exc, what))

        self.transport.post(run)
        return self.transport.wait(future, what)

    def queue_declare(
        self,
        queue: str,
        *,
        passive: bool = False,
        durable: bool = False,
        exclusive: bool = False,
        auto_delete: bool = False,
        arguments: dict[str, Any] | None = None,
    ) -> Any:
        """``queue.declare``; returns the Declare-Ok method (queue, message/consumer count)."""
        return self.request(
            lambda done: self.channel.queue_declare(
                queue,
                passive=passive,
                durable=durable,
                exclusive=exclusive,
                auto_delete=auto_delete,
                arguments=arguments,
                callback=lambda frame: done(frame.method),
            ),
            "queue.declare",
        )

    def queue_bind(self, queue: str, exchange: str, routing_key: str) -> None:
        """``queue.bind``."""
        self.request(
            lambda done: self.channel.queue_bind(queue, exchange, routing_key, callback=done),
            "queue.bind",
        )

    def queue_delete(self, queue: str, *, if_unused: bool = False) -> None:
        """``queue.delete``."""
        self.request(
            lambda done: self.channel.queue_delete(queue, if_unused=if_unused, callback=done),
            "queue.delete",
        )

    def exchange_declare(self, exchange: str, exchange_type: str) -> None:
        """``exchange.declare`` (durable)."""
        self.request(
            lambda done: self.channel.exchange_declare(
                exchange, exchange_type=exchange_type, durable=True, callback=done
            ),
            "exchange.declare",
        )

    def tx_select(self) -> None:
        """``tx.select``."""
        self.request(lambda done: self.channel.tx_select(callback=done), "tx.select")

    def tx_commit(self) -> None:
        """``tx.commit`` (after every frame queued before it)."""
        self.request(lambda done: self.channel.tx_commit(callback=done), "tx.commit")

    def tx_rollback(self) -> None:
        """``tx.rollback``."""
        self.request(lambda done: self.channel.tx_rollback(callback=done), "tx.rollback")

    def confirm_select(self) -> None:
        """``confirm.select``: publishes are confirmed from now on."""

        def start(done: Callable[[Any], None]) -> None:
            self._confirm_mode = True
            self.channel.confirm_delivery(self._on_confirm, callback=done)

        self.request(start, "confirm.select")

    def consume(
        self,
        queue: str,
        on_message: MessageCallback,
        *,
        consumer_tag: str,
        prefetch: int,
        exclusive: bool = False,
        arguments: dict[str, Any] | None = None,
    ) -> None:
        """``basic.qos(prefetch, global=false)`` then ``basic.consume`` (blocking)."""

        def start(done: Callable[[Any], None]) -> None:
            self.channel.basic_qos(prefetch_count=prefetch, callback=lambda _f: None)
            self.channel.basic_consume(
                queue,
                on_message,
                exclusive=exclusive,
                consumer_tag=consumer_tag,
                arguments=arguments,
                callback=done,
            )

        self.request(start, "basic.consume")

    def cancel(self, consumer_tag: str) -> None:
        """``basic.cancel`` and wait for Cancel-Ok (no delivery for the tag after this)."""

        def start(done: Callable[[Any], None]) -> None:
            if consumer_tag not in self.channel.consumer_tags:
                done(None)
                return
            self.channel.basic_cancel(consumer_tag, callback=done)
            self._keep_late_deliveries(consumer_tag)

        self.request(start, "basic.cancel")

    def resubscribe(
        self,
        queue: str,
        on_message: MessageCallback,
        *,
        old_tag: str,
        new_tag: str,
        prefetch: int,
        exclusive: bool,
        arguments: dict[str, Any] | None,
        on_done: Callable[[], None],
    ) -> None:
        """Cancel ``old_tag`` and consume again as ``new_tag`` (fire-and-forget).

        The old tag's deliveries stay unacked on the channel and no longer count against the
        new subscription's prefetch: this is how the window grows (see `interop.jms.acks`).
        Cancel comes first so an exclusive subscription can be taken again.
        """

        def run() -> None:
            if self.error is not None or not self.channel.is_open:
                return
            if old_tag in self.channel.consumer_tags:
                self.channel.basic_cancel(old_tag, callback=lambda _f: None)
                self._keep_late_deliveries(old_tag)
            self.channel.basic_qos(prefetch_count=prefetch, callback=lambda _f: None)
            self.channel.basic_consume(
                queue,
                on_message,
                exclusive=exclusive,
                consumer_tag=new_tag,
                arguments=arguments,
                callback=lambda _f: on_done(),
            )

        self.transport.post(run)

    def _keep_late_deliveries(self, consumer_tag: str) -> None:
        # pika rejects *with requeue* every delivery that arrives for a tag between
        # basic.cancel and cancel-ok, which would bump the message's x-delivery-count and
        # reorder the queue. Such deliveries are ordinary unacked deliveries on the channel:
        # dropping the tag from pika's "cancelled" set hands them to the consumer callback
        # (still registered until cancel-ok), which buffers them like any other.
        cancelled = getattr(self.channel, "_cancelled", None)
        if isinstance(cancelled, set):
            cancelled.discard(consumer_tag)

    def get(self, queue: str, on_message: Callable[[Any, Any, bytes], T]) -> T | None:
        """``basic.get``: ``on_message(method, properties, body)`` runs on the I/O thread and
        its result is returned; None when the queue is empty."""
        with self._get_lock:
            future: Future[Any] = Future()

            def got(_channel: Any, method: Any, properties: Any, body: bytes) -> None:
                self._get_future = None
                try:
                    future.set_result(on_message(method, properties, body))
                except Exception as exc:
                    future.set_exception(exc)

            def start() -> None:
                if self.error is not None:
                    future.set_exception(self.error)
                    return
                self._get_future = future
                try:
                    self.channel.basic_get(queue, got, auto_ack=False)
                except Exception as exc:
                    self._get_future = None
                    future.set_exception(error_from(exc, "basic.get"))

            self.transport.post(start)
            return cast("T | None", self.transport.wait(future, "basic.get"))

    def _on_get_empty(self, _frame: Any) -> None:
        future, self._get_future = self._get_future, None
        if future is not None and not future.done():
            future.set_result(None)

    # -- fire-and-forget -------------------------------------------------------------------------
    def _send(self, fn: Callable[[], None]) -> None:
        def run() -> None:
            if self.error is None and self.channel.is_open:
                fn()

        self.transport.post(run)

    def written(self) -> Future[None]:
        """A future completed once every frame queued so far is written to the socket (see
        the module doc); it fails when the channel or the connection closes first."""
        future: Future[None] = Future()

        def check() -> None:
            if future.done():
                return
            left = self.transport.unwritten_bytes()
            if self.error is not None or left is None:
                self._pending.discard(future)
                future.set_exception(self.error or JMSException("connection closed"))
            elif left == 0:
                self._pending.discard(future)
                future.set_result(None)
            else:  # the socket is full: look again after the ioloop's next write
                try:
                    self.transport.call_later(_WRITE_POLL, check)
                except JMSException as exc:
                    self._pending.discard(future)
                    future.set_exception(exc)

        def start() -> None:
            self._pending.add(future)
            check()

        self.transport.post(start)
        return future

    def ack(self, delivery_tag: int, multiple: bool = False) -> None:
        """Queue ``basic.ack``."""
        self._send(lambda: self.channel.basic_ack(delivery_tag, multiple))

    def reject(self, delivery_tag: int, requeue: bool) -> None:
        """Queue ``basic.reject``."""
        self._send(lambda: self.channel.basic_reject(delivery_tag, requeue))

    def publish(self, outgoing: Outgoing) -> Future[None]:
        """Queue ``basic.publish``; the future completes on the confirm (or when written)."""
        future: Future[None] = Future()

        def run() -> None:
            if self.error is not None:
                future.set_exception(self.error)
                return
            try:
                self.channel.basic_publish(
                    outgoing.exchange, outgoing.routing_key, outgoing.body, outgoing.properties
                )
            except Exception as exc:
                future.set_exception(error_from(exc, "basic.publish"))
                return
            if self._confirm_mode:
                self._publish_seq += 1
                self._unconfirmed[self._publish_seq] = future
            else:
                future.set_result(None)

        self.transport.post(run)
        return future

    def _on_confirm(self, frame: Any) -> None:
        method = frame.method
        nack = isinstance(method, pika.spec.Basic.Nack)
        tag = int(method.delivery_tag)
        done = [seq for seq in self._unconfirmed if seq <= tag] if method.multiple else [tag]
        for seq in done:
            future = self._unconfirmed.pop(seq, None)
            if future is None or future.done():
                continue
            if nack:
                future.set_exception(JMSException("the broker refused the message (basic.nack)"))
            else:
                future.set_result(None)
