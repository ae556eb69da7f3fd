"""The records between workers (amqpd/wire/forwarding.py): what goes in comes out, however
the stream is cut, and a corrupt stream is refused rather than misread."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp.commands import Basic
from pamqp.header import ContentHeader

from amqpd.model.broker import Broker
from amqpd.model.forwarded import InboundLink
from amqpd.wire import codec, content_header
from amqpd.wire.forwarding import (
    NO_EXPIRY,
    NO_PRIORITY,
    PERSISTENT,
    PROMISED,
    Forwarded,
    ForwardingError,
    RecordReader,
    Settled,
    TopologyChange,
    encode_forward,
    encode_settled,
    encode_topology,
    encode_vhost,
    queue_names,
)

RECORDS = settings(deadline=None, max_examples=100, suppress_health_check=[HealthCheck.too_slow])
NAME = st.text(max_size=40).filter(lambda name: len(name.encode()) <= 255)


def shortstr(value: str) -> bytes:
    return codec.encode_shortstr(value)


def raw_header(properties: Basic.Properties, body_size: int) -> bytes:
    """A content header's payload as a publisher sends it (pamqp: the reference encoder)."""
    return ContentHeader(0, body_size, properties).marshal()


def forward(out: bytearray, publish_id: int, queues: list[str], body: bytes, **kw: object) -> None:
    header = raw_header(Basic.Properties(), len(body))
    fields: dict[str, object] = {
        "flags": 0,
        "priority": NO_PRIORITY,
        "expiration_ms": NO_EXPIRY,
        "exchange_raw": shortstr("amq.fanout"),
        "routing_key_raw": shortstr("rk"),
        "expiration": None,
        "headers_raw": None,
        "header": header,
    }
    fields.update(kw)
    names = queue_names(queues)
    encode_forward(out, publish_id, queue_count=len(queues), names=names, body=body, **fields)  # type: ignore[arg-type]


def read_all(reader: RecordReader) -> list[Forwarded | Settled | TopologyChange]:
    records: list[Forwarded | Settled | TopologyChange] = []
    while (record := reader.next_record()) is not None:
        records.append(record)
    return records


def test_a_forwarded_publish_carries_what_the_owner_needs_to_enqueue_it() -> None:
    body = b"x" * 100
    properties = Basic.Properties(
        delivery_mode=2, priority=7, expiration="60000", headers={"k": "v", "n": 1}
    )
    header = raw_header(properties, len(body))
    peek = content_header.peek_header(header)
    out = bytearray()
    encode_forward(
        out,
        1,
        PERSISTENT | PROMISED,
        peek.priority if peek.priority is not None else NO_PRIORITY,
        60000,
        3,
        queue_names(["q1", "q2", "ünïcode"]),
        shortstr("amq.direct"),
        shortstr("key"),
        peek.expiration,
        peek.headers_raw,
        header,
        body,
    )
    reader = RecordReader()
    reader.feed(bytes(out))
    [record] = read_all(reader)
    assert isinstance(record, Forwarded)
    assert record.publish_id == 1
    assert record.flags == PERSISTENT | PROMISED
    assert record.priority == 7
    assert record.expiration_ms == 60000
    assert record.queues == ["q1", "q2", "ünïcode"]
    assert record.exchange_raw == shortstr("amq.direct")
    assert record.routing_key_raw == shortstr("key")
    assert record.expiration == "60000"
    assert record.headers_raw == peek.headers_raw
    assert content_header.decode_headers_table(record.headers_raw or b"") == {"k": "v", "n": 1}
    assert record.header == header  # raw, byte for byte: consumers get what was published
    assert record.body == body
    assert reader.buffered == 0


def test_absent_and_empty_optional_fields_stay_apart() -> None:
    out = bytearray()
    forward(out, 1, ["q"], b"", expiration=None, headers_raw=None)
    forward(out, 2, ["q"], b"", expiration="", headers_raw=b"")
    reader = RecordReader()
    reader.feed(bytes(out))
    first, second = read_all(reader)
    assert isinstance(first, Forwarded) and isinstance(second, Forwarded)
    assert (first.expiration, first.headers_raw, first.body) == (None, None, b"")
    assert (second.expiration, second.headers_raw) == ("", b"")


