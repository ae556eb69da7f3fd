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

A failed chunk write (disk full) cuts the chunk off the log again and gives its offsets to
the next appends; its publishers are nacked and may retry, so the ids of the cut messages
must leave the window (a classic queue forgets the ids of a failed batch's entries, see
model/held.py). `StreamDeduplicator` therefore remembers, for each id accepted, the offset
its append takes, until the log has written that offset; when it finds the log's end
below a remembered offset (checked before each admit, so before a retry is judged), that
message was cut and its id is forgotten.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol, cast

from amqpd.model.dedup import Deduplicator
from amqpd.model.message import Message
from amqpd.model.ports import JournalPort
from amqpd.model.stream import StreamLogPort, StreamQueue
from amqpd.wire.content_header import peek_header
from persistence.stream.format import StoredEntry

__all__ = ["StreamDeduplicator", "rebuild_stream_window", "with_stream_dedup"]


class _DecodingReader(Protocol):
    """The log reader's decoding read (persistence.stream.log.LogReader.next_chunk): the
    delivery path reads chunks undecoded; recovery wants the entries."""

    offset: int

    def next_chunk(self) -> list[StoredEntry]: ...


class StreamDeduplicator(Deduplicator):
    """A stream's window, which forgets the ids of appends a failed write cut off."""

    __slots__ = ("_log", "_unwritten")

    def __init__(self, plain: Deduplicator, stream_log: StreamLogPort) -> None:
        super().__init__(plain.settings, plain.store_key)
        self._log = stream_log
        self._unwritten: deque[tuple[int, bytes]] = deque()  # (offset, id), ascending

    def admit(self, message: Message, journal: JournalPort | None) -> bool:
        """As `Deduplicator.admit`, after forgetting the ids of cut appends; the message
        is appended at the log's end right after (content.route_and_enqueue)."""
        stream_log = self._log
        unwritten = self._unwritten
        if unwritten:
            end = stream_log.next_offset
            while unwritten and unwritten[-1][0] >= end:  # cut off by a failed write
                self._ids.pop(unwritten.pop()[1], None)
            written = stream_log.written_next
            while unwritten and unwritten[0][0] < written:
                unwritten.popleft()
        before = self.next_pos
        accepted = super().admit(message, journal)
        if self.next_pos != before:  # an id went in: it is the newest
            unwritten.append((stream_log.next_offset, next(reversed(self._ids))))
        return accepted


def with_stream_dedup(queue: StreamQueue) -> StreamQueue:
    """``queue`` with a `StreamDeduplicator` in place of its plain window, if it has one."""
    if queue.dedup is not None:
        queue.dedup = StreamDeduplicator(queue.dedup, queue.log)
    return queue


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
    start = max(stream_log.first_offset, end - dedup.settings.window)
    reader = cast(_DecodingReader, stream_log.reader(start))
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
            Deduplicator.admit(dedup, message, None)  # no append follows; not journaled
    return len(dedup) - before
