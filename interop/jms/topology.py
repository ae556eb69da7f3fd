"""What JMS destinations need on the broker: queues with dead-letter arguments, DLQs,
subscriber queues bound to the topic exchange, durable subscriptions, temporary queues.

All declarations run on one "admin" channel per connection, so a refusal (406
PRECONDITION_FAILED closes the channel) never takes a session down; the admin channel is
reopened on the next call. Declared names are cached per connection.

Queue layout:

- JMS queue ``q``: durable queue ``q`` with ``x-dead-letter-exchange=""`` and
  ``x-dead-letter-routing-key=<DLQ>``; messages are published to the default exchange.
  If ``q`` already exists with other arguments, it is used as it is (passive declare) and
  a warning says that dead-lettering follows the existing arguments.
- Topic subscriber: a server-named exclusive queue bound to the topic exchange with the
  topic pattern (``>`` -> ``#``); deleted when the consumer closes.
- Durable subscriber (client id ``c``, name ``n``): durable queue ``c.n``, consumed with
  ``exclusive=true``; removed by ``unsubscribe``.
- Client id: an exclusive queue ``jms.client-id.<id>`` held by the connection, so a second
  connection with the same id is refused (405 RESOURCE_LOCKED), as ActiveMQ does.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Final

from interop.jms.channel import ChannelLink, open_channel
from interop.jms.destinations import Destination, Queue, TemporaryQueue, Topic, binding_key
from interop.jms.errors import (
    InvalidClientIDException,
    InvalidDestinationException,
    JMSException,
)
from interop.jms.groups import CAPABILITY, QUEUE_ARGUMENT
from interop.jms.policies import DeadLetterStrategy
from interop.jms.scheduled import QUEUES_EXCHANGE, TOPICS_EXCHANGE
from interop.jms.transport import Transport

__all__ = ["Topology"]

log = logging.getLogger(__name__)

PRECONDITION_FAILED: Final = 406
RESOURCE_LOCKED: Final = 405
NOT_FOUND: Final = 404
CLIENT_ID_PREFIX: Final = "jms.client-id."


class Topology:
    """Declarations for one connection (thread-safe; calls block on the admin channel)."""

    def __init__(
        self,
        transport: Transport,
        dead_letter_strategy: DeadLetterStrategy | None,
        topic_exchange: str,
    ) -> None:
        self._transport = transport
        self._strategy = dead_letter_strategy
        self.topic_exchange = topic_exchange
        self._lock = threading.Lock()
        self._link: ChannelLink | None = None
        self._declared: dict[str, dict[str, Any]] = {}
        self._delayed: set[str] = set()  # delayed exchanges and queues bound to them

    def rebind(self, transport: Transport) -> None:
        """Failover: declare on ``transport`` from now on (the cache starts empty, since
        the new broker may have none of the queues)."""
        with self._lock:
            self._transport = transport
            self._link = None
            self._declared.clear()
            self._delayed.clear()

    def _message_groups(self) -> bool:
        """The broker keeps message groups on queues that ask for them (amqpd)."""
        return self._transport.has_capability(CAPABILITY)

    def _admin(self) -> ChannelLink:
        if self._link is None or self._link.error is not None:
            self._link = open_channel(self._transport)
        return self._link

    def close(self) -> None:
        """Close the admin channel."""
        with self._lock:
            if self._link is not None:
                self._link.close()
                self._link = None

    # -- exchanges ------------------------------------------------------------------------------
    def ensure_topic_exchange(self) -> None:
        """Declare the topic exchange unless it is one of the predeclared ``amq.*`` ones."""
        if self.topic_exchange.startswith("amq."):
            return
        with self._lock:
            self._admin().exchange_declare(self.topic_exchange, "topic")

    # -- queues ---------------------------------------------------------------------------------
    def dead_letter_arguments(self, name: str, is_topic: bool, queue: str) -> dict[str, Any]:
        """``x-dead-letter-*`` arguments for a queue holding messages of ``name``."""
        strategy = self._strategy
        if strategy is None or strategy.is_dead_letter_queue(queue):
            return {}
        dlq = strategy.queue_name(name, is_topic)
        self._declare_dlq(dlq)
        return {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}

    def _declare_dlq(self, dlq: str) -> None:
        if dlq in self._declared:
            return
        with self._lock:
            self._declare(dlq, durable=True, arguments={})

    def _declare(self, queue: str, **kwargs: Any) -> Any:
        """Declare under ``self._lock``; on 406 fall back to a passive declare."""
        arguments = kwargs.get("arguments") or {}
        try:
            ok = self._admin().queue_declare(queue, **kwargs)
        except JMSException as exc:
            if exc.reply_code != PRECONDITION_FAILED:
                raise
            log.warning(
                "queue %r exists with other arguments (%s); using it as it is, so its "
                "dead-lettering and options follow the existing arguments, not %s",
                queue,
                exc.reply_text,
                arguments,
            )
            ok = self._admin().queue_declare(queue, passive=True)
        self._declared[ok.queue] = arguments
        return ok

    def ensure_queue(
        self, name: str, *, single_active_consumer: bool = False, consumer: bool = True
    ) -> str:
        """Declare JMS queue ``name`` with its dead-letter arguments.

        A producer (``consumer=False``) declares a queue once per connection; a consumer
        declares it again when it asks for other arguments (``x-single-active-consumer``).
        Server-named queues (``amq.*``, e.g. another client's reply queue) are not declared:
        the name is reserved, and such a queue is exclusive to its owner anyway.

        Raises:
            JMSException: the broker refused the declaration (other than 406).
        """
        if name.startswith("amq.") or (not consumer and name in self._declared):
            return name
        arguments = self.dead_letter_arguments(name, False, name)
        if single_active_consumer:
            arguments["x-single-active-consumer"] = True
        if self._message_groups():  # amqpd: JMSXGroupID works on every queue (groups.py)
            arguments[QUEUE_ARGUMENT] = True
        if self._declared.get(name) == arguments:
            return name
        with self._lock:
            self._declare(name, durable=True, arguments=arguments)
        return name

    def route(self, destination: Destination) -> tuple[str, str]:
        """``(exchange, routing_key)`` to publish to ``destination`` (a JMS queue is
        declared, with its dead-letter arguments, the first time).

        Raises:
            InvalidDestinationException: not a queue, temporary queue or topic.
        """
        if isinstance(destination, Topic):
            return self.topic_exchange, destination.name
        if isinstance(destination, TemporaryQueue):
            return "", destination.name
        if isinstance(destination, Queue):
            return "", self.ensure_queue(destination.name, consumer=False)
        raise InvalidDestinationException(f"cannot send to {destination!r}")

    def delayed_route(self, destination: Destination) -> tuple[str, str]:
        """``(exchange, routing_key)`` to publish a scheduled message (AMQ_SCHEDULED_DELAY)
        to ``destination`` through the delayed exchanges (interop/jms/scheduled.py),
        declared and bound the first time."""
        if isinstance(destination, Topic):
            if TOPICS_EXCHANGE not in self._delayed:
                self.ensure_topic_exchange()
                with self._lock:
                    link = self._admin()
                    link.exchange_declare(
                        TOPICS_EXCHANGE, "x-delayed-message", {"x-delayed-type": "fanout"}
                    )
                    link.exchange_bind(self.topic_exchange, TOPICS_EXCHANGE, "")
                    self._delayed.add(TOPICS_EXCHANGE)
            return TOPICS_EXCHANGE, destination.name
        _exchange, queue = self.route(destination)
        if queue not in self._delayed:
            with self._lock:
                link = self._admin()
                if QUEUES_EXCHANGE not in self._delayed:
                    link.exchange_declare(
                        QUEUES_EXCHANGE, "x-delayed-message", {"x-delayed-type": "direct"}
                    )
                    self._delayed.add(QUEUES_EXCHANGE)
                link.queue_bind(queue, QUEUES_EXCHANGE, queue)
                self._delayed.add(queue)
        return QUEUES_EXCHANGE, queue

    def subscriber_queue(self, topic: Topic) -> str:
        """A new exclusive queue bound to ``topic`` (non-durable subscriber)."""
        key = binding_key(topic.name)
        arguments = self.dead_letter_arguments(topic.name, True, "")
        with self._lock:
            link = self._admin()
            queue = str(link.queue_declare("", exclusive=True, arguments=arguments).queue)
            link.queue_bind(queue, self.topic_exchange, key)
        return queue

    def durable_subscription(self, client_id: str, name: str, topic: Topic) -> str:
        """Declare and bind the queue of durable subscription (client_id, name).

        Raises:
            JMSException: "Durable consumer is in use" when it has an active consumer.
        """
        key = binding_key(topic.name)
        queue = f"{client_id}.{name}"
        arguments = self.dead_letter_arguments(topic.name, True, queue)
        with self._lock:
            ok = self._declare(queue, durable=True, arguments=arguments)
            if ok.consumer_count:
                raise JMSException(
                    f"Durable consumer is in use for client: {client_id} and "
                    f"subscriptionName: {name}"
                )
            self._admin().queue_bind(queue, self.topic_exchange, key)
        return queue

    def unsubscribe(self, client_id: str, name: str) -> None:
        """Delete durable subscription (client_id, name).

        Raises:
            InvalidDestinationException: there is no such subscription.
            JMSException: it has an active consumer.
        """
        queue = f"{client_id}.{name}"
        with self._lock:
            try:
                ok = self._admin().queue_declare(queue, passive=True)
            except JMSException as exc:
                if exc.reply_code == NOT_FOUND:
                    raise InvalidDestinationException(
                        f"No durable subscription exists for clientID: {client_id} and "
                        f"subscriptionName: {name}"
                    ) from None
                raise
            if ok.consumer_count:
                raise JMSException(f"Durable consumer is in use: {client_id}.{name}")
            try:
                self._admin().queue_delete(queue, if_unused=True)
            except JMSException as exc:
                if exc.reply_code == PRECONDITION_FAILED:
                    raise JMSException(f"Durable consumer is in use: {client_id}.{name}") from None
                raise
            self._declared.pop(queue, None)

    def temporary_queue(self) -> str:
        """A server-named queue exclusive to this connection."""
        with self._lock:
            return str(self._admin().queue_declare("", exclusive=True).queue)

    def delete_queue(self, queue: str) -> None:
        """Delete a queue this connection created (best effort)."""
        with self._lock:
            try:
                self._admin().queue_delete(queue)
            except JMSException as exc:
                log.debug("could not delete queue %r: %s", queue, exc)
            self._declared.pop(queue, None)

    def lock_client_id(self, client_id: str) -> None:
        """Hold the client id for this connection.

        Raises:
            InvalidClientIDException: another connection holds it.
        """
        with self._lock:
            try:
                self._admin().queue_declare(CLIENT_ID_PREFIX + client_id, exclusive=True)
            except JMSException as exc:
                if exc.reply_code == RESOURCE_LOCKED:
                    raise InvalidClientIDException(
                        f"Broker: client id {client_id!r} is already connected",
                        reply_code=exc.reply_code,
                        reply_text=exc.reply_text,
                    ) from None
                raise
