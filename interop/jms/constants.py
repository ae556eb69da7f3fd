"""Acknowledgement modes, delivery modes and the ActiveMQ numbers the client keeps."""

from __future__ import annotations

import enum
from typing import Final

__all__ = [
    "DEFAULT_PRIORITY",
    "DUPS_OK_BATCH_PERCENT",
    "MAX_PREFETCH",
    "OPTIMIZE_ACK_PERCENT",
    "QUEUE_SELECTOR_ARGUMENT",
    "WINDOW_STEP_PERCENT",
    "AckMode",
    "DeliveryMode",
]


class AckMode(enum.IntEnum):
    """JMS session acknowledgement modes, with the JMS / ActiveMQ values."""

    SESSION_TRANSACTED = 0
    AUTO_ACKNOWLEDGE = 1
    CLIENT_ACKNOWLEDGE = 2
    DUPS_OK_ACKNOWLEDGE = 3
    INDIVIDUAL_ACKNOWLEDGE = 4


class DeliveryMode(enum.IntEnum):
    """JMS delivery modes; the values are AMQP's ``delivery_mode`` property."""

    NON_PERSISTENT = 1
    PERSISTENT = 2


DEFAULT_PRIORITY: Final = 4
"""JMS default message priority (0-9)."""

MAX_PREFETCH: Final = 32767
"""Short.MAX_VALUE: ActiveMQ clamps larger prefetch values to this."""

OPTIMIZE_ACK_PERCENT: Final = 65
"""optimizeAcknowledge sends one cumulative ack once 65 % of the prefetch was consumed."""

DUPS_OK_BATCH_PERCENT: Final = 50
"""DUPS_OK on a topic acks in batches of 50 % of the prefetch."""

WINDOW_STEP_PERCENT: Final = 50
"""ActiveMQ's DELIVERED ack (window extension) cadence: 50 % of the prefetch."""

QUEUE_SELECTOR_ARGUMENT: Final = "x-selector"
"""The ``basic.consume`` argument amqpd reads a queue consumer's JMS selector from."""
