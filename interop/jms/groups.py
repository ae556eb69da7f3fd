"""Message groups (ActiveMQ's ``JMSXGroupID`` / ``JMSXGroupSeq``) in the JMS client.

The broker does the assigning: on amqpd (capability ``message_groups``) every JMS queue is
declared with ``x-message-groups: true`` (`QUEUE_ARGUMENT`, amqpd/model/groups.py), so all
messages of a group go to one consumer at a time, in order, whichever process it runs in,
and move to another consumer only when that one goes away; ``JMSXGroupSeq = -1`` closes a
group. This module does the two client-side parts:

- `check_send`: a message with ``JMSXGroupID`` sent to a queue of a broker without message
  groups (RabbitMQ) is refused with a `JMSException` saying that groups need amqpd, rather
  than sent and spread over all consumers;
- `GroupTracker`: per consumer, the groups it has received since it was created (or since
  its connection was replaced); the first message of a group sets the property
  ``JMSXGroupFirstForConsumer`` to True, as ActiveMQ does, and a message with
  ``JMSXGroupSeq = -1`` ends the group there (its next message is a first again).
"""

from __future__ import annotations

from typing import Final, Protocol

from interop.jms.destinations import Destination, Queue
from interop.jms.errors import JMSException
from interop.jms.messages import Message

__all__ = [
    "CAPABILITY",
    "GROUP_ID",
    "OWNER_ARGUMENT",
    "QUEUE_ARGUMENT",
    "GroupTracker",
    "check_send",
]

CAPABILITY: Final = "message_groups"
QUEUE_ARGUMENT: Final = "x-message-groups"
OWNER_ARGUMENT: Final = "x-message-group-owner"
"""basic.consume argument: the JMS consumer behind the AMQP consumer tag. CLIENT and
transacted consumers re-subscribe under new tags as their window grows; the broker keeps the
groups with the owner, not with one tag."""
GROUP_ID: Final = "JMSXGroupID"
GROUP_SEQ: Final = "JMSXGroupSeq"
FIRST_FOR_CONSUMER: Final = "JMSXGroupFirstForConsumer"


class _Capabilities(Protocol):
    def has_capability(self, name: str) -> bool: ...


def check_send(message: Message, destination: Destination, broker: _Capabilities) -> None:
    """Refuse a grouped message to a queue of a broker that cannot keep groups.

    Raises:
        JMSException: ``JMSXGroupID`` is set, the destination is a queue, and the broker
            did not announce the ``message_groups`` capability.
    """
    if message.properties.get(GROUP_ID) is None or not isinstance(destination, Queue):
        return
    if not broker.has_capability(CAPABILITY):
        raise JMSException(
            "message groups (JMSXGroupID) need amqpd: this broker does not assign a group "
            "to one consumer (RabbitMQ has no message groups), so the group's messages "
            "would be spread over every consumer of the queue"
        )


class GroupTracker:
    """The groups one consumer has received (see the module comment)."""

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: set[object] = set()

    def mark(self, message: Message) -> None:
        """Flag ``message`` with ``JMSXGroupFirstForConsumer`` if it opens a group here."""
        group = message.properties.get(GROUP_ID)
        if group is None:
            return
        if group not in self._seen:
            self._seen.add(group)
            message.properties[FIRST_FOR_CONSUMER] = True
        if message.properties.get(GROUP_SEQ) == -1:
            self._seen.discard(group)

    def reset(self) -> None:
        """The connection was replaced: the broker assigns the groups afresh."""
        self._seen.clear()
