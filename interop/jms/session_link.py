"""A session's channel over time: sending, acks on the wire, failure, failover.

Part of `interop.jms.session.Session` (a mixin, so the session module stays one screenful
of public API). A send waits for the publisher confirm outside a transaction when the
message is persistent; an acknowledgement the application relies on is waited for until it
is written to the socket (`_acks_written`). The session's channel can end three ways: a
channel error (the session fails: every call raises ``JMSException``), a lost connection
without failover (the same), or a lost connection with failover (`interop.jms.reconnect`):
then `_interrupted` forgets
every delivery of the dead channel (the broker requeues them; their tags mean nothing on
the next channel) and `_resume` opens a new channel and subscribes every consumer again
under a fresh consumer tag, re-declaring its queue (a non-durable topic subscriber gets a
new queue: what was published meanwhile is lost to it, as in ActiveMQ; a consumer of a
temporary queue is closed, since the queue died with the connection).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future

from interop.jms import codec, scheduled
from interop.jms.ackstate import AckState
from interop.jms.channel import ChannelLink, open_channel
from interop.jms.completion import ProducerWindow
from interop.jms.constants import AckMode
from interop.jms.consumer import MessageConsumer
from interop.jms.destinations import Destination, TemporaryQueue, Topic, is_wildcard
from interop.jms.errors import IllegalStateException, InvalidDestinationException, JMSException
from interop.jms.groups import check_send
from interop.jms.messages import Message
from interop.jms.options import ConnectionOptions
from interop.jms.ports import SessionConnection
from interop.jms.transport import REQUEST_TIMEOUT

__all__ = ["SessionLink"]

log = logging.getLogger(__name__)


class SessionLink:
    """Channel failure, cancellation and failover handling of a session (mixin)."""

    _connection: SessionConnection
    _options: ConnectionOptions
    _link: ChannelLink
    _acks: AckState
    _cond: threading.Condition
    _consumers: list[MessageConsumer]
    _closed: bool
    _error: JMSException | None
    _async_pending: set[Future[None]]
    ack_mode: AckMode
    transacted: bool

    def _schedule_flush(self, consumer: MessageConsumer, interval: float) -> None:
        """optimizedAckScheduledAckInterval: flush the optimized acks every ``interval``."""

        def flush() -> None:
            with self._cond:
                if consumer.closed or self._error is not None or consumer.batcher is None:
                    return
                self._acks.send_acks(consumer.batcher.take_all())
            self._connection.transport.call_later(interval, flush)

        self._connection.transport.call_later(interval, flush)

    def _channel_failed(self, error: JMSException) -> None:
        """The channel closed under us (I/O thread)."""
        if self._connection.failover and self._link.connection_lost:
            return  # the connection is lost: failover interrupts and resumes the session
        log.warning("session channel closed: %s", error)
        self._fail(error)

    def _failed_over(self, link: ChannelLink | None = None) -> bool:
        """After an error on ``link`` (default: the current channel): True when it was the
        connection going down and failover has since reconnected (waits for that, up to the
        failover timeout, which raises)."""
        link = self._link if link is None else link
        if not self._connection.failover:
            return False
        if not (link.connection_lost or not link.transport.is_open):
            return False
        self._connection._await_transport("the interrupted operation")
        return True

    # ==========================================================================================
    # Failover
    # ==========================================================================================
    def _interrupted(self) -> None:
        """The connection is lost (failover): forget every delivery of the dead channel."""
        with self._cond:
            self._acks.forget()
            for consumer in self._consumers:
                consumer._forget()
            self._cond.notify_all()

    def _resume(self) -> None:
        """Failover reconnected (reconnect thread): a new channel, the same consumers.

        Raises:
            JMSException: the new broker refused something (failover tries again).
        """
        with self._cond:
            if self._closed:
                return
        link = open_channel(self._connection.transport)
        if self.transacted:
            link.tx_select()
        else:
            link.confirm_select()
        with self._cond:
            self._link = link
            link.on_close = self._channel_failed
            link.on_consumer_cancelled = self._consumer_cancelled
            self._acks.rebind(link)
            consumers = [consumer for consumer in self._consumers if not consumer.closed]
        for consumer in consumers:
            queue = self._declare_again(consumer)
            if queue is None:
                continue
            with self._cond:
                consumer._restart(queue)
            if consumer.prefetch > 0:
                link.consume(
                    queue,
                    consumer._on_message,
                    consumer_tag=consumer.current_tag,
                    prefetch=consumer.prefetch,
                    exclusive=consumer.exclusive,
                    arguments=consumer.arguments,
                )
            interval = self._options.optimized_ack_scheduled_ack_interval
            auto = self.ack_mode is AckMode.AUTO_ACKNOWLEDGE
            if consumer.batcher is not None and auto and interval > 0:
                self._schedule_flush(consumer, interval)

    def _declare_again(self, consumer: MessageConsumer) -> str | None:
        """The queue ``consumer`` reads on the new connection (None: it cannot go on)."""
        destination = consumer.destination
        topology = self._connection.topology
        client_id = self._connection.client_id
        if consumer.subscription_name is not None and client_id is not None:
            assert isinstance(destination, Topic)
            return topology.durable_subscription(client_id, consumer.subscription_name, destination)
        if isinstance(destination, Topic):
            return topology.subscriber_queue(destination)  # messages of the outage are lost
        if isinstance(destination, TemporaryQueue):
            log.warning(
                "temporary queue %s died with the lost connection; its consumer is closed",
                destination.name,
            )
            with self._cond:
                consumer.closed = True
                consumer._listener = None
                self._consumers.remove(consumer)
                self._cond.notify_all()
            return None
        return topology.ensure_queue(
            destination.name, single_active_consumer=consumer.single_active_consumer
        )

    def _consumer_cancelled(self, consumer_tag: str) -> None:
        """The broker cancelled a subscription (its queue was deleted): I/O thread."""
        with self._cond:
            for consumer in self._consumers:
                if consumer.current_tag == consumer_tag:
                    log.warning(
                        "the broker cancelled the consumer of queue %r (queue deleted?); "
                        "the consumer is closed",
                        consumer.queue,
                    )
                    consumer.closed = True
                    consumer._listener = None
                    self._consumers.remove(consumer)
                    break
            self._cond.notify_all()

    def _fail(self, error: JMSException) -> None:
        with self._cond:
            if self._error is None:
                self._error = error
            self._cond.notify_all()

    def _raise_if_failed(self) -> None:
        error = self._error
        if error is not None:
            raise JMSException(
                f"session failed: {error}", reply_code=error.reply_code, reply_text=error.reply_text
            )

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateException("The Session is closed")
        self._raise_if_failed()

    def _acks_written(self) -> None:
        """Return once the acks queued by the caller's last call are on the wire, or with
        ``send_acks_async=False`` processed by the broker (called without ``_cond``: the
        I/O thread may need it to make progress).

        Raises:
            JMSException: the connection or channel closed before the acks were written
                (the broker redelivers those messages).
        """
        with self._cond:
            if not self._acks.take_unwritten():
                return
            link = self._link
        try:
            if self._options.send_acks_async:
                link.transport.wait(link.written(), "acknowledgement write")
            else:
                link.processed()
        except JMSException as exc:
            if self._failed_over(link):
                log.warning("connection lost before an ack was written; the broker redelivers")
                return
            raise JMSException(
                f"the acknowledgement could not be sent ({exc}); the broker will redeliver "
                "the message",
                reply_code=exc.reply_code,
                reply_text=exc.reply_text,
            ) from exc

    def _send(
        self,
        message: Message,
        destination: Destination,
        time_to_live: float,
        *,
        asynchronous: bool = False,
        window: ProducerWindow | None = None,
    ) -> Future[None] | None:
        """Publish ``message``. Synchronous: a persistent send outside a transaction waits
        for its confirm, and one interrupted by a failover is sent again. Asynchronous:
        returns the publish's future at once (after room in ``window``)."""
        self._check_open()
        if isinstance(destination, Topic) and is_wildcard(destination.name):
            raise InvalidDestinationException(
                f"cannot publish to wildcard topic {destination.name!r}"
            )
        while True:
            self._connection._await_transport("send")
            with self._cond:
                self._check_open()
                link = self._link
                if self.transacted:
                    self._acks.tx_work = True
            check_send(message, destination, link.transport)  # JMSXGroupID needs amqpd
            try:
                outgoing = self._outgoing(message, destination, time_to_live)
                if asynchronous:
                    return self._publish_async(link, outgoing, window)
                future = link.publish(outgoing)
                if not self.transacted and message.delivery_mode == 2:
                    link.transport.wait(future, "publisher confirm")
                return None
            except JMSException:
                if not self._failed_over(link):
                    raise
                log.info("send of %s interrupted by a failover: sending it again", message)

    def _publish_async(
        self, link: ChannelLink, outgoing: codec.Outgoing, window: ProducerWindow | None
    ) -> Future[None]:
        size = len(outgoing.body)
        if window is not None:
            window.acquire(size, REQUEST_TIMEOUT)
        future = link.publish(outgoing)
        with self._cond:
            self._async_pending.add(future)

        def settled(done: Future[None]) -> None:
            if window is not None:
                window.release(size)
            with self._cond:
                self._async_pending.discard(done)
                self._cond.notify_all()

        future.add_done_callback(settled)
        return future

    def _outgoing(
        self, message: Message, destination: Destination, time_to_live: float
    ) -> codec.Outgoing:
        """Route (declaring a queue the first time) and encode ``message``; a scheduled
        message (AMQ_SCHEDULED_DELAY) goes through a delayed exchange (scheduled.py)."""
        topology = self._connection.topology
        delay = scheduled.scheduled_delay(
            message.properties, self._connection.transport.has_capability(scheduled.CAPABILITY)
        )
        if delay is None:
            exchange, routing_key = topology.route(destination)
        else:
            exchange, routing_key = topology.delayed_route(destination)
        outgoing = codec.encode(
            message,
            exchange,
            routing_key,
            connection_id=self._connection.connection_id if destination.is_topic else None,
            time_to_live=time_to_live,
        )
        if delay is not None:
            outgoing.properties.headers = {
                **(outgoing.properties.headers or {}),
                scheduled.DELAY_HEADER: delay,
            }
        return outgoing
