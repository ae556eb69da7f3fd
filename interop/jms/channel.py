"""One AMQP channel of a `Transport`: blocking requests, queued acks and publishes, confirms.

See `interop.jms.transport` for the threading rules (every pika call on the I/O thread, a
``Future`` per request, futures failed when the channel or the connection closes) and for
what `ChannelLink.written` guarantees.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Final, TypeVar, cast

import pika
import pika.exceptions
import pika.spec

from interop.jms.codec import Outgoing
from interop.jms.errors import JMSException
from interop.jms.transport import Transport, error_from

__all__ = ["ChannelLink", "open_channel"]

T = TypeVar("T")
MessageCallback = Callable[[Any, Any, Any, bytes], None]

_WRITE_POLL: Final = 0.0005
"""Seconds between looks at a full write buffer (`ChannelLink.written`)."""


def open_channel(transport: Transport) -> ChannelLink:
    """Open a channel on ``transport`` (blocking)."""
    future: Future[ChannelLink] = Future()

    def opened(channel: Any) -> None:
        future.set_result(ChannelLink(transport, channel))

    def start() -> None:
        try:
            transport.channel(on_open_callback=opened)
        except Exception as exc:
            future.set_exception(error_from(exc, "cannot open a channel"))

    transport.post(start)
    return transport.wait(future, "channel.open")


class ChannelLink:
    """One pika channel: blocking requests, queued acks and publishes, close handling."""

    def __init__(self, transport: Transport, channel: Any) -> None:
        self.transport = transport
        self.channel = channel
        self.error: JMSException | None = None
        self.connection_lost = False
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
        # a channel error is ChannelClosed(ByBroker/ByClient); anything else is the
        # connection going down with every channel on it
        self.connection_lost = not isinstance(reason, pika.exceptions.ChannelClosed)
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

    def exchange_declare(
        self, exchange: str, exchange_type: str, arguments: dict[str, Any] | None = None
    ) -> None:
        """``exchange.declare`` (durable)."""
        self.request(
            lambda done: self.channel.exchange_declare(
                exchange,
                exchange_type=exchange_type,
                durable=True,
                arguments=arguments,
                callback=done,
            ),
            "exchange.declare",
        )

    def exchange_bind(self, destination: str, source: str, routing_key: str) -> None:
        """``exchange.bind``."""
        self.request(
            lambda done: self.channel.exchange_bind(
                destination, source, routing_key, callback=done
            ),
            "exchange.bind",
        )

    def processed(self) -> None:
        """A round trip (passive ``exchange.declare`` of ``amq.direct``, which every AMQP
        0-9-1 broker has): returns once the broker has processed every frame sent on this
        channel before it (ActiveMQ's ``sendAcksAsync=false``)."""
        self.request(
            lambda done: self.channel.exchange_declare(
                "amq.direct", exchange_type="direct", passive=True, callback=done
            ),
            "acknowledgement round trip",
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
        auto_ack: bool = False,
    ) -> None:
        """``basic.qos(prefetch, global=false)`` then ``basic.consume`` (blocking)."""

        def start(done: Callable[[Any], None]) -> None:
            self.channel.basic_qos(prefetch_count=prefetch, callback=lambda _f: None)
            self.channel.basic_consume(
                queue,
                on_message,
                auto_ack=auto_ack,
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
        Cancel comes first for an exclusive subscription, so it can be taken again; otherwise
        last, so the queue never sees the JMS consumer gone (amqpd keeps its message groups
        with it: ``x-message-group-owner``, interop/jms/groups.py).
        """

        def cancel() -> None:
            if old_tag in self.channel.consumer_tags:
                self.channel.basic_cancel(old_tag, callback=lambda _f: None)
                self._keep_late_deliveries(old_tag)

        def run() -> None:
            if self.error is not None or not self.channel.is_open:
                return
            if exclusive:
                cancel()
            self.channel.basic_qos(prefetch_count=prefetch, callback=lambda _f: None)
            self.channel.basic_consume(
                queue,
                on_message,
                exclusive=exclusive,
                consumer_tag=new_tag,
                arguments=arguments,
                callback=lambda _f: on_done(),
            )
            if not exclusive:
                cancel()

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

        self.transport.track(future)
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
