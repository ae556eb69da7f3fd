"""Which storage batch each publisher confirm and tx.commit-ok waits for.

Theory of operation
-------------------
With a store, a confirm for a persistent message routed to a durable queue, and the
tx.commit-ok of a transaction that journaled something, may only be sent once the journal
batch holding the change is durable. The waiter (a channel) records that here with
`BatchWaits.confirm` / `BatchWaits.commit_ok`; this is the only record of it. The group
committer reports batches in order, each once; the broker passes the report to `committed`
or `failed`, which hands every waiter of that batch what it waited for and forgets the batch.
"""

from __future__ import annotations

from typing import Protocol


class BatchWaiter(Protocol):
    """What waits for storage batches (a channel)."""

    def batch_committed(self, batch: int, confirms: list[int], commit_oks: int) -> None:
        """``batch`` is durable: ack ``confirms`` (publish sequence numbers) and send
        ``commit_oks`` tx.commit-oks."""

    def batch_failed(
        self, batch: int, confirms: list[int], commit_oks: int, error: Exception
    ) -> None:
        """``batch`` could not be written: nack ``confirms`` and fail ``commit_oks`` commits."""


class _Waiting:
    __slots__ = ("commit_oks", "confirms")

    def __init__(self) -> None:
        self.confirms: list[int] = []
        self.commit_oks = 0


class BatchWaits:
    """Storage batch -> waiter -> the confirms and commit-oks waiting for it."""

    __slots__ = ("_batches",)

    def __init__(self) -> None:
        self._batches: dict[int, dict[BatchWaiter, _Waiting]] = {}

    def _waiting(self, batch: int, waiter: BatchWaiter) -> _Waiting:
        waiters = self._batches.get(batch)
        if waiters is None:
            self._batches[batch] = waiters = {}
        waiting = waiters.get(waiter)
        if waiting is None:
            waiters[waiter] = waiting = _Waiting()
        return waiting

    def confirm(self, batch: int, waiter: BatchWaiter, seq: int) -> None:
        """The confirm of publish ``seq`` waits for ``batch``."""
        self._waiting(batch, waiter).confirms.append(seq)

    def commit_ok(self, batch: int, waiter: BatchWaiter) -> None:
        """A tx.commit-ok waits for ``batch``."""
        self._waiting(batch, waiter).commit_oks += 1

    def has_commit_oks(self, waiter: BatchWaiter) -> bool:
        """Whether ``waiter`` still has a tx.commit-ok waiting (few batches are ever open)."""
        return any(
            waiting.commit_oks
            for waiters in self._batches.values()
            if (waiting := waiters.get(waiter)) is not None
        )

    def lone_waiter(self, batch: int) -> BatchWaiter | None:
        """The waiter of ``batch`` when it is the only one and waits for one thing only (a
        confirm or a tx.commit-ok): a client in a round trip, sending nothing until it
        has its answer (persistence/store.py writes such a batch without a thread hop)."""
        waiters = self._batches.get(batch)
        if waiters is None or len(waiters) != 1:
            return None
        for waiter, waiting in waiters.items():
            if len(waiting.confirms) + waiting.commit_oks == 1:
                return waiter
        return None

    def committed(self, batch: int) -> None:
        """The committer wrote ``batch``: release everything that waited for it."""
        for waiter, waiting in self._batches.pop(batch, {}).items():
            waiter.batch_committed(batch, waiting.confirms, waiting.commit_oks)

    def failed(self, batch: int, error: Exception) -> None:
        """The committer could not write ``batch``: fail everything that waited for it."""
        for waiter, waiting in self._batches.pop(batch, {}).items():
            waiter.batch_failed(batch, waiting.confirms, waiting.commit_oks, error)