def test_a_vhost_record_names_the_vhost_of_the_records_after_it() -> None:
    out = bytearray()
    forward(out, 1, ["q"], b"default")
    encode_vhost(out, "orders")
    encode_vhost(out, "ünï/v")
    forward(out, 2, ["q"], b"in v")
    forward(out, 3, ["q"], b"in v too")
    encode_vhost(out, "/")
    forward(out, 4, ["q"], b"back in /")
    data = bytes(out)
    reader = RecordReader()
    seen: list[tuple[str, bytes]] = []
    for i in range(len(data)):  # a byte at a time: a split VHOST record waits too
        reader.feed(data[i : i + 1])
        while (record := reader.next_record()) is not None:
            assert isinstance(record, Forwarded)
            seen.append((reader.vhost, record.body))
    assert seen == [
        ("", b"default"),
        ("ünï/v", b"in v"),
        ("ünï/v", b"in v too"),
        ("/", b"back in /"),
    ]
    bad = RecordReader()
    bad.feed(b"\x00\x00\x00\x02\x03\xff")
    with pytest.raises(ForwardingError, match="not UTF-8"):
        bad.next_record()


def test_a_topology_change_takes_its_place_among_the_publishes() -> None:
    out = bytearray()
    encode_vhost(out, "spread")
    forward(out, 1, ["q"], b"before")
    encode_topology(out, 2, b"\x80change")
    forward(out, 3, ["q"], b"after")
    reader = RecordReader()
    for i in range(len(out)):  # a byte at a time: never a record before all of it arrived
        reader.feed(bytes(out[i : i + 1]))
        if i < len(out) - 1:
            assert all(not isinstance(r, Forwarded) or r.body != b"after" for r in read_all(reader))
    reader = RecordReader()
    reader.feed(bytes(out))
    first, change, last = read_all(reader)
    assert isinstance(change, TopologyChange)
    assert (change.publish_id, change.payload) == (2, b"\x80change")
    assert isinstance(first, Forwarded) and isinstance(last, Forwarded)
    assert (first.publish_id, last.publish_id, reader.vhost) == (1, 3, "spread")


def test_a_settled_answer_lists_the_refused_ids() -> None:
    out = bytearray()
    encode_settled(out, 500, [])
    encode_settled(out, 900, [501, 777])
    reader = RecordReader()
    reader.feed(bytes(out))
    first, second = read_all(reader)
    assert isinstance(first, Settled) and isinstance(second, Settled)
    assert (first.through, first.refused) == (500, [])
    assert (second.through, second.refused) == (900, [501, 777])


def test_no_record_before_all_of_its_bytes_arrived() -> None:
    out = bytearray()
    forward(out, 1, ["a", "b"], b"body" * 50)
    encode_settled(out, 1, [1])
    data = bytes(out)
    reader = RecordReader()
    got: list[Forwarded | Settled] = []
    for i in range(len(data)):  # a byte at a time
        reader.feed(data[i : i + 1])
        record = reader.next_record()
        if record is not None:
            got.append(record)
            assert reader.next_record() is None
    assert [type(record) for record in got] == [Forwarded, Settled]
    assert isinstance(got[0], Forwarded) and got[0].body == b"body" * 50
    assert reader.buffered == 0


