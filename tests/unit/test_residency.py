"""A queue's residency counters (model/residency.py: stored and paged-out ready messages)
always equal a full recount of its ready entries, whatever happens to them."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amqpd.model.held import drop_failed
from amqpd.model.message import Clock, Message, QueueEntry
from amqpd.model.paging import page_in, page_out
from amqpd.model.queue import HOT_WINDOW, Queue
from persistence.journal import Journal
from persistence.records import OpKind


class Bodies:
    """A BodyLoader over the bodies of the committed inserts."""

    def __init__(self) -> None:
        self.bodies: dict[int, bytes] = {}

    def read_bodies(
        self, queue: tuple[str, str], after_seq: int, limit: int
    ) -> list[tuple[int, bytes]]:
        seqs = sorted(seq for seq in self.bodies if seq > after_seq)
        return [(seq, self.bodies[seq]) for seq in seqs[:limit]]


class Harness:
    """One stored queue with its journal, body store and a client's unacked entries."""

    def __init__(self, arguments: dict[str, Any], dead_lettering: bool) -> None:
        self.clock = Clock(1000.0)
        self.queue = queue = Queue("q", "/", True, None, False, arguments, self.clock)
        self.journal = Journal()
        self.bodies = Bodies()
        queue.journal = self.journal
        queue.pager = self.bodies
        queue.paging_set = set()
        self.dead: list[Message] = []
        if dead_lettering:
            queue.dead_letter = lambda _queue, message, _reason: self.dead.append(message)
        self.unacked: list[QueueEntry] = []
        for _ in range(HOT_WINDOW):  # a transient head: what follows is paged out
            self.publish(False, 1, 0, None, False)

    def publish(
        self, persistent: bool, size: int, priority: int, ttl: int | None, promised: bool
    ) -> None:
        body = b"x" * size
        message = Message("", "q", b"\x00", b"\x01q", b"", body, persistent, priority)
        self.queue.enqueue(message, ttl, promised)

    def batch(self, committed: bool) -> None:
        batch = self.journal.take_batch()
        if batch is None:
            return
        if not committed:
            drop_failed(self.queue, batch.id)
            return
        for kind, rows in batch.ops:
            if kind is OpKind.INSERT_MESSAGE:
                for row in rows:
                    self.bodies.bodies[row[2]] = row[6]
        page_out(self.queue, batch.id)

    def take(self, count: int) -> None:
        for _ in range(count):
            entry = self.queue.take()
            if entry is None:
                return
            self.queue.delivered(entry)
            self.unacked.append(entry)

    def settle(self, index: int, reject: bool) -> None:
        if self.unacked:
            entry = self.unacked.pop(index % len(self.unacked))
            if reject:
                self.queue.discard(entry, "rejected")
            else:
                self.queue.settled(entry)

    def requeue(self, mask: int) -> None:
        back = [entry for n, entry in enumerate(self.unacked) if mask >> (n % 16) & 1]
        self.unacked = [entry for n, entry in enumerate(self.unacked) if not mask >> (n % 16) & 1]
        self.queue.requeue(back)

    def run(self, op: tuple[Any, ...]) -> None:
        name, *args = op
        queue = self.queue
        if name == "publish":
            self.publish(*args)
        elif name == "commit":
            self.batch(True)
        elif name == "fail":
            self.batch(False)
        elif name == "take":
            self.take(args[0])
        elif name == "settle":
            self.settle(*args)
        elif name == "requeue":
            self.requeue(args[0])
        elif name == "purge":
            queue.purge()
        elif name == "tick":
            self.clock.now += args[0] / 1000
            queue.tick()
        elif name == "page_in":
            page_in(queue)


def recount(queue: Queue) -> tuple[int, int, int, int]:
    """The residency of ``queue`` the slow way: one pass over its ready entries."""
    persistent = persistent_bytes = paged_out = paged_out_bytes = 0
    for entry in queue.ready:
        size = entry.message.body_size
        if entry.stored:
            persistent += 1
            persistent_bytes += size
        if entry.message.body is None:
            paged_out += 1
            paged_out_bytes += size
    return persistent, persistent_bytes, paged_out, paged_out_bytes


def counted(queue: Queue) -> tuple[int, int, int, int]:
    held = queue.residency
    return held.persistent, held.persistent_bytes, held.paged_out, held.paged_out_bytes


OPS = st.one_of(
    st.tuples(
        st.just("publish"),
        st.booleans(),
        st.integers(0, 9),
        st.integers(0, 5),
        st.none() | st.integers(0, 50),
        st.booleans(),
    ),
    st.tuples(st.just("commit")),
    st.tuples(st.just("fail")),
    st.tuples(st.just("take"), st.integers(1, HOT_WINDOW + 40)),
    st.tuples(st.just("settle"), st.integers(0, 100), st.booleans()),
    st.tuples(st.just("requeue"), st.integers(0, 0xFFFF)),
    st.tuples(st.just("purge")),
    st.tuples(st.just("tick"), st.integers(0, 30)),
    st.tuples(st.just("page_in")),
)

ARGUMENTS = st.sampled_from(
    [
        {},
        {"x-max-priority": 3},
        {"x-max-length": HOT_WINDOW + 4},
        {"x-max-length-bytes": HOT_WINDOW + 30, "x-overflow": "reject-publish"},
        {"x-queue-type": "quorum", "x-delivery-limit": 1},
        {"x-message-ttl": 20},
    ]
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ARGUMENTS, st.booleans(), st.lists(OPS, max_size=40))
def test_counters_always_equal_a_recount(
    arguments: dict[str, Any], dead_lettering: bool, ops: list[tuple[Any, ...]]
) -> None:
    harness = Harness(arguments, dead_lettering)
    for op in ops:
        harness.run(op)
        assert counted(harness.queue) == recount(harness.queue), op


def test_paging_out_and_in_moves_messages_between_the_counts() -> None:
    harness = Harness({}, False)
    queue = harness.queue
    for _ in range(3):
        harness.publish(True, 5, 0, None, False)
    assert counted(queue) == (3, 15, 0, 0)
    harness.batch(True)
    assert counted(queue) == (3, 15, 3, 15) == recount(queue)
    harness.take(HOT_WINDOW + 1)  # reaching the first paged-out body reads the page back
    assert counted(queue) == (2, 10, 0, 0) == recount(queue)
    harness.requeue(0xFFFF)
    assert counted(queue) == (3, 15, 0, 0) == recount(queue)
    queue.purge()
    assert counted(queue) == (0, 0, 0, 0)


def test_a_delivered_message_keeps_its_body_when_its_batch_commits() -> None:
    harness = Harness({}, False)
    queue = harness.queue
    harness.publish(True, 5, 0, None, False)
    harness.take(HOT_WINDOW + 1)  # delivered before its insert committed
    harness.batch(True)
    assert harness.unacked[-1].message.body == b"xxxxx"
    harness.requeue(0xFFFF)
    assert counted(queue) == (1, 5, 0, 0) == recount(queue)


def test_dead_lettering_expired_paged_out_messages_reads_them_back_first() -> None:
    harness = Harness({"x-message-ttl": 20}, True)
    queue = harness.queue
    for _ in range(2):
        harness.publish(True, 5, 0, None, False)
    harness.batch(True)
    assert counted(queue) == (2, 10, 2, 10)
    harness.run(("tick", 30))
    assert [message.body for message in harness.dead[-2:]] == [b"xxxxx", b"xxxxx"]
    assert counted(queue) == (0, 0, 0, 0) == recount(queue)
