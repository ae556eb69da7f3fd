"""Group commit: one store transaction for everything journaled while the last one was written.

Theory of operation
-------------------
The broker core journals mutations synchronously (:class:`persistence.journal.Journal`) and,
once per received chunk, calls :meth:`GroupCommitter.wake`. :meth:`GroupCommitter.run` is a
single task that loops:

1. wait until woken;
2. while the journal has something pending: take the whole open batch, ``await
   store.apply(batch)``, then call ``on_committed(batch)`` (or ``on_failed(batch, error)``
   if the store raised :class:`~persistence.errors.StoreError`).

There is exactly one ``apply`` in flight, because only this task calls it and it awaits each
call. Mutations that arrive while a transaction is being written stay in the journal's open
batch and are all taken together as soon as the transaction returns: the busier the broker,
the larger the batches, with no timer. A lone mutation is committed at once, since the task
is already waiting when it is woken (no artificial delay, so latency at low load is one
transaction).

The callbacks are how promises are kept (ARCHITECTURE, principle 4): ``on_committed(batch)``
is the moment the confirms and ``tx.commit-ok`` waiting on ``batch.id`` may be sent. Ids are
handed out in order, so when the batch ``n`` is reported (committed or failed), every batch
below ``n`` has already been. The callbacks get the batch itself: what a failed one
inserted, how many bytes a committed one wrote. After a failure the task carries on with the next
batch: the store rolled the failed one back and stays usable.

Writes that are not in the journal (the access-control tables, changed by ``amqpd
users|vhosts`` on a running broker) go through :meth:`commit_then`: under the same lock that
each batch's take-apply-report holds, it commits what is pending now, then runs the write.
So it never overlaps a batch, and it lands after every mutation journaled before it (a
deleted vhost's queues are gone from the store before the vhost is).

Idle work (the ``idle`` callback: the store giving free pages back after a backlog drained)
runs in its own task, :meth:`run_idle`, in small steps: after a batch committed, each step
only once a whole `IDLE_DELAY` passed without a wake-up, under the lock and only while
nothing is pending, so it stays out of busy periods (a drain, a publishing burst) and a
commit waits for at most one step. It sleeps until the next commit once a step reports
nothing left. Keeping it out of :meth:`run` keeps a lone commit cheap: no timer is armed
and cancelled per transaction (a round trip per message, e.g. a confirm per publish, paid
for one on every message).

Cancelling :meth:`run` does not interrupt a transaction in progress (the store shields it)
and its outcome is still reported. :meth:`drain` commits whatever is left once ``run`` has
stopped, for an orderly shutdown.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

import anyio
import anyio.lowlevel

from persistence.errors import StoreError
from persistence.journal import Journal
from persistence.records import Batch

__all__ = ["BatchStore", "GroupCommitter"]

log = logging.getLogger(__name__)

IDLE_DELAY = 0.05  # seconds without a wake-up before each step of idle work


class BatchStore(Protocol):
    """What the committer needs of a store (:class:`persistence.store.Store` fits)."""

    async def apply(self, batch: Batch, *, inline: bool = False) -> None:
        """Write ``batch`` in one transaction; raise :class:`StoreError` on failure.

        ``inline``: the batch is a lone round trip's (one client waits for it and sends
        nothing until it is written: a publisher waiting for each confirm, a tx.commit per
        message), so a store may write it without handing it to another thread."""
        ...


class GroupCommitter:
    """Commits the journal's batches one transaction at a time.

    Args:
        store: Where batches are written.
        journal: Where batches are taken from.
        on_committed: Called with a batch once its transaction has committed.
        on_failed: Called with a batch and the error if its transaction failed (nothing
            of that batch was written).
        idle: One step of idle work (see the module docstring).
        before_apply: Awaited before each batch is written (the streams' fsync); a
            StoreError from it fails the batch.
        lone: Whether a batch is a lone round trip's (one client waits for it and sends
            nothing meanwhile), passed to the store as ``apply(batch, inline=...)``.
    """

    def __init__(
        self,
        store: BatchStore,
        journal: Journal,
        on_committed: Callable[[Batch], None],
        on_failed: Callable[[Batch, StoreError], None],
        idle: Callable[[], Awaitable[bool]] | None = None,
        before_apply: Callable[[], Awaitable[None]] | None = None,
        lone: Callable[[Batch], bool] | None = None,
    ) -> None:
        self._before_apply = before_apply  # stream fsyncs (amqpd/shell/streams.py)
        self._lone = lone  # a batch for a lone round trip: the store's ``inline`` hint
        self._idle = idle  # one step of idle work; True while more remains
        self._store = store
        self._journal = journal
        self._on_committed = on_committed
        self._on_failed = on_failed
        self._wakeup = anyio.Event()
        self._wakes = 0  # wake-ups so far: run_idle waits for a period without one
        self._committed = anyio.Event()  # a batch was reported since idle work last finished
        self._running = False
        self._lock = anyio.Lock(fast_acquire=True)  # one transaction at a time

    def wake(self) -> None:
        """Tell the committer the journal may have something pending.

        Synchronous, cheap and idempotent; call it from the event loop thread.
        """
        self._wakes += 1
        if not self._wakeup.is_set():
            self._wakeup.set()

    async def run(self) -> None:
        """Commit batches forever (until cancelled).

        Raises:
            RuntimeError: ``run`` or :meth:`drain` is already running.
            Exception: Whatever ``store.apply`` raises other than ``StoreError`` (a bug)
                and whatever the callbacks raise; the loop stops.
        """
        self._start()
        try:
            while True:
                await self._wakeup.wait()
                self._wakeup = anyio.Event()
                await self._commit_pending()
        finally:
            self._running = False

    async def run_idle(self) -> None:
        """Do the idle work in small steps after batches were committed (until cancelled;
        see the module docstring). Returns at once without an ``idle`` callback.

        Raises:
            Exception: Whatever the ``idle`` callback raises other than ``StoreError``.
        """
        idle = self._idle
        if idle is None:
            return
        while True:
            await self._committed.wait()
            self._committed = anyio.Event()
            while True:
                wakes = self._wakes
                await anyio.sleep(IDLE_DELAY)  # only once the broker is quiet for a bit
                if self._wakes != wakes or self._journal.pending:
                    continue
                async with self._lock:
                    if self._journal.pending or self._wakes != wakes:
                        continue
                    self._committed = anyio.Event()  # commits until now are covered
                    try:
                        more = await idle()
                    except StoreError as exc:
                        log.warning("idle store work failed: %s", exc)
                        more = False
                if not more:
                    break

    async def drain(self) -> None:
        """Commit everything pending now, then return (for shutdown, after ``run`` stopped).

        Raises:
            RuntimeError: :meth:`run` is running.
        """
        self._start()
        try:
            await self._commit_pending()
        finally:
            self._running = False

    async def commit_then(self, action: Callable[[], Awaitable[None]]) -> None:
        """Commit what is journaled now, then run ``action`` before the next batch starts.

        For a write outside the journal (it may use the store: no ``apply`` is in flight
        while it runs). Works whether or not :meth:`run` is running.

        Raises:
            Exception: Whatever ``action`` raises (the pending batch's outcome has been
                reported either way).
        """
        async with self._lock:
            await self._commit_one()
            await action()

    def _start(self) -> None:
        if self._running:
            raise RuntimeError("the group committer is already running")
        self._running = True

    async def _commit_pending(self) -> None:
        journal = self._journal
        while journal.pending:
            # Stop between transactions when cancelled; what is left stays in the journal.
            await anyio.lowlevel.checkpoint_if_cancelled()
            async with self._lock:
                if not await self._commit_one():
                    return

    async def _commit_one(self) -> bool:
        """Take, write and report the open batch (caller holds the lock); False if empty."""
        batch = self._journal.take_batch()
        if batch is None:
            return False
        inline = self._lone is not None and self._lone(batch)
        try:
            if self._before_apply is not None:
                await self._before_apply()  # files outside the store: durable first
            await self._store.apply(batch, inline=inline)
        except StoreError as exc:
            log.debug("batch %d failed: %s", batch.id, exc)  # the callback logs it
            self._on_failed(batch, exc)
        else:
            self._on_committed(batch)
        if not self._committed.is_set():
            self._committed.set()
        return True
