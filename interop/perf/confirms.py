"""Publisher-side bookkeeping of confirms: which sequence numbers are still unconfirmed.

Messages are published in batches that share one timestamp, so the tracker keeps one
record per batch, not per message. A confirm (ack or nack, single or multiple) settles a
range of sequence numbers and yields (publish timestamp, count) pairs for the latency
histogram. Single confirms above the lowest unconfirmed number are remembered so that a
later ``multiple`` confirm does not count them twice.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass(slots=True)
class _Batch:
    first: int
    last: int
    stamp: int


@dataclass(slots=True)
class ConfirmTracker:
    """Unconfirmed sequence numbers of one confirm-mode channel, by batch."""

    _batches: deque[_Batch] = field(default_factory=deque)
    _singles: set[int] = field(default_factory=set)  # settled above the lowest unsettled
    published: int = 0
    settled: int = 0

    @property
    def outstanding(self) -> int:
        """Messages published and not yet confirmed."""
        return self.published - self.settled

    def publish(self, count: int, stamp: int) -> None:
        """Record ``count`` messages published now (sequence numbers continue from 1)."""
        if count <= 0:
            return
        first = self.published + 1
        self.published += count
        self._batches.append(_Batch(first, self.published, stamp))

    def confirm(self, tag: int, multiple: bool) -> list[tuple[int, int]]:
        """Settle ``tag`` (and, if ``multiple``, everything below it).

        Returns:
            (publish stamp, number of messages) for each group newly settled.
        """
        out: list[tuple[int, int]] = []
        batches = self._batches
        if multiple:
            while batches and batches[0].first <= tag:
                batch = batches[0]
                upto = min(batch.last, tag)
                count = upto - batch.first + 1
                if self._singles:
                    done = [n for n in self._singles if batch.first <= n <= upto]
                    count -= len(done)
                    self._singles.difference_update(done)
                if count:
                    out.append((batch.stamp, count))
                    self.settled += count
                if upto == batch.last:
                    batches.popleft()
                else:
                    batch.first = upto + 1
            return out
        for batch in batches:
            if batch.first <= tag <= batch.last:
                break
        else:
            return out  # unknown or already settled
        if tag in self._singles:
            return out
        out.append((batch.stamp, 1))
        self.settled += 1
        self._singles.add(tag)
        self._advance()
        return out

    def _advance(self) -> None:
        """Drop settled numbers from the front of the first batch."""
        batches = self._batches
        while batches and batches[0].first in self._singles:
            batch = batches[0]
            self._singles.discard(batch.first)
            if batch.first == batch.last:
                batches.popleft()
            else:
                batch.first += 1
