"""Putting one routed message into its queues: all of them, or none when one refuses it.

Shared by a publish routed on this worker (engine/content.py `route_and_enqueue`) and a
publish another worker routed and forwarded here (amqpd/model/forwarded.py), so both obey
the same rules: x-overflow=reject-publish refuses before anything is enqueued (a nack is then
truthful: the message is in no queue), reject-publish-dlx also dead-letters it from the
refusing queue, a duplicate under x-message-deduplication is skipped (still confirmed), and
a queue whose consumers fall far behind is reported for flow control.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from amqpd.model.message import Message
from amqpd.model.queue import Queue
from amqpd.model.stream import StreamQueue

if TYPE_CHECKING:
    from amqpd.model.ports import JournalPort

# Flow control (RabbitMQ's credit flow, simplified): a publisher feeding a queue whose
# consumers are this far behind, while they are still making progress (settled something in
# the last FLOW_ACTIVE seconds), is not read from for a moment, so the consumers' acks get
# served and end-to-end throughput goes up instead of the backlog. A stuck consumer does not
# slow publishers down.
FLOW_BACKLOG = 2000


def enqueue_routed(
    message: Message,
    queues: list[Queue],
    expiration_ms: int | None,
    promised: bool,
    flow_queues: set[Queue],
) -> bool:
    """Enqueue ``message`` into every one of ``queues``; False (and in none of them) when
    one refuses it. A queue whose backlog passes FLOW_BACKLOG goes into ``flow_queues``."""
    for queue in queues:
        if queue.rejects_overflow and queue.would_overflow(message):
            if queue.settings.overflow == "reject-publish-dlx" and queue.dead_letter:
                queue.dead_letter(queue, message, "maxlen")
            return False
    for queue in queues:
        if queue.dedup is not None and not queue.dedup.admit(message, queue.journal):
            continue  # a duplicate (x-message-deduplication): acked, not enqueued
        queue.enqueue(message, expiration_ms, promised)
        if len(queue.ready) > FLOW_BACKLOG and queue.consumers_active():
            flow_queues.add(queue)
    return True


def storage_batch(journal: JournalPort | None, message: Message, queues: list[Queue]) -> int | None:
    """The storage batch a confirm waits for: the one holding a persistent message routed
    to a durable queue, or any message appended to a stream (ARCHITECTURE principle 4);
    None if final at enqueue."""
    if journal is None:
        return None
    persistent = message.persistent
    for queue in queues:  # a stream's appends are always durable (model/stream.py)
        if queue.journal is not None and (persistent or type(queue) is StreamQueue):
            return journal.open_batch_id
    return None
