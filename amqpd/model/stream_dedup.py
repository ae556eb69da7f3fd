"""A deduplicating stream's window rebuilt from the tail of its log at recovery.

Theory of operation. A stream declared with ``x-message-deduplication: true`` uses the
classic queues' window (model/dedup.py): ``admit`` is asked before each append, and each
accepted id is journaled in the store's storage batch. But a stream's appends are fsynced
*before* that batch commits (the group committer syncs dirty streams first), so after a
kill -9 between the two, the log holds messages whose ids the stored window lacks; their
publishers got no confirm and republish them, and they would be appended twice. Hence at
recovery the window is also fed with the ids of the last ``window`` messages of the log
(those not already in it go in as the newest; nothing is journaled: they are in the log,
and the next recovery reads them from there again). The stored window still matters for
ids whose messages retention has removed since. Messages without an id are skipped.
"""

from __future__ import annotations

from amqpd.model.message import Message
from amqpd.model.stream import StreamQueue
from amqpd.wire.codec import peek_header

__all__ = ["rebuild_stream_window"]


def rebuild_stream_window(queue: StreamQueue) -> int:
    """Put the ids of the messages at the end of ``queue``'s log into its window.

    Returns:
        How many ids were added (0 for a stream that does not deduplicate).
    """
    dedup = queue.dedup
    if dedup is None:
        return 0
    stream_log = queue.log
    end = stream_log.next_offset
    reader = stream_log.reader(max(stream_log.first_offset, end - dedup.settings.window))
    before = len(dedup)
    while reader.offset < end:
        entries = reader.next_chunk()
        if not entries:
            break
        for entry in entries:
            peek = peek_header(entry.header)
            message = Message(
                "",
                "",
                entry.exchange_raw,
                entry.routing_key_raw,
                entry.header,
                None,
                True,
                headers_raw=peek.headers_raw,
            )
            dedup.admit(message, None)  # not journaled: the log keeps it
    return len(dedup) - before
