"""A JMS session: one AMQP channel, its consumers and producers, its listener thread.

The acknowledgement rules live in `interop.jms.ackstate` (its module docstring is the
theory of operation of the session's acknowledgement state); this module holds the public
API, consumer creation and close handling; the session's channel (sending, acks on the
wire, failure, failover) is `interop.jms.session_link`, its listener thread and receive
bookkeeping `interop.jms.session_dispatch` (mixins of `Session`). Transacted
sessions run ``tx.select`` on their channel, the others ``confirm.select`` (a persistent
send outside a transaction waits for its confirm, as ActiveMQ's synchronous send waits for
the broker's receipt). Every piece of session state is guarded by ``_cond``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from typing import Any

from interop.jms.acks import consumer_helpers
from interop.jms.ackstate import AckState
from interop.jms.browser import QueueBrowser
from interop.jms.channel import ChannelLink
from interop.jms.completion import Completions
from interop.jms.constants import QUEUE_SELECTOR_ARGUMENT, AckMode
from interop.jms.consumer import MessageConsumer
from interop.jms.delivery import Delivery
from interop.jms.destinations import (
    ConsumerOptions,
    Destination,
    Queue,
    TemporaryQueue,
    Topic,
)
from interop.jms.dispatcher import Dispatcher
from interop.jms.errors import (
    IllegalStateException,
    InvalidDestinationException,
    InvalidSelectorException,
    JMSException,
    TransactionRolledBackException,
)
from interop.jms.groups import CAPABILITY, OWNER_ARGUMENT
from interop.jms.messages import BytesMessage, MapMessage, Message, TextMessage
from interop.jms.ports import SessionConnection
from interop.jms.producer import MessageProducer
from interop.jms.selector import compile_selector
from interop.jms.session_dispatch import SessionDispatch
from interop.jms.transport import REQUEST_TIMEOUT

__all__ = ["Session"]

log = logging.getLogger(__name__)


class _Receipt:
    """Binds a received message to its session (`interop.jms.messages.AckHandle`)."""

    __slots__ = ("delivery", "session")

    def __init__(self, session: Session, delivery: Delivery) -> None:
        self.session = session
        self.delivery = delivery

    def acknowledge(self) -> None:
        self.session._acknowledge_message(self.delivery)

    def processing_failed(self) -> None:
        self.session._message_failed(self.delivery)


class Session(SessionDispatch):
    """A single-threaded context for producing and consuming (JMS ``Session``).

    Create it with `Connection.create_session`. It is a context manager (closed on exit).
    Its consumers, producers and listener thread reach it through the Protocols of
    `interop.jms.ports` (``ConsumerSession``, ``ProducerSession``, ``ListenerSession``).
    """

    def __init__(self, connection: SessionConnection, link: ChannelLink, ack_mode: AckMode) -> None:
        self._connection = connection
        self._options = connection.options
        self._link = link
        self.ack_mode = ack_mode
        self.transacted = ack_mode is AckMode.SESSION_TRANSACTED
        self._cond = threading.Condition(threading.RLock())
        self._consumers: list[MessageConsumer] = []
        self._acks = AckState(
            ack_mode,
            link,
            self._options,
            connection.connection_id,
            self._cond,
            lambda delivery: _Receipt(self, delivery),
        )
        self._receivers = 0
        self._rr = 0
        self._closed = False
        self._error: JMSException | None = None
        self._dispatcher: Dispatcher[MessageConsumer] | None = None
        self._in_listener = False
        self._async_pending: set[Future[None]] = set()
        self._completions = Completions("jms-completion")
        link.on_close = self._channel_failed
        link.on_consumer_cancelled = self._consumer_cancelled

    # ==========================================================================================
    # Public API
    # ==========================================================================================
    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        """True once closed."""
        return self._closed

    def queue(self, name: str) -> Queue:
        """A queue by name (``"orders?consumer.prefetchSize=10"`` keeps the option)."""
        return Queue(name)

    def topic(self, name: str) -> Topic:
        """A topic by name; subscribers may use ActiveMQ wildcards (``*``, ``>``)."""
        return Topic(name)

    def temporary_queue(self) -> TemporaryQueue:
        """A queue that lives as long as the connection (for replies)."""
        self._check_open()
        return TemporaryQueue(self._connection.topology.temporary_queue())

    # -- message factories (JMS Session.createXxxMessage) ---------------------------------------
    def create_message(self) -> Message:
        """A message without a body (JMS ``createMessage``): headers and properties only."""
        self._check_open()
        return Message()

    def create_text_message(self, text: str | None = None) -> TextMessage:
        """A `TextMessage` (JMS ``createTextMessage``)."""
        self._check_open()
        return TextMessage(text)

    def create_bytes_message(self, data: bytes = b"") -> BytesMessage:
        """A `BytesMessage` (JMS ``createBytesMessage``)."""
        self._check_open()
        return BytesMessage(data)

    def create_map_message(self, mapping: Mapping[str, Any] | None = None) -> MapMessage:
        """A `MapMessage` (JMS ``createMapMessage``)."""
        self._check_open()
        return MapMessage(mapping)

    def create_producer(self, destination: Destination | None = None) -> MessageProducer:
        """A producer for ``destination`` (None: give the destination to each ``send``)."""
        self._check_open()
        return MessageProducer(self, destination)

    def create_consumer(
        self, destination: Destination, selector: str | None = None, no_local: bool = False
    ) -> MessageConsumer:
        """A consumer of a queue or a (non-durable) topic subscription.

        Args:
            destination: The queue or topic, with optional ``consumer.*`` options.
            selector: A JMS selector: on a topic evaluated by the client, on a queue by the
                broker (amqpd's ``x-selector``; brokers without selectors refuse it).
            no_local: Skip messages published on this connection (topics).

        Raises:
            ConfigurationError: an unknown or bad ``consumer.*`` option.
            InvalidSelectorException: a selector that does not parse, or one on a queue of
                a broker without selectors.
        """
        self._check_open()
        options = ConsumerOptions.parse(destination)
        topology = self._connection.topology
        if isinstance(destination, Topic):
            queue = topology.subscriber_queue(destination)
            default_prefetch = self._options.prefetch_policy.topic_prefetch
            return self._subscribe(
                destination, queue, options, selector, no_local, default_prefetch, temporary=True
            )
        if isinstance(destination, TemporaryQueue):
            queue = destination.name
        elif isinstance(destination, Queue):
            queue = topology.ensure_queue(
                destination.name, single_active_consumer=options.exclusive
            )
        else:
            raise InvalidDestinationException(f"cannot consume from {destination!r}")
        default_prefetch = self._options.prefetch_policy.queue_prefetch
        return self._subscribe(destination, queue, options, selector, no_local, default_prefetch)

    def create_browser(self, queue: Queue, selector: str | None = None) -> QueueBrowser:
        """A `QueueBrowser`: the queue's messages without consuming them (JMS
        ``createBrowser``). On amqpd the broker sends copies and nothing changes; on other
        brokers see `interop.jms.browser` for what browsing costs.

        Raises:
            InvalidDestinationException: not a queue.
            InvalidSelectorException: the selector does not parse.
        """
        self._check_open()
        if not isinstance(queue, Queue):
            raise InvalidDestinationException("a QueueBrowser browses a queue, not a topic")
        prefetch = self._options.prefetch_policy.queue_browser_prefetch
        return QueueBrowser(self._connection, queue, selector, prefetch)

    def create_durable_subscriber(
        self, topic: Topic, name: str, selector: str | None = None, no_local: bool = False
    ) -> MessageConsumer:
        """A durable subscription keyed by (connection client id, ``name``).

        Raises:
            IllegalStateException: the connection has no client id.
            JMSException: the subscription already has an active consumer.
        """
        self._check_open()
        client_id = self._connection.client_id
        if client_id is None:
            raise IllegalStateException(
                "You cannot create a durable subscriber without specifying a unique clientID "
                "on a Connection"
            )
        if not isinstance(topic, Topic):
            raise InvalidDestinationException("durable subscribers need a topic")
        if self._connection._durable_in_use(name):
            raise JMSException(
                f"Durable consumer is in use for client: {client_id} and subscriptionName: {name}"
            )
        options = ConsumerOptions.parse(topic)
        queue = self._connection.topology.durable_subscription(client_id, name, topic)
        policy = self._options.prefetch_policy
        optimized = (
            self.ack_mode is AckMode.AUTO_ACKNOWLEDGE and self._connection.optimized_dispatch
        )
        prefetch = (
            policy.optimize_durable_topic_prefetch if optimized else policy.durable_topic_prefetch
        )
        consumer = self._subscribe(
            topic, queue, options, selector, no_local, prefetch, exclusive=True
        )
        consumer.subscription_name = name
        return consumer

    def unsubscribe(self, name: str) -> None:
        """Delete durable subscription ``name`` of this connection's client id.

        Raises:
            IllegalStateException: no client id.
            JMSException: the subscription has an active consumer.
            InvalidDestinationException: there is no such subscription.
        """
        self._check_open()
        client_id = self._connection.client_id
        if client_id is None:
            raise IllegalStateException("unsubscribe needs a clientID on the Connection")
        if self._connection._durable_in_use(name):
            raise JMSException(f"Durable consumer is in use: {client_id}.{name}")
        self._connection.topology.unsubscribe(client_id, name)

    def acknowledge(self) -> None:
        """Acknowledge every message this session delivered to the application so far
        (CLIENT and INDIVIDUAL modes; a no-op otherwise)."""
        with self._cond:
            self._check_open()
            if self.ack_mode in (AckMode.CLIENT_ACKNOWLEDGE, AckMode.INDIVIDUAL_ACKNOWLEDGE):
                self._acks.ack_consumed()
        self._acks_written()

    def commit(self) -> None:
        """Commit: acknowledge what was consumed and publish what was sent in this
        transaction (``basic.ack`` frames, then ``tx.commit``).

        Raises:
            IllegalStateException: not a transacted session.
            TransactionRolledBackException: the broker failed the commit.
        """
        if not self.transacted:
            raise IllegalStateException("Not a transacted session")
        self._connection._await_transport("commit")
        with self._cond:
            self._check_open()
            if self._acks.tx_failed:
                self._acks.start_rollback()  # clears the failed transaction's state
                raise TransactionRolledBackException(
                    "Transaction completion in doubt due to failover: the connection was "
                    "lost while the transaction was in flight, so the broker rolled it back "
                    "(what it consumed is redelivered, what it sent is discarded); repeat "
                    "the transaction"
                )
            self._acks.commit()
            link = self._link
        try:
            link.tx_commit()
        except JMSException as exc:
            if self._failed_over(link):
                with self._cond:
                    self._acks.start_rollback()
            raise TransactionRolledBackException(
                f"commit failed: {exc}", reply_code=exc.reply_code, reply_text=exc.reply_text
            ) from exc

    def rollback(self) -> None:
        """Roll back: discard what was sent, redeliver what was consumed (counter + 1,
        after the redelivery delay; beyond maximum_redeliveries to the dead-letter queue).

        Raises:
            IllegalStateException: not a transacted session.
        """
        if not self.transacted:
            raise IllegalStateException("Not a transacted session")
        self._connection._await_transport("rollback")
        with self._cond:
            self._check_open()
            consumed, internal = self._acks.start_rollback()
            link = self._link
        try:
            link.tx_rollback()
            with self._cond:
                must_commit = self._acks.finish_rollback(consumed, internal)
            if must_commit:
                link.tx_commit()
        except JMSException:
            if not self._failed_over(link):
                raise
            # the broker rolled the transaction back with the connection

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Session]:
        """``with session.transaction():`` commits on a normal exit, rolls back on error."""
        if not self.transacted:
            raise IllegalStateException("Not a transacted session")
        try:
            yield self
        except BaseException:
            self.rollback()
            raise
        self.commit()

    def recover(self) -> None:
        """Redeliver every message delivered but not acknowledged (counts toward
        maximum_redeliveries, so it can dead-letter).

        Raises:
            IllegalStateException: the session is transacted.
        """
        if self.transacted:
            raise IllegalStateException("This session is transacted")
        with self._cond:
            self._check_open()
            self._acks.recover(self._consumers)

    def close(self) -> None:
        """Close the session: consumers first (optimized acks are flushed), then the channel
        (the broker requeues what is unacked; an open transaction is rolled back)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            consumers = list(self._consumers)
            dispatcher, self._dispatcher = self._dispatcher, None
            self._cond.notify_all()
        if dispatcher is not None:
            dispatcher.stop()
        temporary = []
        for consumer in consumers:
            self._close_consumer(consumer, session_closing=True)
            if consumer.temporary_queue:
                temporary.append(consumer.queue)
        with self._cond:  # JMS: close waits for the outcome of asynchronous sends
            self._cond.wait_for(lambda: not self._async_pending, REQUEST_TIMEOUT)
        self._link.close()
        self._completions.close(REQUEST_TIMEOUT)
        for queue in temporary:
            if self._connection.transport.is_open:
                self._connection.topology.delete_queue(queue)
        self._connection._session_closed(self)

    def _complete(self, future: Future[None], callback: Callable[[], None]) -> None:
        """Run ``callback`` on the session's completion thread once ``future`` is done, after
        the callbacks of earlier sends."""
        self._completions.submit(future, callback)

    def _abandon(self) -> None:
        """The connection was aborted: closed locally, nothing sent to the broker."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            for consumer in self._consumers:
                consumer.closed = True
                consumer._listener = None
            self._consumers.clear()
            dispatcher, self._dispatcher = self._dispatcher, None
            self._cond.notify_all()
        if dispatcher is not None:
            dispatcher.stop()
        self._connection._session_closed(self)

    # ==========================================================================================
    # Consumers
    # ==========================================================================================
    def _subscribe(
        self,
        destination: Destination,
        queue: str,
        options: ConsumerOptions,
        selector: str | None,
        no_local: bool,
        default_prefetch: int,
        *,
        exclusive: bool = False,
        temporary: bool = False,
    ) -> MessageConsumer:
        selector = selector if selector is not None else options.selector
        predicate = None
        prefetch = options.prefetch_size if options.prefetch_size is not None else default_prefetch
        prefetch = min(prefetch, 32767)
        broker_selector = None
        if selector is not None and selector.strip():
            try:
                predicate = compile_selector(selector)  # the same grammar as the broker's
                if not destination.is_topic:
                    broker_selector = self._queue_selector(selector, prefetch)
                    predicate = None  # the broker filters: the others' messages stay queued
            except InvalidSelectorException:
                self._drop_temporary(queue, temporary)
                raise
        tag = f"jms-{uuid.uuid4().hex[:12]}"
        batcher, window = consumer_helpers(
            self.ack_mode,
            prefetch=prefetch,
            is_topic=destination.is_topic,
            optimize_acknowledge=self._options.optimize_acknowledge,
            optimize_acknowledge_timeout=self._options.optimize_acknowledge_timeout,
            single_active_consumer=options.exclusive,
            consumer_tag=f"{tag}.0",
            now=time.monotonic(),
        )
        arguments: dict[str, object] | None = None
        if options.priority is not None:
            arguments = {"x-priority": options.priority}
        if broker_selector is not None:
            arguments = {**(arguments or {}), QUEUE_SELECTOR_ARGUMENT: broker_selector}
        if not destination.is_topic and self._connection.transport.has_capability(CAPABILITY):
            # one group owner for every AMQP consumer tag this JMS consumer will use
            arguments = {**(arguments or {}), OWNER_ARGUMENT: tag}
        consumer = MessageConsumer(
            self,
            destination,
            queue,
            prefetch,
            tag=tag,
            selector=predicate,
            no_local=no_local or options.no_local,
            exclusive=exclusive,
            arguments=arguments,
            batcher=batcher,
            window=window,
            temporary_queue=temporary,
        )
        consumer.single_active_consumer = options.exclusive
        with self._cond:
            self._consumers.append(consumer)
        if prefetch > 0:
            try:
                self._link.consume(
                    queue,
                    consumer._on_message,
                    consumer_tag=consumer.current_tag,
                    prefetch=prefetch,
                    exclusive=exclusive,
                    arguments=arguments,
                )
            except JMSException:
                with self._cond:
                    self._consumers.remove(consumer)
                raise
        interval = self._options.optimized_ack_scheduled_ack_interval
        if batcher is not None and self.ack_mode is AckMode.AUTO_ACKNOWLEDGE and interval > 0:
            self._schedule_flush(consumer, interval)
        return consumer

    def _queue_selector(self, selector: str, prefetch: int) -> str:
        """A selector on a queue goes to the broker (``x-selector``), if it has them.

        Raises:
            InvalidSelectorException: the broker has no selectors, or the consumer pulls.
        """
        if not self._connection.transport.has_capability("consumer_selectors"):
            raise InvalidSelectorException(
                "message selectors on queues are not supported by this broker (AMQP 0-9-1 "
                "brokers such as RabbitMQ have no broker-side selectors; amqpd has them); "
                "use a topic with a selector, or one queue per kind of message"
            )
        if prefetch == 0:
            raise InvalidSelectorException(
                "a queue selector needs a prefetch above 0 (basic.get cannot carry one)"
            )
        return selector

    def _drop_temporary(self, queue: str, temporary: bool) -> None:
        if temporary:
            self._connection.topology.delete_queue(queue)

    def _close_consumer(self, consumer: MessageConsumer, session_closing: bool = False) -> None:
        with self._cond:
            if consumer.closed:
                return
            consumer.closed = True
            consumer._listener = None
            healthy = self._error is None and not self._link.error
            if consumer.batcher is not None and healthy:
                self._acks.send_acks(consumer.batcher.take_all())
            current_tag = consumer.current_tag
            self._cond.notify_all()
        if healthy and not session_closing:
            if consumer.prefetch > 0:
                self._link.cancel(current_tag)
            with self._cond:
                leftovers = [d for d in consumer._drain() if not d.settled]
                for delivery in leftovers:
                    self._acks.reject(delivery, requeue=True)
            if consumer.temporary_queue:
                self._connection.topology.delete_queue(consumer.queue)
        with self._cond:
            if consumer in self._consumers:
                self._consumers.remove(consumer)
            if self._dispatcher is not None and not any(c._listener for c in self._consumers):
                self._cond.notify_all()

    # ==========================================================================================
    # Message handles
    # ==========================================================================================
    def _acknowledge_message(self, delivery: Delivery) -> None:
        with self._cond:
            if self._closed:
                raise IllegalStateException("The Session is closed")
            self._raise_if_failed()
            self._acks.acknowledge(delivery)
        self._acks_written()

    def _message_failed(self, delivery: Delivery) -> None:
        with self._cond:
            if not self._closed and self._error is None:
                self._acks.processing_failed(delivery)
