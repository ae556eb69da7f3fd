"""amqpd.wire.properties: editing a raw content header changes only what the broker means to change;
every other byte stays exactly as the publisher sent it."""

from __future__ import annotations

import datetime
import struct
from decimal import Decimal

import pytest
from pamqp import commands, encode
from pamqp.header import ContentHeader

from amqpd.wire.properties import (
    EXPIRATION,
    HEADERS,
    REPLY_TO,
    RawProperties,
    encode_broker_value,
    with_delivery_count,
)

UTC = datetime.UTC


def entry(key: str, typed_value: bytes) -> bytes:
    """One raw table entry: key shortstr + type letter and value."""
    return encode.short_string(key) + typed_value


# Publisher entries the broker must never re-encode: pamqp would turn the double into a float,
# the sub-second timestamp into whole seconds, etc. Built by hand, byte for byte.
PUBLISHER_ENTRIES = [
    entry("double", b"d" + struct.pack(">d", 0.1)),
    entry("float", b"f" + struct.pack(">f", 1.5)),
    entry("stamp", b"T" + struct.pack(">Q", 1_700_000_000)),
    entry("decimal", encode.encode_table_value(Decimal("3.14"))),
    entry("bytes", b"x" + struct.pack(">I", 3) + b"\x00\xff\x10"),
    entry("short", b"s" + struct.pack(">h", -2)),
    entry("nested", encode.encode_table_value({"a": [1, "b", 2.5]})),
    entry("BCC", encode.encode_table_value(["secret"])),
    entry("text", encode.encode_table_value("héllo")),
]


def table(entries: list[bytes]) -> bytes:
    body = b"".join(entries)
    return struct.pack(">I", len(body)) + body


def header(fields: dict[int, bytes], body_size: int = 7) -> bytes:
    """A basic content header payload from raw property fields (bit -> bytes)."""
    flags = 0
    for bit in fields:
        flags |= 1 << bit
    parts = [struct.pack(">HHQH", 60, 0, body_size, flags)]
    parts += [fields[bit] for bit in sorted(fields, reverse=True)]
    return b"".join(parts)


def full_fields(entries: list[bytes]) -> dict[int, bytes]:
    s = encode.short_string
    return {
        15: s("application/json"),
        14: s("gzip"),
        HEADERS: table(entries),
        12: b"\x02",
        11: b"\x05",
        10: s("corr-1"),
        REPLY_TO: s("replies"),
        EXPIRATION: s("60000"),
        7: s("msg-1"),
        6: struct.pack(">Q", 1_700_000_123),
        5: s("type"),
        4: s("guest"),
        3: s("app"),
        2: s(""),
    }


def test_header_builder_matches_pamqp() -> None:
    """The hand-made headers in these tests are valid content headers."""
    props = commands.Basic.Properties(
        content_type="text/plain", headers={"k": "v"}, delivery_mode=2, expiration="10"
    )
    pamqp_made = ContentHeader(0, 7, props).marshal()
    fields = {
        15: encode.short_string("text/plain"),
        HEADERS: table([entry("k", encode.encode_table_value("v"))]),
        12: b"\x02",
        EXPIRATION: encode.short_string("10"),
    }
    assert header(fields) == pamqp_made


KEYS = ["double", "float", "stamp", "decimal", "bytes", "short", "nested", "BCC", "text"]


@pytest.mark.parametrize(
    ("fields", "keys"),
    [
        ({}, []),
        ({HEADERS: table([])}, []),
        ({HEADERS: table(PUBLISHER_ENTRIES)}, KEYS),
        (full_fields(PUBLISHER_ENTRIES), KEYS),
    ],
    ids=["no-properties", "empty-table", "headers-only", "every-property"],
)
def test_split_and_encode_is_byte_identical(fields: dict[int, bytes], keys: list[str]) -> None:
    raw = header(fields)
    props = RawProperties(raw)
    assert props.encode() == raw
    assert props.fields == fields
    assert props.table_entries() == list(zip(keys, PUBLISHER_ENTRIES, strict=False))


def test_edit_headers_puts_new_entries_first_and_keeps_the_rest_byte_for_byte() -> None:
    fields = full_fields(PUBLISHER_ENTRIES)
    props = RawProperties(header(fields))
    props.edit_headers({"x-delivery-count": 3, "x-new": "v"})
    added = [
        entry("x-delivery-count", b"l" + struct.pack(">q", 3)),
        entry("x-new", b"S" + struct.pack(">I", 1) + b"v"),
    ]
    assert props.encode() == header({**fields, HEADERS: table(added + PUBLISHER_ENTRIES)})


