"""The ready list of a priority queue (``x-max-priority``): higher priority first, FIFO
within a priority. It offers the deque operations `Queue` uses, so the queue code is the same
for both kinds; a queue without ``x-max-priority`` keeps a plain deque (no cost)."""

from __future__ import annotations

from bisect import insort
from collections import deque
from collections.abc import Iterable, Iterator

from amqpd.model.message import QueueEntry


class PriorityReady:
    """Buckets of entries per priority 0..max_priority."""

    __slots__ = ("_buckets", "_len", "max_priority")

    def __init__(self, max_priority: int) -> None:
        self.max_priority = max_priority
        self._buckets: list[deque[QueueEntry]] = [deque() for _ in range(max_priority + 1)]
        self._len = 0

    def _bucket(self, entry: QueueEntry) -> deque[QueueEntry]:
        priority = entry.message.priority or 0
        return self._buckets[min(priority, self.max_priority)]

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __iter__(self) -> Iterator[QueueEntry]:
        for bucket in reversed(self._buckets):
            yield from bucket

    def __getitem__(self, index: int) -> QueueEntry:
        if index != 0:
            raise IndexError("only the head of a priority queue can be indexed")
        for bucket in reversed(self._buckets):
            if bucket:
                return bucket[0]
        raise IndexError("empty queue")

    def append(self, entry: QueueEntry) -> None:
        """Add at the tail of its priority."""
        self._bucket(entry).append(entry)
        self._len += 1

    def popleft(self) -> QueueEntry:
        """Remove the next entry to deliver."""
        for bucket in reversed(self._buckets):
            if bucket:
                self._len -= 1
                return bucket.popleft()
        raise IndexError("pop from an empty queue")

    def restore(self, entries: Iterable[QueueEntry]) -> None:
        """Put requeued entries back at their original places (by seq) in their priority."""
        for entry in entries:
            bucket = self._bucket(entry)
            if not bucket or entry.seq < bucket[0].seq:
                bucket.appendleft(entry)
            else:
                items = list(bucket)
                insort(items, entry, key=_by_seq)
                bucket.clear()
                bucket.extend(items)
            self._len += 1

    def clear(self) -> None:
        """Remove everything."""
        for bucket in self._buckets:
            bucket.clear()
        self._len = 0


def _by_seq(entry: QueueEntry) -> int:
    return entry.seq
