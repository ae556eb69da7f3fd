"""The owner's end of a forwarding link (amqpd/model/forwarded.py): a forwarded publish is
enqueued under the same rules as a local one, and answered only once it is settled: after
its storage batch for a persistent message in a durable queue, at once otherwise."""

from __future__ import annotations

from typing import Any

import pytest
from pamqp.commands import Basic
from pamqp.header import ContentHeader

from amqpd.engine.content import PendingPublish
from amqpd.model.auth import Authz, Permission
from amqpd.model.broker import Broker
from amqpd.model.forwarded import InboundLink, forwarded_message
from amqpd.wire import codec
from amqpd.wire.forwarding import (
    NO_EXPIRY,
    NO_PRIORITY,
    PERSISTENT,
    PROMISED,
    Forwarded,
    RecordReader,
    Settled,
    encode_forward,
    queue_names,
)
from persistence.journal import Journal


def record(
    publish_id: int, queues: list[str], persistent: bool = True, promised: bool = True
) -> Forwarded:
    """A FORWARD record as the publishing worker would write it, read back."""
    properties = Basic.Properties(delivery_mode=2 if persistent else 1)
    body = f"m{publish_id}".encode()
    header = ContentHeader(0, len(body), properties).marshal()
    out = bytearray()
    flags = (PERSISTENT if persistent else 0) | (PROMISED if promised else 0)
    encode_forward(
        out, publish_id, flags, NO_PRIORITY, NO_EXPIRY, len(queues), queue_names(queues),
        codec.encode_shortstr(""), codec.encode_shortstr(queues[0]), None, None, header, body,
    )  # fmt: skip
    reader = RecordReader()
    reader.feed(bytes(out))
    forwarded = reader.next_record()
    assert isinstance(forwarded, Forwarded)
    return forwarded


def answer(link: InboundLink) -> tuple[int, list[int]] | None:
    out = bytearray()
    if not link.take_answer(out):
        assert not out
        return None
    reader = RecordReader()
    reader.feed(bytes(out))
    settled = reader.next_record()
    assert isinstance(settled, Settled) and reader.next_record() is None
    return settled.through, settled.refused


class Owner:
    """A broker with a journal and three queues in "/"."""

    def __init__(self) -> None:
        self.journal = Journal()
        self.broker = Broker(journal=self.journal)
        self.vhost = self.broker.add_vhost("/")
        declare = self.vhost.declare_queue
        declare("durable", False, True, False, False, {}, None)
        declare("transient", False, False, False, False, {}, None)
        capped: dict[str, Any] = {"x-max-length": 1, "x-overflow": "reject-publish"}
        declare("capped", False, False, False, False, capped, None)
        self.link = InboundLink()
        self.flow: set[Any] = set()

    def accept(self, forwarded: Forwarded) -> list[str] | None:
        queues = self.link.accept(
            forwarded, self.vhost, self.journal, self.broker.batch_waits, self.flow
        )
        return None if queues is None else [queue.name for queue in queues]

    def commit(self) -> None:
        batch = self.journal.take_batch()
        assert batch is not None
        self.broker.batch_committed(batch.id)

    def fail(self) -> None:
        batch = self.journal.take_batch()
        assert batch is not None
        self.broker.batch_failed(batch.id, OSError("disk full"), [("/", "durable")])

    def ready(self, name: str) -> list[bytes]:
        return [entry.message.payload for entry in self.vhost.queues[name].ready]


def test_a_persistent_message_is_answered_only_after_its_batch_is_written() -> None:
    owner = Owner()
    assert owner.accept(record(1, ["durable", "transient"])) == ["durable", "transient"]
    assert owner.accept(record(2, ["transient"], persistent=False)) == ["transient"]
    assert owner.ready("durable") == [b"m1"] and owner.ready("transient") == [b"m1", b"m2"]
    assert answer(owner.link) is None  # 1 waits for its batch, and 2 is behind it
    owner.commit()
    assert answer(owner.link) == (2, [])
    assert answer(owner.link) is None  # nothing new
    assert owner.accept(record(3, ["transient"], persistent=False)) == ["transient"]
    assert answer(owner.link) == (3, [])  # final at enqueue


