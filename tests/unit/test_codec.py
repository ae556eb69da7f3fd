"""amqpd/codec.py's hand-written fast paths, checked byte for byte against pamqp.

The broker decodes Basic.Publish and encodes Deliver / Get-Ok / Ack / Nack and content frames
itself, and peeks into raw content headers; pamqp is the reference for every one of them.
"""

from __future__ import annotations

import datetime
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import commands
from pamqp import frame as pamqp_frame
from pamqp.body import ContentBody
from pamqp.header import ContentHeader
from pamqp.heartbeat import Heartbeat

from amqpd.wire import codec, content_header
from amqpd.wire.errors import FRAME_ERROR, SYNTAX_ERROR, AMQPError

CODEC = settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])

# ---------------------------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------------------------
TEXT = st.characters(exclude_categories=("Cs",))  # any code point UTF-8 can encode


def shortstr_text(max_chars: int = 63) -> st.SearchStrategy[str]:
    """Text whose UTF-8 encoding fits a shortstr (at most 4 bytes per character)."""
    return st.text(TEXT, max_size=max_chars)


channels = st.integers(0, 0xFFFF)
delivery_tags = st.integers(0, 2**63 - 1)  # pamqp encodes long-long as signed
names = shortstr_text()
field_values: st.SearchStrategy[Any] = st.recursive(
    st.one_of(
        st.booleans(),
        st.integers(-(2**31), 2**31 - 1),
        st.text(TEXT, max_size=20),
        st.none(),
    ),
    lambda children: st.dictionaries(st.text("abcxyz-_", max_size=8), children, max_size=3),
    max_leaves=6,
)
field_tables = st.dictionaries(
    st.text("abcdefghij-_.", min_size=1, max_size=12), field_values, max_size=5
)


def unvalidated(cls: type) -> type:
    """A pamqp method class that skips its domain validation (names like 'é' or 200-byte
    exchange names are legal on the wire; pamqp's own validation is stricter)."""
    return type(cls.__name__, (cls,), {"validate": lambda self: None})


Publish = unvalidated(commands.Basic.Publish)
Deliver = unvalidated(commands.Basic.Deliver)
GetOk = unvalidated(commands.Basic.GetOk)


@st.composite
def basic_properties(draw: st.DrawFn, up_to_expiration: bool = False) -> commands.Basic.Properties:
    """Random Basic.Properties (each property present or absent)."""

    def maybe(strategy: st.SearchStrategy[Any]) -> Any:
        return draw(st.none() | strategy)

    options: dict[str, Any] = {
        "content_type": maybe(names),
        "content_encoding": maybe(names),
        "headers": maybe(field_tables),
        "delivery_mode": maybe(st.sampled_from([1, 2])),
        "priority": maybe(st.integers(0, 255)),
        "correlation_id": maybe(names),
        "reply_to": maybe(names),
        "expiration": maybe(st.integers(0, 10**9).map(str)),
    }
    if not up_to_expiration:
        options |= {
            "message_id": maybe(names),
            "timestamp": maybe(
                st.datetimes(
                    min_value=datetime.datetime(1970, 1, 2),
                    max_value=datetime.datetime(2100, 1, 1),
                ).map(lambda d: d.replace(microsecond=0, tzinfo=datetime.UTC))
            ),
            "message_type": maybe(names),
            "user_id": maybe(names),
            "app_id": maybe(names),
        }
    return commands.Basic.Properties(**options)


def shortstr(value: str) -> bytes:
    raw = value.encode()
    return bytes((len(raw),)) + raw


# ---------------------------------------------------------------------------------------------
# Basic.Publish decoding
# ---------------------------------------------------------------------------------------------
@CODEC
@given(names, names, st.booleans(), st.booleans())
def test_decode_publish_matches_pamqp(
    exchange: str, routing_key: str, mandatory: bool, immediate: bool
) -> None:
    method = Publish(
        exchange=exchange, routing_key=routing_key, mandatory=mandatory, immediate=immediate
    )
    payload = struct.pack(">I", method.index) + method.marshal()
    assert codec.method_index(payload) == codec.BASIC_PUBLISH

    args = codec.decode_publish(payload)

    assert (args.exchange, args.routing_key) == (exchange, routing_key)
    assert (args.mandatory, args.immediate) == (mandatory, immediate)
    assert args.exchange_raw == shortstr(exchange)
    assert args.routing_key_raw == shortstr(routing_key)
    # and pamqp reads the same payload the same way
    decoded = commands.Basic.Publish()
    decoded.unmarshal(payload[4:])
    assert (decoded.exchange, decoded.routing_key) == (exchange, routing_key)


