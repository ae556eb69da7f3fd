"""Tests for the persistence journal and field-table codec (pure code, no SQLite).

Also holds the reference model (:class:`Reference`) and the in-memory interpretation of
batches (:class:`DictStore`) shared with ``test_persistence_store.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from persistence import fieldcodec
from persistence.journal import Journal
from persistence.records import (
    Batch,
    BindingDef,
    ExchangeDef,
    MessageRecord,
    OpKind,
    QueueDef,
    QueueKey,
    RecoveredState,
)

Q: QueueKey = ("/", "q")


def rec(body: bytes = b"body", **kw: Any) -> MessageRecord:
    return MessageRecord("ex", "rk", b"\x00<hdr", body, **kw)


def kinds(batch: Batch | None) -> list[OpKind]:
    assert batch is not None
    return [kind for kind, _ in batch.ops]


def rows(batch: Batch | None, kind: OpKind) -> list[tuple[Any, ...]]:
    assert batch is not None
    found = [r for k, r in batch.ops if k is kind]
    assert len(found) <= 1, "each kind at most once per batch"
    return found[0] if found else []


# ------------------------------------------------------------------------------ journal


def test_batch_ids_start_at_one_and_increase() -> None:
    j = Journal()
    assert j.open_batch_id == 1
    assert not j.pending
    assert j.take_batch() is None
    assert j.open_batch_id == 1, "an empty take does not consume an id"
    assert j.insert_message(Q, 1, rec()) == 1
    assert j.insert_message(Q, 2, rec()) == 1
    b1 = j.take_batch()
    assert b1 is not None and b1.id == 1
    assert j.open_batch_id == 2
    assert j.insert_message(Q, 3, rec()) == 2
    j.put_queue(QueueDef("/", "other", False, {}))
    b2 = j.take_batch()
    assert b2 is not None and b2.id == 2
    assert j.take_batch() is None
    assert j.stats.batches == 2


def test_insert_row_layout() -> None:
    j = Journal()
    j.insert_message(Q, 7, MessageRecord("x", "k", b"h", b"b", False, 0, 12.5))
    assert rows(j.take_batch(), OpKind.INSERT_MESSAGE) == [
        ("/", "q", 7, "x", "k", b"h", b"b", False, 0, 12.5)
    ]


def test_insert_then_delete_in_open_batch_writes_nothing() -> None:
    j = Journal()
    batch_id = j.insert_message(Q, 1, rec())
    j.delete_message(Q, 1)
    assert j.stats.saved_writes == 1
    assert (j.stats.inserts, j.stats.deletes) == (1, 1)
    batch = j.take_batch()
    # The publisher waits on batch_id, so the batch is still handed out, with nothing to write.
    assert batch is not None and batch.id == batch_id
    assert batch.ops == []
    assert not j.pending


def test_cancellation_leaves_the_other_writes_alone() -> None:
    j = Journal()
    for seq in range(5):
        j.insert_message(Q, seq, rec())
    j.delete_message(Q, 1)
    j.delete_message(Q, 3)
    batch = j.take_batch()
    assert kinds(batch) == [OpKind.INSERT_MESSAGE]
    assert [r[2] for r in rows(batch, OpKind.INSERT_MESSAGE)] == [0, 2, 4]
    assert j.stats.saved_writes == 2


def test_delete_after_insert_was_taken_goes_into_next_batch() -> None:
    j = Journal()
    j.insert_message(Q, 1, rec())
    first = j.take_batch()
    assert kinds(first) == [OpKind.INSERT_MESSAGE]
    j.delete_message(Q, 1)
    assert j.pending
    second = j.take_batch()
    assert second is not None and second.id == 2
    assert second.ops == [(OpKind.DELETE_MESSAGE, [("/", "q", 1)])]
    assert j.stats.saved_writes == 0


def test_mark_delivered_updates_pending_insert_in_place() -> None:
    j = Journal()
    record = rec()
    j.insert_message(Q, 1, record)
    j.mark_delivered(Q, 1, 1)
    j.mark_delivered(Q, 1, 2)
    assert record.redelivered is True and record.delivery_count == 2
    batch = j.take_batch()
    assert kinds(batch) == [OpKind.INSERT_MESSAGE], "no extra op"
    (row,) = rows(batch, OpKind.INSERT_MESSAGE)
    assert row[7:9] == (True, 2)


def test_batch_is_a_snapshot_of_the_record() -> None:
    j = Journal()
    record = rec()
    j.insert_message(Q, 1, record)
    batch = j.take_batch()
    j.mark_delivered(Q, 1, 5)  # after the take: an update op, the taken row is unchanged
    assert record.redelivered is False
    assert rows(batch, OpKind.INSERT_MESSAGE)[0][7:9] == (False, 0)
    assert j.take_batch() == Batch(2, [(OpKind.MARK_DELIVERED, [("/", "q", 1, 5)])])


def test_mark_delivered_after_take_then_ack_keeps_only_the_delete() -> None:
    j = Journal()
    j.insert_message(Q, 1, rec())
    j.take_batch()
    j.mark_delivered(Q, 1, 1)
    j.mark_delivered(Q, 1, 2)
    j.delete_message(Q, 1)
    batch = j.take_batch()
    assert batch is not None
    assert batch.ops == [(OpKind.DELETE_MESSAGE, [("/", "q", 1)])]


def test_delete_queue_drops_pending_message_writes() -> None:
    j = Journal()
    j.insert_message(Q, 0, rec())
    j.take_batch()
    j.put_queue(QueueDef("/", "q", False, {}))
    for seq in range(1, 4):
        j.insert_message(Q, seq, rec())
    j.mark_delivered(Q, 0, 1)
    j.delete_message(Q, 0)
    j.insert_message(("/", "other"), 1, rec())
    j.delete_queue("/", "q")
    batch = j.take_batch()
    assert kinds(batch) == [OpKind.DELETE_QUEUE, OpKind.INSERT_MESSAGE]
    assert rows(batch, OpKind.DELETE_QUEUE) == [("/", "q")]
    assert [r[:3] for r in rows(batch, OpKind.INSERT_MESSAGE)] == [("/", "other", 1)]
    assert j.stats.saved_writes == 3


def test_put_insert_delete_put_insert_leaves_only_the_last_insert() -> None:
    j = Journal()
    j.put_queue(QueueDef("/", "q", False, {"v": 1}))
    j.insert_message(Q, 1, rec(b"old"))
    j.delete_queue("/", "q")
    j.put_queue(QueueDef("/", "q", True, {"v": 2}))
    j.insert_message(Q, 1, rec(b"new"))
    batch = j.take_batch()
    assert kinds(batch) == [OpKind.DELETE_QUEUE, OpKind.PUT_QUEUE, OpKind.INSERT_MESSAGE]
    (put,) = rows(batch, OpKind.PUT_QUEUE)
    assert put[:3] == ("/", "q", True) and fieldcodec.decode(put[3]) == {"v": 2}
    (insert,) = rows(batch, OpKind.INSERT_MESSAGE)
    assert insert[2] == 1 and insert[6] == b"new"


def test_definitions_come_before_messages_and_deletes_before_puts() -> None:
    j = Journal()
    j.insert_message(Q, 1, rec())  # the queue is put later in the same batch
    j.put_binding(BindingDef("/", "x", "queue", "q", "k", {}))
    j.put_queue(QueueDef("/", "q", False, {}))
    j.put_exchange(ExchangeDef("/", "x", "direct", False, False, {}))
    j.delete_binding(BindingDef("/", "x", "queue", "q", "old", {}))
    j.delete_exchange("/", "gone")
    j.delete_queue("/", "gone")
    j.insert_message(Q, 2, rec())
    j.take_batch()
    j.delete_message(Q, 1)
    j.mark_delivered(Q, 2, 1)
    j.insert_message(Q, 3, rec())
    assert kinds(j.take_batch()) == [
        OpKind.DELETE_MESSAGE,
        OpKind.INSERT_MESSAGE,
        OpKind.MARK_DELIVERED,
    ]
    j2 = Journal()
    j2.insert_message(Q, 1, rec())
    j2.put_binding(BindingDef("/", "x", "queue", "q", "k", {}))
    j2.put_queue(QueueDef("/", "q", False, {}))
    j2.put_exchange(ExchangeDef("/", "x", "direct", False, False, {}))
    j2.delete_binding(BindingDef("/", "x", "queue", "q", "old", {}))
    j2.delete_exchange("/", "gone")
    j2.delete_queue("/", "gone")
    assert kinds(j2.take_batch()) == [
        OpKind.DELETE_BINDING,
        OpKind.DELETE_QUEUE,
        OpKind.DELETE_EXCHANGE,
        OpKind.PUT_EXCHANGE,
        OpKind.PUT_QUEUE,
        OpKind.PUT_BINDING,
        OpKind.INSERT_MESSAGE,
    ]


def test_deleting_an_endpoint_drops_pending_binding_puts() -> None:
    j = Journal()
    to_q = BindingDef("/", "x", "queue", "q", "k", {})
    from_x = BindingDef("/", "x", "exchange", "y", "k", {})
    to_x = BindingDef("/", "y", "exchange", "x", "k", {})
    other_vhost = BindingDef("v", "x", "queue", "q", "k", {})
    survivor = BindingDef("/", "y", "queue", "q2", "k", {})
    for b in (to_q, from_x, to_x, other_vhost, survivor):
        j.put_binding(b)
    j.delete_queue("/", "q")
    j.delete_exchange("/", "x")
    puts = rows(j.take_batch(), OpKind.PUT_BINDING)
    assert [r[:5] for r in puts] == [("v", "x", "queue", "q", "k"), ("/", "y", "queue", "q2", "k")]


def test_delete_then_put_exchange_keeps_the_delete() -> None:
    j = Journal()
    j.delete_exchange("/", "x")
    j.put_exchange(ExchangeDef("/", "x", "topic", True, True, {"alternate-exchange": "ae"}))
    batch = j.take_batch()
    assert kinds(batch) == [OpKind.DELETE_EXCHANGE, OpKind.PUT_EXCHANGE]
    (row,) = rows(batch, OpKind.PUT_EXCHANGE)
    assert row[:5] == ("/", "x", "topic", True, True)
    j.put_exchange(ExchangeDef("/", "x", "topic", False, False, {}))
    j.delete_exchange("/", "x")
    assert kinds(j.take_batch()) == [OpKind.DELETE_EXCHANGE]


def test_binding_identity_ignores_argument_order() -> None:
    j = Journal()
    j.put_binding(BindingDef("/", "h", "queue", "q", "", {"x-match": "all", "a": 1}))
    j.delete_binding(BindingDef("/", "h", "queue", "q", "", {"a": 1, "x-match": "all"}))
    batch = j.take_batch()
    assert kinds(batch) == [OpKind.DELETE_BINDING]
    j.put_binding(BindingDef("/", "h", "queue", "q", "", {"a": 1}))
    j.put_binding(BindingDef("/", "h", "queue", "q", "", {"a": 2}))
    assert len(rows(j.take_batch(), OpKind.PUT_BINDING)) == 2


def test_arguments_are_snapshotted_and_checked_at_put_time() -> None:
    j = Journal()
    args: dict[str, Any] = {"x-max-length": 1}
    j.put_queue(QueueDef("/", "q", False, args))
    args["x-max-length"] = 2
    (row,) = rows(j.take_batch(), OpKind.PUT_QUEUE)
    assert fieldcodec.decode(row[3]) == {"x-max-length": 1}
    with pytest.raises(TypeError, match="set"):
        j.put_exchange(ExchangeDef("/", "x", "direct", False, False, {"bad": {1, 2}}))
    assert not j.pending


def test_barrier_hands_out_a_batch_even_without_writes() -> None:
    j = Journal()
    assert j.barrier() == 1
    assert j.pending
    assert j.take_batch() == Batch(1, [])
    assert not j.pending and j.open_batch_id == 2


def test_reinsert_after_taken_delete_keeps_delete_and_insert() -> None:
    j = Journal()
    j.insert_message(Q, 1, rec(b"a"))
    j.take_batch()
    j.delete_message(Q, 1)
    j.insert_message(Q, 1, rec(b"b"))
    batch = j.take_batch()
    assert kinds(batch) == [OpKind.DELETE_MESSAGE, OpKind.INSERT_MESSAGE]


def test_insert_after_a_pending_mark_of_a_gone_message_is_fresh() -> None:
    j = Journal()
    j.insert_message(Q, 1, rec())
    j.take_batch()
    j.delete_message(Q, 1)
    j.take_batch()
    j.mark_delivered(Q, 1, 4)  # a late mark for the deleted message: an update op...
    j.insert_message(Q, 1, rec(b"again"))  # ...that must not hit the new row
    batch = j.take_batch()
    assert kinds(batch) == [OpKind.INSERT_MESSAGE]
    assert rows(batch, OpKind.INSERT_MESSAGE)[0][7:9] == (False, 0)


def test_many_queues_cost_nothing_when_idle() -> None:
    j = Journal()
    for i in range(1000):
        j.insert_message(("/", f"q{i}"), 1, rec())
        j.delete_message(("/", f"q{i}"), 1)
    batch = j.take_batch()
    assert batch is not None and batch.ops == []
    assert j.stats.saved_writes == 1000


# ------------------------------------------------------------------------------ model


Msg = tuple[str, str, bytes, bytes, bool, int, float | None]


def snap(r: MessageRecord) -> Msg:
    return (
        r.exchange,
        r.routing_key,
        r.header,
        r.body,
        r.redelivered,
        r.delivery_count,
        r.expires_at,
    )


def binding_key(b: BindingDef) -> tuple[str, str, str, str, str, bytes]:
    args = fieldcodec.encode(b.arguments, canonical=True)
    return (b.vhost, b.source, b.destination_kind, b.destination, b.routing_key, args)


class State:
    """Comparable contents of a store."""

    def __init__(self) -> None:
        self.exchanges: dict[QueueKey, tuple[str, bool, bool, dict[str, Any]]] = {}
        self.queues: dict[QueueKey, tuple[bool, dict[str, Any]]] = {}
        self.bindings: set[tuple[str, str, str, str, str, bytes]] = set()
        self.messages: dict[tuple[QueueKey, int], Msg] = {}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, State) and self.parts() == other.parts()

    def parts(self) -> tuple[Any, ...]:
        return (self.exchanges, self.queues, self.bindings, self.messages)

    def __repr__(self) -> str:
        return f"State{self.parts()!r}"

    @classmethod
    def from_recovered(cls, r: RecoveredState) -> State:
        s = cls()
        for e in r.exchanges:
            s.exchanges[(e.vhost, e.name)] = (e.type_name, e.auto_delete, e.internal, e.arguments)
        for q in r.queues:
            s.queues[(q.vhost, q.name)] = (q.auto_delete, q.arguments)
        s.bindings = {binding_key(b) for b in r.bindings}
        for key, msgs in r.messages.items():
            seqs = [seq for seq, _ in msgs]
            assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
            assert key in s.queues
            for seq, m in msgs:
                s.messages[(key, seq)] = snap(m)
        return s


class Reference(State):
    """What the store should contain: every journal call applied at once, naively."""

    def put_exchange(self, d: ExchangeDef) -> None:
        self.exchanges[(d.vhost, d.name)] = (d.type_name, d.auto_delete, d.internal, d.arguments)

    def delete_exchange(self, vhost: str, name: str) -> None:
        self.exchanges.pop((vhost, name), None)
        self.bindings = {
            b
            for b in self.bindings
            if not (b[0] == vhost and (b[1] == name or (b[2] == "exchange" and b[3] == name)))
        }

    def put_queue(self, d: QueueDef) -> None:
        self.queues[(d.vhost, d.name)] = (d.auto_delete, d.arguments)

    def delete_queue(self, vhost: str, name: str) -> None:
        self.queues.pop((vhost, name), None)
        self.messages = {k: v for k, v in self.messages.items() if k[0] != (vhost, name)}
        self.bindings = {
            b for b in self.bindings if not (b[0] == vhost and b[2] == "queue" and b[3] == name)
        }

    def put_binding(self, d: BindingDef) -> None:
        self.bindings.add(binding_key(d))

    def delete_binding(self, d: BindingDef) -> None:
        self.bindings.discard(binding_key(d))

    def insert_message(self, queue: QueueKey, seq: int, r: MessageRecord) -> None:
        assert queue in self.queues and (queue, seq) not in self.messages
        self.messages[(queue, seq)] = snap(r)

    def mark_delivered(self, queue: QueueKey, seq: int, count: int) -> None:
        m = self.messages.get((queue, seq))
        if m is not None:
            self.messages[(queue, seq)] = (*m[:4], True, count, m[6])

    def delete_message(self, queue: QueueKey, seq: int) -> None:
        self.messages.pop((queue, seq), None)


class DictStore(State):
    """Applies batches with the same semantics as the SQL in persistence/store.py."""

    def apply(self, batch: Batch) -> None:
        for kind, op_rows in batch.ops:
            assert op_rows, "no empty op"
            for row in op_rows:
                getattr(self, "_" + kind.value)(*row)

    def _delete_binding(self, *key: Any) -> None:
        self.bindings.discard(key)

    def _delete_queue(self, vhost: str, name: str) -> None:
        Reference.delete_queue(self, vhost, name)  # type: ignore[arg-type]

    def _delete_exchange(self, vhost: str, name: str) -> None:
        Reference.delete_exchange(self, vhost, name)  # type: ignore[arg-type]

    def _put_exchange(self, vhost: str, name: str, t: str, ad: bool, i: bool, a: bytes) -> None:
        self.exchanges[(vhost, name)] = (t, ad, i, fieldcodec.decode(a))

    def _put_queue(self, vhost: str, name: str, ad: bool, a: bytes) -> None:
        self.queues[(vhost, name)] = (ad, fieldcodec.decode(a))

    def _put_binding(self, *key: Any) -> None:
        self.bindings.add(key)

    def _delete_message(self, vhost: str, name: str, seq: int) -> None:
        self.messages.pop(((vhost, name), seq), None)

    def _insert_message(self, vhost: str, name: str, seq: int, *fields: Any) -> None:
        assert (vhost, name) in self.queues, "insert for a queue the store does not have"
        self.messages[((vhost, name), seq)] = tuple(fields)

    def _mark_delivered(self, vhost: str, name: str, seq: int, count: int) -> None:
        Reference.mark_delivered(self, (vhost, name), seq, count)  # type: ignore[arg-type]


# Small domains so that names, keys and sequence numbers collide often.
VHOSTS = st.sampled_from(["/", "v2"])
EXCHANGES = st.sampled_from(["x", "y"])
QUEUES = st.sampled_from(["q1", "q2"])
ARGS = st.sampled_from(
    [{}, {"a": 1}, {"a": 1, "b": b"\x00"}, {"b": b"\x00", "a": 1}, {"n": {"l": [1, "s"]}}]
)
RECORDS = st.builds(
    MessageRecord,
    exchange=st.sampled_from(["", "x"]),
    routing_key=st.sampled_from(["a", "b.c"]),
    header=st.sampled_from([b"h1", b"\x00\x3c\x00\x00"]),
    body=st.binary(max_size=8),
    redelivered=st.booleans(),
    delivery_count=st.integers(0, 3),
    expires_at=st.none() | st.floats(0, 2e9),
)
SEQS = st.integers(0, 5)
BOOLS = st.booleans()


def binding_defs() -> st.SearchStrategy[BindingDef]:
    to_queue = st.builds(
        BindingDef, VHOSTS, EXCHANGES, st.just("queue"), QUEUES, st.sampled_from(["", "k"]), ARGS
    )
    to_exchange = st.builds(
        BindingDef, VHOSTS, EXCHANGES, st.just("exchange"), EXCHANGES, st.just("k"), ARGS
    )
    return to_queue | to_exchange


class JournalMachine(RuleBasedStateMachine):
    """Journal + DictStore must always converge on the Reference."""

    def __init__(self) -> None:
        super().__init__()
        self.journal = Journal()
        self.reference = Reference()
        self.store = DictStore()
        self.next_id = 1
        self.waiting: set[int] = set()

    def both(self, method: str, *args: Any) -> None:
        getattr(self.journal, method)(*args)
        getattr(self.reference, method)(*args)

    @rule(d=st.builds(ExchangeDef, VHOSTS, EXCHANGES, st.just("topic"), BOOLS, BOOLS, ARGS))
    def put_exchange(self, d: ExchangeDef) -> None:
        self.both("put_exchange", d)

    @rule(vhost=VHOSTS, name=EXCHANGES)
    def delete_exchange(self, vhost: str, name: str) -> None:
        self.both("delete_exchange", vhost, name)

    @rule(d=st.builds(QueueDef, VHOSTS, QUEUES, st.booleans(), ARGS))
    def put_queue(self, d: QueueDef) -> None:
        self.both("put_queue", d)

    @rule(vhost=VHOSTS, name=QUEUES)
    def delete_queue(self, vhost: str, name: str) -> None:
        self.both("delete_queue", vhost, name)

    @rule(d=binding_defs())
    def put_binding(self, d: BindingDef) -> None:
        self.both("put_binding", d)

    @rule(d=binding_defs())
    def delete_binding(self, d: BindingDef) -> None:
        self.both("delete_binding", d)

    @precondition(lambda self: self.reference.queues)
    @rule(data=st.data(), record=RECORDS)
    def insert_message(self, data: st.DataObject, record: MessageRecord) -> None:
        queue = data.draw(st.sampled_from(sorted(self.reference.queues)))
        free = [s for s in range(6) if (queue, s) not in self.reference.messages]
        if not free:
            return
        seq = data.draw(st.sampled_from(free))
        self.reference.insert_message(queue, seq, record)  # snapshot before the journal
        batch_id = self.journal.insert_message(queue, seq, record)
        assert batch_id == self.journal.open_batch_id
        self.waiting.add(batch_id)

    @rule(vhost=VHOSTS, name=QUEUES, seq=SEQS, count=st.integers(1, 9))
    def mark_delivered(self, vhost: str, name: str, seq: int, count: int) -> None:
        self.both("mark_delivered", (vhost, name), seq, count)

    @rule(vhost=VHOSTS, name=QUEUES, seq=SEQS)
    def delete_message(self, vhost: str, name: str, seq: int) -> None:
        self.both("delete_message", (vhost, name), seq)

    @rule()
    def barrier(self) -> None:
        self.waiting.add(self.journal.barrier())

    @rule()
    def take_and_apply(self) -> None:
        pending = self.journal.pending
        batch = self.journal.take_batch()
        assert (batch is not None) == pending
        if batch is None:
            return
        assert batch.id == self.next_id
        self.next_id += 1
        assert batch.ops or batch.id in self.waiting, "an op-less batch only for a waiter"
        self.waiting.discard(batch.id)
        self.store.apply(batch)
        assert not self.journal.pending

    @invariant()
    def converged_when_nothing_pending(self) -> None:
        if not self.journal.pending:
            assert self.store == self.reference
            assert not self.waiting

    def teardown(self) -> None:
        self.take_and_apply()
        assert self.store == self.reference


JournalMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=50, deadline=None)
TestJournalMachine = JournalMachine.TestCase
