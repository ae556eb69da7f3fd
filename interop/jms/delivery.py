"""A delivery as the session tracks it: AMQP delivery tag, redelivery counter, message."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from interop.jms.acks import WindowTracker
from interop.jms.messages import Message

__all__ = ["Delivery", "DeliveryOwner"]


class DeliveryOwner(Protocol):
    """What the session's acknowledgement state needs of the consumer a delivery belongs to
    (`interop.jms.consumer.MessageConsumer`)."""

    @property
    def closed(self) -> bool:
        """The consumer is closed: a local redelivery goes back to the queue instead."""
        ...

    @property
    def window(self) -> WindowTracker | None:
        """Its window tracker (CLIENT, INDIVIDUAL, transacted), told of every settlement."""
        ...

    def _push_redelivery(self, delivery: Delivery) -> None:
        """Queue a local redelivery (ready at ``delivery.ready_at``)."""
        ...


@dataclass(slots=True, eq=False)
class Delivery:
    """One unacked AMQP delivery on a session's channel.

    Attributes:
        tag: AMQP delivery tag (channel-wide, increasing).
        consumer_tag: The AMQP consumer tag it arrived under ("" for basic.get).
        owner: The JMS consumer it belongs to.
        message: The decoded message (its delivery count is kept in step with ``counter``).
        counter: Earlier deliveries: the broker's ``x-delivery-count`` (or 1 for a bare
            ``redelivered`` flag) plus local redeliveries; JMSXDeliveryCount = counter + 1.
        broker_redelivered: The AMQP ``redelivered`` flag.
        persistent: delivery_mode 2.
        publisher: Connection id stamped by the publishing JMS connection (noLocal).
        ready_at: Monotonic time before which a local redelivery must not be dispatched.
        settled: An ack or reject was sent for it.
    """

    tag: int
    consumer_tag: str
    owner: DeliveryOwner
    message: Message
    counter: int
    broker_redelivered: bool
    persistent: bool
    publisher: str | None = None
    ready_at: float = 0.0
    settled: bool = False

    @property
    def redelivered(self) -> bool:
        """JMSRedelivered."""
        return self.broker_redelivered or self.counter > 0