@CODEC
@given(names, names, st.data())
def test_truncated_publish_is_502(exchange: str, routing_key: str, data: st.DataObject) -> None:
    method = Publish(exchange=exchange, routing_key=routing_key)
    payload = struct.pack(">I", method.index) + method.marshal()
    cut = data.draw(st.integers(4, len(payload) - 1), label="cut")
    with pytest.raises(AMQPError) as info:
        codec.decode_publish(payload[:cut])
    assert info.value.reply_code == SYNTAX_ERROR
    assert (info.value.class_id, info.value.method_id) == (60, 40)


def test_publish_with_invalid_utf8_name_is_502() -> None:
    payload = struct.pack(">IH", codec.BASIC_PUBLISH, 0) + b"\x02\xff\xfe" + b"\x00" + b"\x00"
    with pytest.raises(AMQPError) as info:
        codec.decode_publish(payload)
    assert info.value.reply_code == SYNTAX_ERROR


# ---------------------------------------------------------------------------------------------
# Deliver / Get-Ok / Ack / Nack encoding
# ---------------------------------------------------------------------------------------------
@CODEC
@given(channels, names, delivery_tags, st.booleans(), names, names)
def test_encode_deliver_matches_pamqp(
    channel: int, tag: str, delivery_tag: int, redelivered: bool, exchange: str, key: str
) -> None:
    ours = codec.encode_deliver(
        channel, shortstr(tag), delivery_tag, redelivered, shortstr(exchange), shortstr(key)
    )
    reference = pamqp_frame.marshal(
        Deliver(
            consumer_tag=tag,
            delivery_tag=delivery_tag,
            redelivered=redelivered,
            exchange=exchange,
            routing_key=key,
        ),
        channel,
    )
    assert ours == reference


@CODEC
@given(
    channels,
    names,
    delivery_tags,
    st.booleans(),
    names,
    names,
    st.binary(max_size=40),
    st.binary(max_size=600),
    st.integers(4096, 4200) | st.just(9),
)
def test_encode_delivery_is_deliver_then_content(
    channel: int,
    tag: str,
    delivery_tag: int,
    redelivered: bool,
    exchange: str,
    key: str,
    header: bytes,
    body: bytes,
    frame_max_or_small: int,
) -> None:
    # 9: one body byte per frame (a body split into many frames)
    frame_max = frame_max_or_small
    raw = (shortstr(tag), delivery_tag, redelivered, shortstr(exchange), shortstr(key))
    ours = codec.encode_delivery(channel, *raw, header, body, frame_max)
    reference = codec.encode_deliver(channel, *raw) + b"".join(
        codec.encode_content(channel, header, body, frame_max)
    )
    assert b"".join(ours) == reference
    assert all(type(part) is bytes for part in ours)


@CODEC
@given(channels, delivery_tags, st.booleans(), names, names, st.integers(0, 2**32 - 1))
def test_encode_get_ok_matches_pamqp(
    channel: int, delivery_tag: int, redelivered: bool, exchange: str, key: str, count: int
) -> None:
    ours = codec.encode_get_ok(
        channel, delivery_tag, redelivered, shortstr(exchange), shortstr(key), count
    )
    reference = pamqp_frame.marshal(
        GetOk(
            delivery_tag=delivery_tag,
            redelivered=redelivered,
            exchange=exchange,
            routing_key=key,
            message_count=count,
        ),
        channel,
    )
    assert ours == reference


@CODEC
@given(channels, delivery_tags, st.booleans())
def test_encode_ack_matches_pamqp(channel: int, delivery_tag: int, multiple: bool) -> None:
    reference = pamqp_frame.marshal(
        commands.Basic.Ack(delivery_tag=delivery_tag, multiple=multiple), channel
    )
    assert codec.encode_ack(channel, delivery_tag, multiple) == reference


