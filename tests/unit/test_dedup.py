"""Queue deduplication (amqpd/model/dedup.py) and its journal operations; no sockets."""

from __future__ import annotations

from typing import Any

import pika
import pytest

from amqpd.model.dedup import Deduplicator, parse_dedup_arguments
from amqpd.model.message import Message
from amqpd.model.queue_args import InvalidQueueArgument
from amqpd.wire import content_header
from persistence.journal import Journal
from persistence.records import OpKind

Q = ("/", "orders")


def message(message_id: str | None = None, headers: dict[str, Any] | None = None) -> Message:
    props = pika.BasicProperties(message_id=message_id, headers=headers, delivery_mode=2)
    header = b"".join(props.encode())  # the property flags and values
    raw = b"\x00\x3c\x00\x00" + (5).to_bytes(8, "big") + header
    peek = content_header.peek_header(raw)
    return Message("", "q", b"", b"\x01q", raw, b"hello", True, None, None, peek.headers_raw)


class RecordingJournal:
    """A Journal that counts barriers: wraps one (a compiled Journal cannot be subclassed)."""

    def __init__(self) -> None:
        self.journal = Journal()
        self.barriers = 0

    def barrier(self) -> int:
        self.barriers += 1
        return self.journal.barrier()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.journal, name)


def test_arguments() -> None:
    assert parse_dedup_arguments({}) is None
    assert parse_dedup_arguments({"x-message-deduplication": False}) is None
    settings = parse_dedup_arguments({"x-message-deduplication": True, "x-deduplication-window": 5})
    assert settings is not None and settings.window == 5 and settings.header is None
    header = parse_dedup_arguments(
        {"x-message-deduplication": True, "x-deduplication-header": b"order-id"}
    )
    assert header is not None and header.header == "order-id"
    for bad in (
        {"x-message-deduplication": "yes"},
        {"x-message-deduplication": True, "x-deduplication-window": 0},
        {"x-message-deduplication": True, "x-deduplication-window": "5"},
        {"x-message-deduplication": True, "x-deduplication-header": 7},
    ):
        with pytest.raises(InvalidQueueArgument):
            parse_dedup_arguments(bad)


def test_duplicates_are_refused_within_the_window_and_journaled() -> None:
    settings = parse_dedup_arguments({"x-message-deduplication": True, "x-deduplication-window": 3})
    assert settings is not None
    dedup = Deduplicator(settings, Q)
    journal = RecordingJournal()
    assert [dedup.admit(message(f"m{i}"), journal) for i in range(3)] == [True] * 3
    assert not dedup.admit(message("m1"), journal)  # duplicate
    assert journal.barriers == 1  # its confirm waits for the original's batch
    assert dedup.admit(message(None), journal)  # no id: always accepted
    assert dedup.admit(message("m3"), journal)  # evicts m0 (window 3)
    assert dedup.admit(message("m0"), journal)  # beyond the window: accepted again
    assert len(dedup) == 3
    batch = journal.take_batch()
    assert batch is not None
    ops = dict(batch.ops)
    assert ops[OpKind.FORGET_IDS] == [("/", "orders", 1)]  # m0 (pos 0), then m1 (pos 1)
    # forget dropped the pending ids at or below pos 1 from the batch
    assert ops[OpKind.REMEMBER_ID] == [
        ("/", "orders", 2, b"m2"),
        ("/", "orders", 3, b"m3"),
        ("/", "orders", 4, b"m0"),
    ]


def test_header_key_and_restore() -> None:
    settings = parse_dedup_arguments(
        {"x-message-deduplication": True, "x-deduplication-header": "order"}
    )
    assert settings is not None
    dedup = Deduplicator(settings, Q)
    assert dedup.key(message("ignored", {"order": "o-1"})) == b"o-1"
    assert dedup.key(message("ignored", {"order": 42})) == b"42"
    assert dedup.key(message("ignored")) is None
    dedup.restore([(7, b"o-1"), (9, b"o-2")])
    assert not dedup.admit(message(None, {"order": "o-2"}), None)
    assert dedup.admit(message(None, {"order": "o-3"}), None)
    assert dedup.next_pos == 11


def test_delete_queue_drops_pending_ids() -> None:
    journal = Journal()
    journal.remember_id(Q, 0, b"m0")
    journal.forget_ids(Q, 0)
    journal.delete_queue(*Q)
    batch = journal.take_batch()
    assert batch is not None
    assert [kind for kind, _ in batch.ops] == [OpKind.DELETE_QUEUE]
