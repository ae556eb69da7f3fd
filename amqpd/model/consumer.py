"""A basic.consume subscription: one consumer of one queue, owned by a `ConsumerSink`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from amqpd.model.ports import ConsumerSink
    from amqpd.model.queue import Queue


class Consumer:
    """A basic.consume subscription. ``channel`` decides its credit and takes its
    deliveries; ``unacked`` counts its deliveries awaiting an ack (per-consumer prefetch)."""

    __slots__ = (
        "arguments",
        "channel",
        "exclusive",
        "no_ack",
        "prefetch",
        "priority",
        "queue",
        "tag",
        "tag_raw",
        "unacked",
    )

    def __init__(
        self,
        channel: ConsumerSink,
        tag: str,
        tag_raw: bytes,
        queue: Queue,
        no_ack: bool,
        exclusive: bool,
        prefetch: int,
        arguments: dict[str, Any],
    ) -> None:
        self.channel = channel
        self.tag = tag
        self.tag_raw = tag_raw
        self.queue = queue
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.prefetch = prefetch
        self.arguments = arguments
        self.unacked = 0
        priority = arguments.get("x-priority", 0)
        self.priority = priority if isinstance(priority, int) else 0  # x-priority argument