@CODEC
@given(channels, delivery_tags, st.booleans(), st.booleans())
def test_encode_nack_matches_pamqp(
    channel: int, delivery_tag: int, multiple: bool, requeue: bool
) -> None:
    reference = pamqp_frame.marshal(
        commands.Basic.Nack(delivery_tag=delivery_tag, multiple=multiple, requeue=requeue),
        channel,
    )
    assert codec.encode_nack(channel, delivery_tag, multiple, requeue) == reference


@CODEC
@given(channels, st.integers(-(2**63), 2**63 - 1), st.booleans(), st.booleans(), st.booleans())
def test_decode_ack_and_nack_match_pamqp(
    channel: int, delivery_tag: int, multiple: bool, requeue: bool, nack: bool
) -> None:
    method = (
        commands.Basic.Nack(delivery_tag=delivery_tag, multiple=multiple, requeue=requeue)
        if nack
        else commands.Basic.Ack(delivery_tag=delivery_tag, multiple=multiple)
    )
    payload = pamqp_frame.marshal(method, channel)[7:-1]
    index = codec.method_index(payload)
    reference = codec.decode_method(index, payload)
    assert isinstance(reference, commands.Basic.Ack | commands.Basic.Nack)
    tag, bits = codec.decode_ack(index, payload)
    assert (tag, bool(bits & 1)) == (reference.delivery_tag, reference.multiple)
    if isinstance(reference, commands.Basic.Nack):
        assert bool(bits & 2) == reference.requeue
    with pytest.raises(AMQPError) as ours:
        codec.decode_ack(index, payload[:-1])
    with pytest.raises(AMQPError) as theirs:
        codec.decode_method(index, payload[:-1])
    assert (ours.value.reply_code, ours.value.reply_text) == (
        theirs.value.reply_code,
        theirs.value.reply_text,
    )
    assert (ours.value.class_id, ours.value.method_id) == (60, 120 if nack else 80)


@CODEC
@given(channels)
def test_encode_get_empty_matches_pamqp(channel: int) -> None:
    reference = pamqp_frame.marshal(commands.Basic.GetEmpty(), channel)
    assert codec.encode_get_empty(channel) == reference
    assert codec.encode_get_empty(channel) == codec.encode_method(
        channel, commands.Basic.GetEmpty()
    )


def test_encode_nack_defaults_to_no_requeue() -> None:
    reference = pamqp_frame.marshal(commands.Basic.Nack(delivery_tag=7, requeue=False), 3)
    assert codec.encode_nack(3, 7, False) == reference


