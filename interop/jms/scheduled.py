"""ActiveMQ's scheduled delivery (``AMQ_SCHEDULED_DELAY``) on an x-delayed-message exchange.

A message sent with the property ``AMQ_SCHEDULED_DELAY`` (milliseconds, as ActiveMQ's
``ScheduledMessage.AMQ_SCHEDULED_DELAY``) is published with that delay in the ``x-delay``
header to a delayed exchange instead of its destination's exchange, and reaches its
destination when the delay ends:

- a queue ``q``: exchange ``jms.delayed.queues`` (``x-delayed-type`` direct), to which ``q``
  is bound with the key ``q``;
- a topic: exchange ``jms.delayed.topics`` (``x-delayed-type`` fanout), bound to the topic
  exchange, which then routes the message on its topic name as any other.

The broker holds the message (amqpd: stored before the send's confirm, fired after a restart
too). A delay of 0 or less, or none, sends at once. Repeated deliveries are refused with a
`MessageFormatException`: ``AMQ_SCHEDULED_REPEAT`` above 0 and ``AMQ_SCHEDULED_CRON`` (a
broker would have to re-send the message itself; an x-delayed-message exchange delivers a
message once). ``AMQ_SCHEDULED_PERIOD`` without a repeat changes nothing, as in ActiveMQ.

Only amqpd announces delayed messages (server capability ``delayed_messages``); on another
broker (RabbitMQ) a scheduled send raises `JMSException` before anything is sent: declaring
an x-delayed-message exchange on RabbitMQ without the rabbitmq_delayed_message_exchange
plugin closes the whole connection (503 COMMAND_INVALID "unknown exchange type").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from interop.jms.errors import JMSException, MessageFormatException

__all__ = [
    "AMQ_SCHEDULED_CRON",
    "AMQ_SCHEDULED_DELAY",
    "AMQ_SCHEDULED_PERIOD",
    "AMQ_SCHEDULED_REPEAT",
    "CAPABILITY",
    "QUEUES_EXCHANGE",
    "TOPICS_EXCHANGE",
    "scheduled_delay",
]

AMQ_SCHEDULED_DELAY: Final = "AMQ_SCHEDULED_DELAY"
AMQ_SCHEDULED_PERIOD: Final = "AMQ_SCHEDULED_PERIOD"
AMQ_SCHEDULED_REPEAT: Final = "AMQ_SCHEDULED_REPEAT"
AMQ_SCHEDULED_CRON: Final = "AMQ_SCHEDULED_CRON"
CAPABILITY: Final = "delayed_messages"
QUEUES_EXCHANGE: Final = "jms.delayed.queues"
TOPICS_EXCHANGE: Final = "jms.delayed.topics"
DELAY_HEADER: Final = "x-delay"


def _long(name: str, value: Any) -> int:
    """A long property as ActiveMQ's getLongProperty reads it (an integer or its text)."""
    if isinstance(value, bool):
        raise MessageFormatException(f"property {name!r} must be a long, not a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, str | bytes):
        try:
            return int(value)
        except ValueError:
            pass
    raise MessageFormatException(f"property {name!r} must be a long, not {value!r}")


def scheduled_delay(properties: Mapping[str, Any], has_capability: bool) -> int | None:
    """The delay (ms) a message's properties ask for, or None to send it at once.

    Raises:
        MessageFormatException: a repeated schedule (REPEAT > 0, CRON) or a value that is
            not a long.
        JMSException: a delay on a broker without delayed messages.
    """
    if properties.get(AMQ_SCHEDULED_CRON) is not None:
        raise MessageFormatException(
            "AMQ_SCHEDULED_CRON is not supported: the broker delivers a scheduled message "
            "once (use AMQ_SCHEDULED_DELAY, and send again from the consumer to repeat)"
        )
    repeat = properties.get(AMQ_SCHEDULED_REPEAT)
    if repeat is not None and _long(AMQ_SCHEDULED_REPEAT, repeat) > 0:
        raise MessageFormatException(
            "AMQ_SCHEDULED_REPEAT is not supported: the broker delivers a scheduled message "
            "once (use AMQ_SCHEDULED_DELAY, and send again from the consumer to repeat)"
        )
    value = properties.get(AMQ_SCHEDULED_DELAY)
    if value is None:
        return None
    delay = _long(AMQ_SCHEDULED_DELAY, value)
    if delay <= 0:
        return None
    if not has_capability:
        raise JMSException(
            "AMQ_SCHEDULED_DELAY needs a broker with delayed messages (amqpd announces "
            f"'{CAPABILITY}'); this broker does not, and declaring an x-delayed-message "
            "exchange on RabbitMQ without the rabbitmq_delayed_message_exchange plugin "
            "would close the connection"
        )
    return delay