def test_edit_headers_removes_and_replaces_only_the_named_entries() -> None:
    fields = full_fields(
        [entry("x-delivery-count", b"l" + struct.pack(">q", 1)), *PUBLISHER_ENTRIES]
    )
    props = RawProperties(header(fields))
    props.edit_headers({"x-delivery-count": 2}, remove=("BCC", "absent"))
    kept = [e for e in PUBLISHER_ENTRIES if not e.startswith(b"\x03BCC")]
    assert len(kept) == len(PUBLISHER_ENTRIES) - 1
    expected = table([entry("x-delivery-count", b"l" + struct.pack(">q", 2)), *kept])
    assert props.encode() == header({**fields, HEADERS: expected})


def test_edit_headers_adds_a_table_only_when_needed() -> None:
    fields = {15: encode.short_string("text/plain"), 12: b"\x01"}
    props = RawProperties(header(fields))
    props.edit_headers(remove=("BCC",))
    assert props.encode() == header(fields)  # nothing to remove, no table added
    props.edit_headers({"x-delivery-count": 1})
    added = table([entry("x-delivery-count", b"l" + struct.pack(">q", 1))])
    assert props.encode() == header({**fields, HEADERS: added})


def test_shortstr_properties_are_read_set_and_removed() -> None:
    fields = full_fields(PUBLISHER_ENTRIES)
    props = RawProperties(header(fields))
    assert props.get_shortstr(EXPIRATION) == "60000"
    assert props.get_shortstr(REPLY_TO) == "replies"
    props.set_shortstr(EXPIRATION, None)
    props.set_shortstr(REPLY_TO, "amq.rabbitmq.reply-to.abc")
    assert props.get_shortstr(EXPIRATION) is None
    expected = {k: v for k, v in fields.items() if k != EXPIRATION}
    expected[REPLY_TO] = encode.short_string("amq.rabbitmq.reply-to.abc")
    assert props.encode() == header(expected)
    props.set_shortstr(EXPIRATION, None)  # removing an absent one is fine
    assert props.encode() == header(expected)


def test_header_value_decodes_one_entry() -> None:
    props = RawProperties(header({HEADERS: table(PUBLISHER_ENTRIES)}))
    assert props.header_value("double") == 0.1
    assert props.header_value("short") == -2
    assert props.header_value("nested") == {"a": [1, "b", 2.5]}
    assert props.header_value("stamp") == datetime.datetime.fromtimestamp(1_700_000_000, UTC)
    assert props.header_value("missing") is None
    assert RawProperties(header({})).header_value("x") is None


def test_with_delivery_count_sets_a_long_and_decodes_with_pamqp() -> None:
    props = commands.Basic.Properties(
        content_type="text/plain", headers={"app": "v", "n": 7}, message_id="m"
    )
    raw = ContentHeader(0, 7, props).marshal()
    once = with_delivery_count(raw, 1)
    twice = with_delivery_count(once, 2)  # replaced, not duplicated
    decoded = ContentHeader()
    decoded.unmarshal(twice)
    assert decoded.properties.headers == {"x-delivery-count": 2, "app": "v", "n": 7}
    assert (decoded.properties.content_type, decoded.properties.message_id) == ("text/plain", "m")
    assert decoded.body_size == 7
    first = RawProperties(twice).table_entries()[0]
    assert first == ("x-delivery-count", entry("x-delivery-count", b"l" + struct.pack(">q", 2)))
    assert twice.endswith(raw[-len(encode.short_string("m")) :])


def test_broker_values_are_typed_like_rabbitmq() -> None:
    stamp = datetime.datetime.fromtimestamp(1_700_000_000, UTC)
    value = [{"count": 1, "reason": "expired", "time": stamp, "keys": ["a"], "ok": True}]
    encoded = encode_broker_value(value)
    death = (
        entry("count", b"l" + struct.pack(">q", 1))
        + entry("reason", b"S" + struct.pack(">I", 7) + b"expired")
        + entry("time", b"T" + struct.pack(">Q", 1_700_000_000))
        + entry("keys", b"A" + struct.pack(">I", 6) + b"S" + struct.pack(">I", 1) + b"a")
        + entry("ok", b"t\x01")
    )
    assert encoded == b"A" + struct.pack(">I", len(death) + 5) + b"F" + table([death])
    assert encode_broker_value(-(2**40)) == b"l" + struct.pack(">q", -(2**40))
