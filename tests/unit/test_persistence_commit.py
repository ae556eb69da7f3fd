"""Tests for the group committer (persistence/group_commit.py)."""

from __future__ import annotations

import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from persistence.errors import StoreError
from persistence.group_commit import GroupCommitter
from persistence.journal import Journal
from persistence.records import Batch, MessageRecord, OpKind, QueueDef, QueueKey
from persistence.store import Store

Q: QueueKey = ("/", "q")


def run(fn: Callable[[], Awaitable[None]]) -> None:
    anyio.run(fn)


def rec(i: int = 0) -> MessageRecord:
    return MessageRecord("", "q", b"h", b"m%d" % i)


class FakeStore:
    """Records batches; ``gate`` (if set) holds each apply until released."""

    def __init__(self) -> None:
        self.batches: list[Batch] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.entered = anyio.Event()
        self.gate: anyio.Event | None = None
        self.fail_ids: set[int] = set()
        self.crash = False
        self.inline: list[bool] = []  # each apply's ``inline`` hint

    async def apply(self, batch: Batch, *, inline: bool = False) -> None:
        self.inline.append(inline)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            self.entered.set()
            if self.gate is not None:
                await self.gate.wait()
            await anyio.sleep(0)
            if self.crash:
                raise RuntimeError("bug in the store")
            if batch.id in self.fail_ids:
                raise StoreError(f"injected failure of batch {batch.id}")
            self.batches.append(batch)
        finally:
            self.in_flight -= 1


class Harness:
    def __init__(self, store: FakeStore | Store) -> None:
        self.journal = Journal()
        self.committed: list[int] = []
        self.failed: list[tuple[int, StoreError]] = []
        self.changed = anyio.Event()
        self.committer = GroupCommitter(store, self.journal, self.on_committed, self.on_failed)

    def on_committed(self, batch: Batch) -> None:
        self.committed.append(batch.id)
        self.changed.set()

    def on_failed(self, batch: Batch, exc: StoreError) -> None:
        self.failed.append((batch.id, exc))
        self.changed.set()

    def all_committed(self) -> bool:
        """Nothing pending and the last batch handed out has been reported."""
        reported = self.committed[-1:] + [i for i, _ in self.failed[-1:]]
        last = self.journal.open_batch_id - 1
        return not self.journal.pending and (last == 0 or max(reported, default=0) == last)

    async def until(self, predicate: Callable[[], bool]) -> None:
        with anyio.fail_after(5):
            while not predicate():
                self.changed = anyio.Event()
                await self.changed.wait()


def inserted_seqs(batch: Batch) -> list[int]:
    seqs: list[int] = []
    for kind, rows in batch.ops:
        if kind is OpKind.INSERT_MESSAGE:
            seqs += [int(row[2]) for row in rows]  # type: ignore[arg-type]
    return seqs


def test_lone_mutation_is_committed_at_once() -> None:
    async def main() -> None:
        store = FakeStore()
        h = Harness(store)
        async with anyio.create_task_group() as tg:
            tg.start_soon(h.committer.run)
            await anyio.wait_all_tasks_blocked()
            h.journal.insert_message(Q, 1, rec())
            h.committer.wake()
            await anyio.wait_all_tasks_blocked()  # no timer anywhere: done when idle
            assert h.committed == [1]
            tg.cancel_scope.cancel()
        assert inserted_seqs(store.batches[0]) == [1]
        assert store.inline == [False]  # without a ``lone`` callback: never inline

    run(main)


def test_the_lone_callback_decides_the_stores_inline_hint() -> None:
    async def main() -> None:
        store = FakeStore()
        journal = Journal()
        seen: list[int] = []

        def lone(batch: Batch) -> bool:
            seen.append(batch.id)
            return batch.id % 2 == 0

        committer = GroupCommitter(store, journal, lambda b: None, lambda b, e: None, lone=lone)
        for seq in range(3):
            journal.insert_message(Q, seq, rec(seq))
            await committer.drain()
        assert seen == [1, 2, 3] and store.inline == [False, True, False]

    run(main)


