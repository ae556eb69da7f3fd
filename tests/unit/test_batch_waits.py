"""`BatchWaits.lone_waiter` and the shell's lone-batch rule built on it: which storage
batches are a lone round trip's, written by the store without a thread hop."""

from __future__ import annotations

from types import SimpleNamespace

from amqpd.model.batches import BatchWaits
from amqpd.shell.store_lifecycle import StoreLifecycle
from persistence.records import Batch


class Waiter:
    def __init__(self) -> None:
        self.answers: list[tuple[int, list[int], int]] = []

    def batch_committed(self, batch: int, confirms: list[int], commit_oks: int) -> None:
        self.answers.append((batch, confirms, commit_oks))

    def batch_failed(
        self, batch: int, confirms: list[int], commit_oks: int, error: Exception
    ) -> None:
        raise AssertionError("not in these tests")


def test_the_lone_waiter_waits_alone_for_one_confirm_or_one_commit_ok() -> None:
    waits = BatchWaits()
    a, b = Waiter(), Waiter()
    assert waits.lone_waiter(1) is None  # nobody waits
    waits.confirm(1, a, 7)
    assert waits.lone_waiter(1) is a
    waits.commit_ok(2, b)
    assert waits.lone_waiter(2) is b
    waits.confirm(3, a, 8)
    waits.confirm(3, a, 9)
    assert waits.lone_waiter(3) is None  # a window of publishes in flight
    waits.confirm(4, a, 10)
    waits.confirm(4, b, 1)
    assert waits.lone_waiter(4) is None  # two clients
    for batch in (1, 2, 3, 4):
        waits.committed(batch)
    assert a.answers == [(1, [7], 0), (3, [8, 9], 0), (4, [10], 0)]


def test_a_batch_is_lone_when_the_same_single_waiter_waited_for_the_one_before() -> None:
    """One publisher waiting for each confirm: inline from its second batch on. Two taking
    turns: never (each one's next publish is read while the other's batch is written)."""
    waits = BatchWaits()
    shell = SimpleNamespace(broker=SimpleNamespace(batch_waits=waits), _last_waiter=None)
    a, b = Waiter(), Waiter()

    def lone(batch: int, *waiters: Waiter) -> bool:
        for seq, waiter in enumerate(waiters):
            waits.confirm(batch, waiter, seq)
        return StoreLifecycle._lone_batch(shell, Batch(batch, []))  # type: ignore[arg-type]

    assert [lone(1, a), lone(2, a), lone(3, a)] == [False, True, True]
    assert [lone(4, b), lone(5, a), lone(6, b)] == [False, False, False]
    assert [lone(7), lone(8, a), lone(9, a, a)] == [False, False, False]
