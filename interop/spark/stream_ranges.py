"""Offset arithmetic of the ``amqp-stream`` source (pure: no sockets, no session).

A source offset, as Spark stores it in the query's checkpoint, is a dict stream → the next
offset to read. A micro-batch reads ``[start, end)`` of each stream. Offsets need not be
contiguous (RabbitMQ skips one at each new segment), so ``end - start`` is an upper bound on
the messages a range holds, and a range's reader stops at the first offset ``>= end - 1``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

__all__ = ["OffsetRange", "cap_ends", "split_ranges"]


@dataclass(frozen=True, slots=True)
class OffsetRange(InputPartition):
    """One partition: offsets ``[start, end)`` of ``stream``.

    Attributes:
        stream: Stream name.
        start: First offset to return.
        end: One past the last offset to return.
    """

    stream: str
    start: int
    end: int

    def __repr__(self) -> str:
        return f"OffsetRange({self.stream!r}, {self.start}, {self.end})"


def cap_ends(
    start: Mapping[str, int], ends: Mapping[str, int], max_rows: int | None
) -> dict[str, int]:
    """Limit the ends so that the batch covers at most ``max_rows`` offsets in all.

    Like Kafka's ``maxOffsetsPerTrigger``: each stream gets a share proportional to its
    backlog (rounded down, the remainder to the largest backlogs); every stream with a
    backlog gets at least one offset while the limit allows.

    Args:
        start: Next offset per stream.
        ends: Available end per stream (``>= start``).
        max_rows: The limit, or None for no limit.

    Returns:
        The capped end per stream.
    """
    result = {stream: max(ends[stream], start[stream]) for stream in ends}
    if max_rows is None:
        return result
    backlog = {stream: result[stream] - start[stream] for stream in result}
    total = sum(backlog.values())
    if total <= max_rows:
        return result
    share = dict.fromkeys(backlog, 0)
    active = [stream for stream, size in backlog.items() if size > 0]
    budget = max_rows
    if budget >= len(active):
        for stream in active:
            share[stream] = 1
        budget -= len(active)
    rest = {stream: backlog[stream] - share[stream] for stream in backlog}
    total = sum(rest.values())
    for stream, size in rest.items():
        share[stream] += budget * size // total if total else 0
    left = max_rows - sum(share.values())
    for stream in sorted(backlog, key=lambda name: (-backlog[name], name)):
        if left <= 0:
            break
        if share[stream] < backlog[stream]:
            share[stream] += 1
            left -= 1
    return {stream: start[stream] + share[stream] for stream in result}


def split_ranges(
    start: Mapping[str, int], end: Mapping[str, int], min_partitions: int | None
) -> list[OffsetRange]:
    """The partitions of a batch: one per stream with new offsets, split further (in equal
    offset ranges, in proportion to the backlogs) until there are at least
    ``min_partitions``."""
    ranges = [
        OffsetRange(stream, start.get(stream, stop), stop)
        for stream, stop in end.items()
        if stop > start.get(stream, stop)
    ]
    if min_partitions is None or len(ranges) >= min_partitions or not ranges:
        return ranges
    total = sum(r.end - r.start for r in ranges)
    result: list[OffsetRange] = []
    for whole in ranges:
        size = whole.end - whole.start
        pieces = max(1, min(size, round(min_partitions * size / total)))
        for index in range(pieces):
            low = whole.start + size * index // pieces
            high = whole.start + size * (index + 1) // pieces
            result.append(OffsetRange(whole.stream, low, high))
    return result