def test_batches_coalesce_while_an_apply_is_in_flight() -> None:
    async def main() -> None:
        store = FakeStore()
        store.gate = anyio.Event()
        h = Harness(store)
        async with anyio.create_task_group() as tg:
            tg.start_soon(h.committer.run)
            assert h.journal.insert_message(Q, 0, rec()) == 1
            h.committer.wake()
            await store.entered.wait()  # batch 1 is being written
            for seq in range(1, 6):
                assert h.journal.insert_message(Q, seq, rec(seq)) == 2
                h.committer.wake()
                h.committer.wake()  # idempotent
                await anyio.sleep(0)
            h.journal.delete_message(Q, 0)  # its insert is in flight: a delete joins batch 2
            h.journal.delete_message(Q, 5)  # cancels its pending insert
            await anyio.wait_all_tasks_blocked()
            assert store.max_in_flight == 1 and h.committed == []
            store.gate.set()
            await h.until(lambda: h.committed == [1, 2])
            tg.cancel_scope.cancel()
        assert [b.id for b in store.batches] == [1, 2]
        assert inserted_seqs(store.batches[1]) == [1, 2, 3, 4]
        assert [kind for kind, _ in store.batches[1].ops] == [
            OpKind.DELETE_MESSAGE,
            OpKind.INSERT_MESSAGE,
        ]
        assert store.max_in_flight == 1

    run(main)


def test_exactly_one_apply_in_flight_under_load() -> None:
    async def main() -> None:
        store = FakeStore()
        h = Harness(store)

        async def producer(n: int) -> None:
            for i in range(50):
                h.journal.insert_message(Q, n * 1000 + i, rec(i))
                h.committer.wake()
                await anyio.sleep(0)

        async with anyio.create_task_group() as tg:
            tg.start_soon(h.committer.run)
            async with anyio.create_task_group() as producers:
                for n in range(20):
                    producers.start_soon(producer, n)
            await h.until(h.all_committed)
            tg.cancel_scope.cancel()
        assert store.max_in_flight == 1
        assert h.committed == list(range(1, len(h.committed) + 1))
        assert sum(len(inserted_seqs(b)) for b in store.batches) == 1000
        assert len(store.batches) < 1000 / 5, "mutations coalesced into few transactions"

    run(main)


def test_on_failed_is_called_and_the_committer_carries_on() -> None:
    async def main() -> None:
        store = FakeStore()
        store.fail_ids = {1}
        h = Harness(store)
        async with anyio.create_task_group() as tg:
            tg.start_soon(h.committer.run)
            h.journal.insert_message(Q, 1, rec())
            h.committer.wake()
            await h.until(lambda: bool(h.failed))
            h.journal.insert_message(Q, 2, rec())
            h.committer.wake()
            await h.until(lambda: h.committed == [2])
            tg.cancel_scope.cancel()
        ((batch_id, exc),) = h.failed
        assert batch_id == 1 and "injected" in str(exc)

    run(main)


def test_cancelled_writes_still_release_their_waiters() -> None:
    async def main() -> None:
        store = FakeStore()
        h = Harness(store)
        async with anyio.create_task_group() as tg:
            tg.start_soon(h.committer.run)
            batch_id = h.journal.insert_message(Q, 1, rec())
            h.journal.delete_message(Q, 1)  # consumed and acked before the commit
            h.committer.wake()
            await h.until(lambda: h.committed == [batch_id])
            tg.cancel_scope.cancel()
        assert store.batches == [Batch(batch_id, [])]

    run(main)


def test_unexpected_store_exception_propagates() -> None:
    async def main() -> None:
        store = FakeStore()
        store.crash = True
        h = Harness(store)
        h.journal.insert_message(Q, 1, rec())
        h.committer.wake()
        with pytest.raises(RuntimeError, match="bug in the store"):
            await h.committer.run()
        assert h.committed == [] and h.failed == []

    run(main)


def test_run_twice_is_refused_and_drain_commits_the_rest() -> None:
    async def main() -> None:
        store = FakeStore()
        h = Harness(store)
        async with anyio.create_task_group() as tg:
            tg.start_soon(h.committer.run)
            await anyio.wait_all_tasks_blocked()
            with pytest.raises(RuntimeError, match="already running"):
                await h.committer.run()
            with pytest.raises(RuntimeError, match="already running"):
                await h.committer.drain()
            tg.cancel_scope.cancel()
        h.journal.insert_message(Q, 1, rec())
        h.journal.insert_message(Q, 2, rec())  # no wake, run() is gone
        await h.committer.drain()
        assert h.committed == [1]
        assert not h.journal.pending

    run(main)


