"""``OutgoingMessage``: one row, mapped, ready for ``basic_publish`` (pure, no pika calls)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["OutgoingMessage"]


@dataclass(slots=True)
class OutgoingMessage:
    """One message ready for ``basic_publish``.

    Attributes:
        exchange: Target exchange (``""`` is the default exchange).
        routing_key: Routing key.
        body: Message body.
        properties: A ``pika.BasicProperties``.
        message_id: The ``message_id`` property, kept for reports and error texts.
    """

    exchange: str
    routing_key: str
    body: bytes
    properties: Any  # pika.BasicProperties
    message_id: str | None