@RECORDS
@given(
    st.lists(
        st.one_of(
            st.tuples(st.lists(NAME, min_size=1, max_size=5), st.binary(max_size=300)),
            st.tuples(st.integers(0, 2**64 - 1), st.lists(st.integers(0, 2**64 - 1))),
        ),
        min_size=1,
        max_size=12,
    ),
    st.randoms(use_true_random=False),
)
def test_records_survive_any_cut_of_the_stream(
    items: list[tuple[list[str], bytes] | tuple[int, list[int]]], rnd: random.Random
) -> None:
    out = bytearray()
    expected: list[tuple[object, ...]] = []
    for publish_id, item in enumerate(items, 1):
        first, second = item
        if isinstance(first, list):
            assert isinstance(second, bytes)
            forward(out, publish_id, first, second)
            expected.append(("forward", publish_id, first, second))
        else:
            assert isinstance(second, list)
            encode_settled(out, first, second)
            expected.append(("settled", first, second))
    data = bytes(out)
    reader = RecordReader()
    got: list[tuple[object, ...]] = []
    pos = 0
    while pos < len(data):
        step = rnd.randint(1, 64)
        reader.feed(data[pos : pos + step])
        pos += step
        for record in read_all(reader):
            if isinstance(record, Forwarded):
                got.append(("forward", record.publish_id, record.queues, record.body))
            else:
                got.append(("settled", record.through, record.refused))
    assert got == expected
    assert reader.buffered == 0


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (b"\x00\x00\x00\x01\x09", "unknown record kind 9"),
        (b"\x00\x00\x00\x00\x01", "record length 0 out of range"),
        (b"\x80\x00\x00\x00\x01", "out of range"),
        (b"\x00\x00\x00\x02\x01\x00", "truncated forward record"),
        # a settled record that claims two refused ids but holds one
        (b"\x00\x00\x00\x15\x02" + b"\x00" * 7 + b"\x05\x00\x00\x00\x02" + b"\x00" * 8, "cannot"),
    ],
)
def test_a_corrupt_stream_is_refused(data: bytes, text: str) -> None:
    reader = RecordReader()
    reader.feed(data)
    with pytest.raises(ForwardingError, match=text):
        reader.next_record()


def test_fields_that_overrun_the_record_are_refused() -> None:
    out = bytearray()
    forward(out, 1, ["queue"], b"")
    data = bytearray(out)
    data[3] -= 10  # the length now ends inside the header: the fields overrun it
    reader = RecordReader()
    reader.feed(bytes(data) + b"\x00" * 64)  # a following record's bytes to misread
    with pytest.raises(ForwardingError, match=r"overrun|truncated"):
        reader.next_record()


def test_a_queue_name_longer_than_a_short_string_is_refused_at_the_sender() -> None:
    assert queue_names(["q" * 255, ""]) == b"\xff" + b"q" * 255 + b"\x00"
    with pytest.raises(ValueError, match="at most 255 bytes"):
        queue_names(["q", "é" * 128])


def test_a_queue_name_that_is_not_utf8_is_refused_where_it_is_read() -> None:
    out = bytearray()
    forward(out, 1, ["ok"], b"body")
    data = bytes(out).replace(b"\x02ok", b"\x02\xff\xfe")  # the name, no longer UTF-8
    reader = RecordReader()
    reader.feed(data)
    record = reader.next_record()
    assert isinstance(record, Forwarded) and record.body == b"body"  # framing still sound
    with pytest.raises(ForwardingError, match="bad queue names"):
        _ = record.queues
    broker = Broker()
    with pytest.raises(ForwardingError, match="bad queue names"):
        InboundLink().accept(record, broker.vhosts["/"], None, broker.batch_waits, set())


@pytest.mark.parametrize(
    "value",
    [0, 1, 0xFFFFFFFF, 1 << 32, (1 << 63) - 1, -1, -2, -(1 << 32), -(1 << 32) - 1, -(1 << 63)],
)
def test_64_bit_fields_keep_their_value_at_every_boundary(value: int) -> None:
    """The reader's fast paths (high word 0 or all ones) and its general path agree with
    struct's encoding, for the signed expiration and the unsigned publish id."""
    out = bytearray()
    forward(out, value & ((1 << 64) - 1), ["q"], b"body", expiration_ms=value)
    reader = RecordReader()
    reader.feed(bytes(out))
    [record] = read_all(reader)
    assert isinstance(record, Forwarded)
    assert record.expiration_ms == value
    assert record.publish_id == value & ((1 << 64) - 1)