def test_with_the_real_store() -> None:
    async def main() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            store = await Store.open(Path(tmp), synchronous="NORMAL")
            h = Harness(store)
            h.journal.put_queue(QueueDef("/", "q", False, {}))

            async def producer(n: int) -> None:
                for i in range(100):
                    h.journal.insert_message(Q, n * 1000 + i, rec(i))
                    if i % 3 == 0:
                        h.journal.delete_message(Q, n * 1000 + i)
                    h.committer.wake()
                    await anyio.sleep(0)

            async with anyio.create_task_group() as tg:
                tg.start_soon(h.committer.run)
                async with anyio.create_task_group() as producers:
                    for n in range(10):
                        producers.start_soon(producer, n)
                await h.until(h.all_committed)
                tg.cancel_scope.cancel()
            await h.committer.drain()
            state = await store.load()
            await store.close()
        assert h.failed == []
        expected = sorted(n * 1000 + i for n in range(10) for i in range(100) if i % 3)
        assert [seq for seq, _ in state.messages[Q]] == expected
        assert h.journal.stats.batches < 200
        assert h.journal.stats.saved_writes > 0

    run(main)


def test_before_apply_runs_before_each_batch_and_its_store_error_fails_it() -> None:
    """The streams' fsync (amqpd/shell/streams.py) runs before each batch is written; when
    it fails, the batch fails (its confirms are nacked) and the next one is tried again."""

    async def main() -> None:
        store = FakeStore()
        journal = Journal()
        events: list[str] = []
        failing = [True]

        async def before_apply() -> None:
            events.append(f"sync {len(store.batches)}")
            if failing[0]:
                failing[0] = False
                raise StoreError("disk full")

        committed: list[int] = []
        failed: list[int] = []
        committer = GroupCommitter(
            store,
            journal,
            lambda batch: committed.append(batch.id),
            lambda batch, _exc: failed.append(batch.id),
            before_apply=before_apply,
        )
        first = journal.barrier()
        await committer.drain()
        second = journal.barrier()
        await committer.drain()
        assert (failed, committed) == ([first], [second])
        assert events == ["sync 0", "sync 0"]  # each time before the batch is written
        assert len(store.batches) == 1

    run(main)


class Naps:
    """Stands in for ``anyio.sleep`` (patched in the anyio module, which the committer
    uses): each nap (a sleep of more than 0 s: the idle task's) lasts until the test ends
    it, so "a quiet period" is whatever the test says."""

    def __init__(self) -> None:
        self.napping = anyio.Event()
        self._end = anyio.Event()

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:  # FakeStore's checkpoint
            await anyio.lowlevel.checkpoint()
            return
        self.napping.set()
        await self._end.wait()

    async def end_one(self) -> None:
        """End the current nap and wait until the idle task naps again (or is idle)."""
        self.napping = anyio.Event()
        end, self._end = self._end, anyio.Event()
        end.set()
        await anyio.wait_all_tasks_blocked()


def test_idle_work_runs_only_after_a_nap_without_wake_ups(monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        naps = Naps()
        monkeypatch.setattr("persistence.group_commit.anyio.sleep", naps.sleep)
        store = FakeStore()
        h = Harness(store)
        steps: list[bool] = []

        async def idle() -> bool:
            assert not h.journal.pending  # never while something waits to be committed
            steps.append(True)
            return len(steps) < 2  # two steps of work, then nothing left

        committer = GroupCommitter(store, h.journal, h.on_committed, h.on_failed, idle=idle)
        async with anyio.create_task_group() as tg:
            tg.start_soon(committer.run)
            tg.start_soon(committer.run_idle)
            await anyio.wait_all_tasks_blocked()
            assert not naps.napping.is_set()  # nothing committed yet: no idle work to do

            h.journal.insert_message(Q, 1, rec(1))
            committer.wake()
            await anyio.wait_all_tasks_blocked()
            assert h.committed == [1] and naps.napping.is_set() and steps == []

            h.journal.insert_message(Q, 2, rec(2))  # busy: a wake-up during the nap
            committer.wake()
            await naps.end_one()
            assert h.committed == [1, 2] and steps == []  # so no step after that nap

            await naps.end_one()  # a nap without a wake-up: one step, more to do
            assert steps == [True]
            await naps.end_one()  # the second step reports nothing left
            assert steps == [True, True] and not naps.napping.is_set()

            h.journal.insert_message(Q, 3, rec(3))  # the next commit starts it again
            committer.wake()
            await anyio.wait_all_tasks_blocked()
            assert h.committed == [1, 2, 3] and naps.napping.is_set()
            tg.cancel_scope.cancel()

    run(main)