# ---------------------------------------------------------------------------------------------
# Content frames
# ---------------------------------------------------------------------------------------------
@CODEC
@given(channels, basic_properties(), st.binary(max_size=2000), st.integers(9, 600))
def test_encode_content_matches_pamqp_and_splits_at_frame_max(
    channel: int, properties: commands.Basic.Properties, body: bytes, frame_max: int
) -> None:
    header = ContentHeader(0, len(body), properties)
    header_payload = header.marshal()
    chunk = frame_max - codec.FRAME_OVERHEAD
    pieces = [body[i : i + chunk] for i in range(0, len(body), chunk)]

    ours = b"".join(codec.encode_content(channel, header_payload, body, frame_max))

    reference = pamqp_frame.marshal(header, channel) + b"".join(
        pamqp_frame.marshal(ContentBody(piece), channel) for piece in pieces
    )
    assert ours == reference
    # every body frame respects frame_max, and together they are the body
    reader = codec.FrameReader(frame_max=max(frame_max, len(header_payload) + 8))
    reader.feed(ours)
    first = reader.next_frame()
    assert first == (codec.FRAME_HEADER, channel, header_payload)
    reader.frame_max = frame_max
    bodies = []
    while (item := reader.next_frame()) is not None:
        frame_type, number, payload = item
        assert (frame_type, number) == (codec.FRAME_BODY, channel)
        assert 0 < len(payload) <= chunk
        bodies.append(payload)
    assert b"".join(bodies) == body
    assert len(bodies) == -(-len(body) // chunk)  # ceil; an empty body has no body frame


def test_encode_content_with_body_of_exactly_one_frame() -> None:
    body = b"x" * (4096 - 8)
    parts = b"".join(codec.encode_content(1, ContentHeader(0, len(body)).marshal(), body, 4096))
    frames = []
    data = parts
    while data:
        consumed, _channel, value = pamqp_frame.unmarshal(data)
        frames.append(value)
        data = data[consumed:]
    assert [type(f) for f in frames] == [ContentHeader, ContentBody]


# ---------------------------------------------------------------------------------------------
# Content header peeking
# ---------------------------------------------------------------------------------------------
@CODEC
@given(basic_properties(), st.integers(0, 2**63 - 1))
def test_peek_header_matches_pamqp(properties: commands.Basic.Properties, body_size: int) -> None:
    payload = ContentHeader(0, body_size, properties).marshal()
    reference = ContentHeader()
    reference.unmarshal(payload)
    props = reference.properties

    peek = content_header.peek_header(payload)

    assert peek.class_id == 60 == reference.class_id
    assert peek.body_size == body_size == reference.body_size
    assert peek.flags == struct.unpack_from(">H", payload, 12)[0]
    assert peek.delivery_mode == (props.delivery_mode or 0)
    assert peek.priority == props.priority
    assert peek.expiration == props.expiration
    if props.headers is None:
        assert peek.headers_raw is None
    else:
        assert content_header.decode_headers_table(peek.headers_raw) == props.headers


@CODEC
@given(basic_properties(up_to_expiration=True), st.data())
def test_truncated_header_is_502(
    properties: commands.Basic.Properties, data: st.DataObject
) -> None:
    payload = ContentHeader(0, 10, properties).marshal()
    cut = data.draw(st.integers(0, len(payload) - 1), label="cut")
    with pytest.raises(AMQPError) as info:
        content_header.peek_header(payload[:cut])
    assert info.value.reply_code == SYNTAX_ERROR


def test_peek_header_skips_continuation_flag_words() -> None:
    properties = commands.Basic.Properties(delivery_mode=2, priority=7, expiration="60000")
    payload = ContentHeader(0, 5, properties).marshal()
    flags = struct.unpack_from(">H", payload, 12)[0]
    extended = payload[:12] + struct.pack(">HH", flags | 1, 0) + payload[14:]
    peek = content_header.peek_header(extended)
    assert (peek.delivery_mode, peek.priority, peek.expiration) == (2, 7, "60000")


# ---------------------------------------------------------------------------------------------
# FrameReader
# ---------------------------------------------------------------------------------------------
frames_strategy = st.lists(
    st.one_of(
        st.tuples(st.just(codec.FRAME_METHOD), channels, st.binary(min_size=4, max_size=80)),
        st.tuples(st.just(codec.FRAME_HEADER), channels, st.binary(min_size=14, max_size=80)),
        st.tuples(st.just(codec.FRAME_BODY), channels, st.binary(max_size=300)),
        st.just((codec.FRAME_HEARTBEAT, 0, b"")),
    ),
    max_size=25,
)


@CODEC
@given(frames_strategy, st.data())
def test_frame_reader_yields_the_same_frames_under_any_chunking(
    frames: list[tuple[int, int, bytes]], data: st.DataObject
) -> None:
    stream = b"".join(codec.frame(*f) for f in frames)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=30), label="cuts"))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]

    reader = codec.FrameReader(frame_max=131072)
    got = []
    for chunk in chunks:
        reader.feed(chunk)
        while (item := reader.next_frame()) is not None:
            got.append(item)
        reader.compact()
    assert got == frames
    assert reader.buffered == 0


@CODEC
@given(st.lists(st.binary(max_size=100), max_size=10), channels)
def test_frame_matches_pamqp_marshal(bodies: list[bytes], channel: int) -> None:
    for body in bodies:
        assert codec.frame(codec.FRAME_BODY, channel, body) == pamqp_frame.marshal(
            ContentBody(body), channel
        )
    assert codec.frame(codec.FRAME_HEARTBEAT, 0, b"") == pamqp_frame.marshal(Heartbeat(), 0)
    assert pamqp_frame.marshal(Heartbeat(), 0) == codec.HEARTBEAT_FRAME