def test_a_plain_publish_is_not_answered_on_its_own_nor_waits_for_its_batch() -> None:
    # nobody waits for it (no confirm, no commit-ok): no SETTLED record, no wake-up there
    owner = Owner()
    assert owner.accept(record(1, ["durable"], promised=False)) == ["durable"]
    assert owner.accept(record(2, ["capped"], persistent=False, promised=False)) == ["capped"]
    assert owner.accept(record(3, ["capped"], persistent=False, promised=False)) is None
    assert not owner.link.answer_due and answer(owner.link) is None
    assert owner.accept(record(4, ["transient"], persistent=False)) == ["transient"]
    assert owner.link.answer_due
    assert answer(owner.link) == (4, [])  # covers 1-3: none of them is waited for
    owner.link.accept_change(5)  # a topology change always is (a held reply)
    assert answer(owner.link) == (5, [])


def test_a_queue_that_refuses_the_message_makes_it_refused_and_in_no_queue() -> None:
    owner = Owner()
    assert owner.accept(record(1, ["capped"], persistent=False)) == ["capped"]
    assert owner.accept(record(2, ["transient", "capped"], persistent=False)) is None
    assert owner.ready("transient") == []  # all or none, as for a local publish
    assert answer(owner.link) == (2, [2])


def test_a_queue_deleted_meanwhile_is_skipped_and_the_publish_confirmed() -> None:
    owner = Owner()
    assert owner.accept(record(1, ["gone", "transient"], persistent=False)) == ["transient"]
    assert owner.accept(record(2, ["gone"])) == []
    assert answer(owner.link) == (2, [])


def test_a_failed_batch_refuses_what_waited_for_it() -> None:
    owner = Owner()
    owner.accept(record(1, ["durable"]))
    owner.accept(record(2, ["transient"], persistent=False))
    owner.fail()
    assert answer(owner.link) == (2, [1])
    assert owner.ready("durable") == []  # dropped: its publisher gets a nack


def test_ids_must_ascend() -> None:
    owner = Owner()
    owner.accept(record(5, ["transient"], persistent=False))
    with pytest.raises(ValueError, match="after 5"):
        owner.accept(record(5, ["transient"], persistent=False))


def test_the_message_is_the_one_the_publishing_worker_built() -> None:
    properties = Basic.Properties(
        delivery_mode=2, priority=3, expiration="5000", headers={"h": "v"}, message_id="id"
    )
    body = b"payload"
    header = ContentHeader(0, len(body), properties).marshal()
    publish = PendingPublish(
        codec.decode_publish(
            codec.encode_method(1, Basic.Publish(exchange="amq.topic", routing_key="a.b"))[7:-1]
        ),
        Broker().add_vhost("/").get_exchange("amq.topic"),
    )
    assert publish.add_header(header, 1 << 20, Authz("guest", "/", Permission())) is None
    publish.add_body(body)
    local = publish.message()
    assert local.priority is not None and local.expiration is not None
    out = bytearray()
    encode_forward(
        out, 1, PERSISTENT, local.priority, 5000, 1, queue_names(["q"]), local.exchange_raw,
        local.routing_key_raw, local.expiration, local.headers_raw, local.header, local.payload,
    )  # fmt: skip
    reader = RecordReader()
    reader.feed(bytes(out))
    forwarded = reader.next_record()
    assert isinstance(forwarded, Forwarded)
    remote = forwarded_message(forwarded)
    for field in (
        "exchange",
        "routing_key",
        "exchange_raw",
        "routing_key_raw",
        "header",
        "body",
        "persistent",
        "priority",
        "expiration",
        "headers_raw",
    ):
        assert getattr(remote, field) == getattr(local, field), field
    assert remote.headers == {"h": "v"}


def test_each_message_keeps_its_own_exchange_and_routing_key_in_a_row() -> None:
    """The owner keeps the last record's decoded exchange and routing key (publishes in a
    row share them): a record naming others gets its own."""
    owner = Owner()
    names = [("amq.direct", "a"), ("amq.direct", "a"), ("amq.direct", "b"), ("x", "b"), ("", "")]
    for publish_id, (exchange, key) in enumerate(names, start=1):
        out = bytearray()
        encode_forward(
            out, publish_id, 0, NO_PRIORITY, NO_EXPIRY, 1, queue_names(["transient"]),
            codec.encode_shortstr(exchange), codec.encode_shortstr(key), None, None,
            ContentHeader(0, 1, Basic.Properties()).marshal(), b"m",
        )  # fmt: skip
        reader = RecordReader()
        reader.feed(bytes(out))
        forwarded = reader.next_record()
        assert isinstance(forwarded, Forwarded)
        owner.accept(forwarded)
    ready = owner.vhost.queues["transient"].ready
    assert [(entry.message.exchange, entry.message.routing_key) for entry in ready] == names
