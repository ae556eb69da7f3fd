"""A JMS-style Python client on pika that keeps ActiveMQ's acknowledgement semantics.

Sessions with the five acknowledgement modes, prefetch (with pull at 0), optimized and
batched acknowledgements, client-side redelivery with a dead-letter queue, queues, topics
with wildcards and selectors, durable subscribers, failover, asynchronous sends, queue
browsers (and queue selectors on amqpd). Works against amqpd and RabbitMQ 3.x;
see docs/jms.md for the guide and the differences from ActiveMQ.

Example::

    from interop.jms import AckMode, ConnectionFactory

    factory = ConnectionFactory.from_url(
        "amqp://guest:guest@localhost:5672/%2F?jms.prefetchPolicy.queuePrefetch=10"
    )
    with factory.create_connection() as connection:
        session = connection.create_session(ack_mode=AckMode.CLIENT_ACKNOWLEDGE)
        orders = session.queue("orders")
        session.create_producer(orders).send("hello")
        consumer = session.create_consumer(orders)
        connection.start()
        message = consumer.receive(5)
        message.acknowledge()
"""

from __future__ import annotations

from interop.jms.browser import QueueBrowser
from interop.jms.completion import CompletionListener
from interop.jms.connection import Connection, ConnectionFactory
from interop.jms.constants import AckMode, DeliveryMode
from interop.jms.consumer import MessageConsumer, MessageListener
from interop.jms.destinations import Destination, Queue, TemporaryQueue, Topic
from interop.jms.errors import (
    ConfigurationError,
    IllegalStateException,
    InvalidClientIDException,
    InvalidDestinationException,
    InvalidSelectorException,
    JMSException,
    MessageFormatException,
    TransactionRolledBackException,
)
from interop.jms.messages import BytesMessage, MapMessage, Message, TextMessage
from interop.jms.options import ConnectionOptions
from interop.jms.policies import (
    DeadLetterStrategy,
    IndividualDeadLetterStrategy,
    PrefetchPolicy,
    RedeliveryPolicy,
    SharedDeadLetterStrategy,
)
from interop.jms.producer import MessageProducer
from interop.jms.session import Session

__all__ = [
    "AckMode",
    "BytesMessage",
    "CompletionListener",
    "ConfigurationError",
    "Connection",
    "ConnectionFactory",
    "ConnectionOptions",
    "DeadLetterStrategy",
    "DeliveryMode",
    "Destination",
    "IllegalStateException",
    "IndividualDeadLetterStrategy",
    "InvalidClientIDException",
    "InvalidDestinationException",
    "InvalidSelectorException",
    "JMSException",
    "MapMessage",
    "Message",
    "MessageConsumer",
    "MessageFormatException",
    "MessageListener",
    "MessageProducer",
    "PrefetchPolicy",
    "Queue",
    "QueueBrowser",
    "RedeliveryPolicy",
    "Session",
    "SharedDeadLetterStrategy",
    "TemporaryQueue",
    "TextMessage",
    "Topic",
    "TransactionRolledBackException",
]