@CODEC
@given(st.integers(4096, 131072), st.integers(1, 2**32 - 1 - 131072), st.integers(1, 3))
def test_oversized_frame_is_501_from_the_header_alone(
    frame_max: int, excess: int, frame_type: int
) -> None:
    size = frame_max + excess  # a payload of frame_max bytes is still accepted (fudge)
    reader = codec.FrameReader(frame_max=frame_max)
    reader.feed(struct.pack(">BHI", frame_type, 1, size))  # the 7-byte header, no payload
    with pytest.raises(AMQPError) as info:
        reader.next_frame()
    assert info.value.reply_code == FRAME_ERROR
    assert info.value.text == (  # rabbit_reader's text
        f"type {frame_type}, all octets = <<>>: "
        f"{{frame_too_large,{size},{frame_max - codec.FRAME_OVERHEAD}}}"
    )


@CODEC
@given(st.integers(4096, 131072), st.integers(1, 2**20), st.integers(1, 6))
def test_oversized_frame_is_501_when_its_header_arrives_in_pieces(
    frame_max: int, excess: int, cut: int
) -> None:
    """The size check runs once the pieces of the header are joined, before any payload."""
    size = frame_max + excess
    raw_header = struct.pack(">BHI", codec.FRAME_BODY, 1, size)
    reader = codec.FrameReader(frame_max=frame_max)
    reader.feed(raw_header[:cut])
    assert reader.next_frame() is None
    reader.feed(raw_header[cut:])
    with pytest.raises(AMQPError) as info:
        reader.next_frame()
    assert info.value.reply_code == FRAME_ERROR
    assert f"frame_too_large,{size}," in info.value.text


@CODEC
@given(st.integers(4096, 131072), st.integers(0, codec.FRAME_OVERHEAD))
def test_frame_up_to_frame_max_plus_the_fudge_is_accepted(frame_max: int, extra: int) -> None:
    """rabbit_reader's FRAME_SIZE_FUDGE: payloads up to frame_max bytes (8 more than the
    frame_max - 8 the spec allows) pass, since many clients get the limit wrong."""
    reader = codec.FrameReader(frame_max=frame_max)
    payload = b"\xab" * (frame_max - codec.FRAME_OVERHEAD + extra)
    reader.feed(codec.frame(codec.FRAME_BODY, 1, payload))
    assert reader.next_frame() == (codec.FRAME_BODY, 1, payload)


@CODEC
@given(st.integers(4096, 131072))
def test_frame_of_exactly_frame_max_is_accepted(frame_max: int) -> None:
    reader = codec.FrameReader(frame_max=frame_max)
    payload = b"\xab" * (frame_max - codec.FRAME_OVERHEAD)
    raw = codec.frame(codec.FRAME_BODY, 1, payload)
    assert len(raw) == frame_max
    reader.feed(raw[:7])
    assert reader.next_frame() is None  # waits for the payload
    reader.feed(raw[7:])
    assert reader.next_frame() == (codec.FRAME_BODY, 1, payload)


@CODEC
@given(
    st.integers(0, 255).filter(lambda b: b != codec.FRAME_END),
    st.binary(max_size=50),
    st.integers(1, 3),
)
def test_bad_frame_end_is_501_after_the_good_frames_before_it(
    end: int, payload: bytes, frame_type: int
) -> None:
    good = codec.frame(codec.FRAME_HEARTBEAT, 0, b"")
    bad = struct.pack(">BHI", frame_type, 1, len(payload)) + payload + bytes((end,))
    reader = codec.FrameReader(frame_max=4096)
    reader.feed(good + bad + good)
    assert reader.next_frame() == (codec.FRAME_HEARTBEAT, 0, b"")
    with pytest.raises(AMQPError) as info:
        reader.next_frame()
    assert info.value.reply_code == FRAME_ERROR
    assert f"{end:#04x}" in info.value.text


def test_incomplete_frame_returns_none_never_raises() -> None:
    raw = codec.frame(codec.FRAME_METHOD, 5, b"\x00\x14\x00\x0a\x00")
    reader = codec.FrameReader(frame_max=4096)
    for i in range(len(raw) - 1):
        reader.feed(raw[i : i + 1])
        assert reader.next_frame() is None
    reader.feed(raw[-1:])
    assert reader.next_frame() == (codec.FRAME_METHOD, 5, b"\x00\x14\x00\x0a\x00")


