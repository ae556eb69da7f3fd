"""Counting what the store reads and writes (`StoreIO` in the node statistics), for
Prometheus' ``rabbitmq_io_*`` and ``rabbitmq_msg_store_*`` families: the group committer's
store and the queues' body reader are wrapped, so neither the store nor the committer
changes. One update per transaction or per page of bodies, timed with the monotonic clock.
"""

from __future__ import annotations

import time

from amqpd.model.statistics import StoreIO
from persistence.backend import BodyReaderPort, StoreBackend
from persistence.records import Batch, OpKind

_HEADER: int = 5  # INSERT_MESSAGE row: (vhost, queue, seq, exchange, routing_key, header, body …)
_BODY: int = 6


def _size(value: object) -> int:
    return len(value) if isinstance(value, bytes | bytearray | memoryview) else 0


class CountingStore:
    """A store whose ``apply`` (one transaction) is counted; everything else is the store's."""

    def __init__(self, store: StoreBackend, io: StoreIO) -> None:
        self._store = store
        self._io = io

    async def apply(self, batch: Batch, *, inline: bool = False) -> None:
        """Write ``batch`` through the store and count it once it committed."""
        started = time.perf_counter()
        await self._store.apply(batch, inline=inline)
        io = self._io
        io.sync_seconds += time.perf_counter() - started
        io.write_ops += 1
        io.sync_ops += 1
        for kind, rows in batch.ops:
            if kind is OpKind.INSERT_MESSAGE:
                io.messages_written += len(rows)
                io.write_bytes += sum(_size(row[_HEADER]) + _size(row[_BODY]) for row in rows)


class CountingBodyReader:
    """The queues' body reader, counting each page read back."""

    def __init__(self, reader: BodyReaderPort, io: StoreIO) -> None:
        self._reader = reader
        self._io = io

    def read_bodies(
        self, queue: tuple[str, str], after_seq: int, limit: int
    ) -> list[tuple[int, bytes]]:
        """``(seq, body)`` pairs from the store (see `BodyReaderPort`)."""
        started = time.perf_counter()
        bodies = self._reader.read_bodies(queue, after_seq, limit)
        io = self._io
        io.read_seconds += time.perf_counter() - started
        io.read_ops += 1
        io.messages_read += len(bodies)
        io.read_bytes += sum(len(body) for _seq, body in bodies)
        return bodies

    def read_messages(
        self, queue: tuple[str, str], after_seq: int, limit: int
    ) -> list[tuple[int, str, str, bytes, bytes]]:
        """Whole messages of a delayed exchange's store queue (see `BodyReaderPort`),
        counted as a page read like the queues' bodies."""
        started = time.perf_counter()
        messages = self._reader.read_messages(queue, after_seq, limit)
        io = self._io
        io.read_seconds += time.perf_counter() - started
        io.read_ops += 1
        io.messages_read += len(messages)
        io.read_bytes += sum(len(body) for *_rest, body in messages)
        return messages

    def close(self) -> None:
        """Close the underlying reader."""
        self._reader.close()
