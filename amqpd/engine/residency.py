"""Where a queue's ready messages are: stored (persistent, in a durable queue) and paged
out (the body in the store only) - RabbitMQ's ``messages_persistent`` and
``messages_paged_out`` (sans-IO). One pass over the queue's ready messages, made only
when a listing or a scrape asks."""

from __future__ import annotations

from dataclasses import dataclass

from amqpd.model.queue import Queue


@dataclass(slots=True)
class Residency:
    """A queue's ready messages by where they are: persistent ones (stored: persistent in
    a durable queue) and those whose body is paged out to the store."""

    persistent: int = 0
    persistent_bytes: int = 0
    paged_out: int = 0
    paged_out_bytes: int = 0


def residency(queue: Queue) -> Residency:
    """Count a queue's ready messages by residency (one pass over them)."""
    counts = Residency()
    for entry in queue.ready:
        message = entry.message
        if entry.stored:
            counts.persistent += 1
            counts.persistent_bytes += message.body_size
        if message.body is None:
            counts.paged_out += 1
            counts.paged_out_bytes += message.body_size
    return counts