def test_a_trickled_frame_is_not_copied_again_for_every_piece() -> None:
    """A client sending a large frame a byte at a time must not make the broker copy the
    bytes received so far at each byte (O(n²)): pieces wait, unjoined, until the frame is
    complete, and the payload comes back whole."""
    payload = bytes(range(256)) * 400
    raw = codec.frame(codec.FRAME_BODY, 3, payload)
    reader = codec.FrameReader(frame_max=131072)
    reader.feed(raw[:3])
    assert reader.next_frame() is None
    reader.feed(raw[3:9])  # the header is now complete: joined once, size checked
    assert reader.next_frame() is None
    reader.compact()
    joined = reader._buf
    for i in range(9, 9 + 5000):
        reader.feed(raw[i : i + 1])
        assert reader.next_frame() is None
        reader.compact()
    assert reader._buf is joined  # 5,000 pieces later: not joined again
    assert reader.buffered == 9 + 5000
    reader.feed(raw[9 + 5000 :] + codec.HEARTBEAT_FRAME[:2])
    assert reader.next_frame() == (codec.FRAME_BODY, 3, payload)
    assert reader.next_frame() is None
    reader.compact()
    assert reader.buffered == 2 and len(reader._buf) == 2  # only the unparsed tail is kept


# ---------------------------------------------------------------------------------------------
# Method index and cold-path decoding
# ---------------------------------------------------------------------------------------------
def test_method_index_of_short_payload_is_501() -> None:
    with pytest.raises(AMQPError) as info:
        codec.method_index(b"\x00\x3c")
    assert info.value.reply_code == FRAME_ERROR


@CODEC
@given(names, st.booleans(), st.booleans(), st.booleans(), st.booleans(), field_tables)
def test_decode_method_matches_pamqp(
    queue: str,
    passive: bool,
    durable: bool,
    exclusive: bool,
    auto_delete: bool,
    arguments: dict[str, Any],
) -> None:
    declare = unvalidated(commands.Queue.Declare)(
        queue=queue,
        passive=passive,
        durable=durable,
        exclusive=exclusive,
        auto_delete=auto_delete,
        arguments=arguments,
    )
    payload = pamqp_frame.marshal(declare, 1)[7:-1]
    method = codec.decode_method(codec.method_index(payload), payload)
    assert isinstance(method, commands.Queue.Declare)
    assert (method.queue, method.passive, method.durable) == (queue, passive, durable)
    assert (method.exclusive, method.auto_delete) == (exclusive, auto_delete)
    assert method.arguments == arguments
    with pytest.raises(AMQPError) as info:
        codec.decode_method(codec.method_index(payload), payload[:-1])
    assert info.value.reply_code == SYNTAX_ERROR
    assert (info.value.class_id, info.value.method_id) == (50, 10)


def test_decode_method_of_unknown_index_is_none() -> None:
    assert codec.decode_method(0x003C03E7, b"\x00\x3c\x03\xe7") is None


@pytest.mark.parametrize("queue", ["", "q", "café", "x" * 255])
@pytest.mark.parametrize("no_ack", [False, True])
def test_basic_get_fast_decode_matches_pamqp(queue: str, no_ack: bool) -> None:
    payload = pamqp_frame.marshal(commands.Basic.Get(queue=queue, no_ack=no_ack), 1)[7:-1]
    method = codec.decode_method(codec.method_index(payload), payload)
    assert isinstance(method, commands.Basic.Get)
    assert (method.ticket, method.queue, method.no_ack) == (0, queue, no_ack)


def test_a_cut_short_basic_get_is_a_syntax_error() -> None:
    payload = pamqp_frame.marshal(commands.Basic.Get(queue="abc"), 1)[7:-1]
    for cut in (5, 8, len(payload) - 1):
        with pytest.raises(AMQPError) as info:
            codec.decode_method(codec.BASIC_GET, payload[:cut])
        assert info.value.reply_code == 502 and "basic.get" in info.value.reply_text
