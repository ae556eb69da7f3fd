"""What the management API shows of a stream (amqpd/model/stream.py) beyond a queue's
fields: its log (segments, bytes, first and last offset, the durable end) and each
consumer's offset (the next one it will be sent); and what a queue's length samples
(engine/rates.py, the history behind ``lengths_age``) count as ready."""

from __future__ import annotations

from typing import Any

from amqpd.model.queue import Consumer, Queue
from amqpd.model.stream import StreamQueue


def stream_fields(queue: Queue) -> dict[str, Any]:
    """Extra ``/api/queues`` fields of a stream (empty for other queues)."""
    if not isinstance(queue, StreamQueue):
        return {}
    stream_log = queue.log
    count = queue.message_count  # unacked deliveries are still in the log: not added
    return {
        "messages": count,
        "messages_ready": count,
        "segments": stream_log.segment_count,
        "stream_bytes": stream_log.size_bytes,
        "first_offset": stream_log.first_offset,
        "last_offset": stream_log.next_offset - 1,
        "committed_offset": queue.committed_next - 1,
        "consumer_offsets": {
            consumer.tag: queue.consumer_offset(consumer) for consumer in queue.consumers
        },
    }


def stream_consumer_fields(consumer: Consumer) -> dict[str, Any]:
    """Extra ``/api/consumers`` fields of a stream consumer: its next offset."""
    queue = consumer.queue
    if not isinstance(queue, StreamQueue):
        return {}
    return {"offset": queue.consumer_offset(consumer)}


def sampled_ready(queue: Queue) -> int:
    """The ready count of a queue's length samples: a stream's kept messages (its ready
    deque stays empty; ``messages_ready`` above says the same), else its ready entries."""
    if isinstance(queue, StreamQueue):
        return queue.message_count
    return len(queue.ready)
