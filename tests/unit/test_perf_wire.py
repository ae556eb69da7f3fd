"""amqpd/perf wire helpers and the consumer's delivery parser, checked against pamqp."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands, frame
from pamqp.body import ContentBody
from pamqp.header import ContentHeader

from interop.perf.client import decode_method
from interop.perf.consumer import ack_frames
from interop.perf.deliveries import DeliveryParser
from interop.perf.wire import (
    BrokerAddress,
    FrameError,
    FrameSplitter,
    decode_confirm,
    encode_ack,
    encode_tx_commit,
    publish_template,
)

PERF = settings(deadline=None, max_examples=60)
tags = st.integers(1, 2**63 - 1)


def pamqp_publish(
    exchange: str, key: str, body: bytes, frame_max: int, persistent: bool, headers: dict | None
) -> bytes:
    props = commands.Basic.Properties(delivery_mode=2 if persistent else 1, headers=headers)
    parts = [
        frame.marshal(commands.Basic.Publish(exchange=exchange, routing_key=key), 1),
        frame.marshal(ContentHeader(0, len(body), props), 1),
    ]
    chunk = frame_max - 8
    parts += [
        frame.marshal(ContentBody(body[i : i + chunk]), 1) for i in range(0, len(body), chunk)
    ]
    return b"".join(parts)


@PERF
@given(
    size=st.integers(0, 600),
    frame_max=st.integers(64, 300),
    stamp=st.integers(0, 2**63 - 1),
    persistent=st.booleans(),
    with_headers=st.booleans(),
)
def test_publish_template_matches_pamqp(
    size: int, frame_max: int, stamp: int, persistent: bool, with_headers: bool
) -> None:
    headers = {"perf-queue": "q-1"} if with_headers else None
    template = publish_template(
        1, "perf.x", "q-1", size, frame_max, persistent=persistent, headers=headers
    )
    body = bytearray(size)
    if size >= 8:
        body[:8] = stamp.to_bytes(8, "big")
    assert template.stamped == (size >= 8)
    expected = pamqp_publish("perf.x", "q-1", bytes(body), frame_max, persistent, headers)
    assert template.message(stamp) == expected
    assert template.batch(stamp, 3) == expected * 3


@given(channel=st.integers(0, 0xFFFF), tag=tags, multiple=st.booleans())
def test_ack_matches_pamqp(channel: int, tag: int, multiple: bool) -> None:
    expected = frame.marshal(commands.Basic.Ack(delivery_tag=tag, multiple=multiple), channel)
    assert encode_ack(channel, tag, multiple) == expected


def test_tx_commit_matches_pamqp() -> None:
    assert encode_tx_commit(7) == frame.marshal(commands.Tx.Commit(), 7)


@given(tag=tags, multiple=st.booleans(), nack=st.booleans())
def test_decode_confirm(tag: int, multiple: bool, nack: bool) -> None:
    kind = commands.Basic.Nack if nack else commands.Basic.Ack
    raw = frame.marshal(kind(delivery_tag=tag, multiple=multiple), 1)
    ((_type, _channel, payload),) = FrameSplitter().feed(raw)
    assert decode_confirm(payload) == (tag, multiple)


@PERF
@given(cuts=st.lists(st.integers(0, 200), max_size=6))
def test_splitter_any_chunking(cuts: list[int]) -> None:
    methods = [commands.Basic.Ack(delivery_tag=n) for n in range(1, 6)]
    stream = b"".join(frame.marshal(m, 1) for m in methods)
    points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    splitter = FrameSplitter()
    frames = []
    for start, end in itertools.pairwise(points):
        frames += splitter.feed(stream[start:end])
    decoded = [decode_method(payload) for _t, _c, payload in frames]
    assert [m.delivery_tag for m in decoded if isinstance(m, commands.Basic.Ack)] == [
        1,
        2,
        3,
        4,
        5,
    ]


def test_splitter_rejects_bad_frame_end() -> None:
    raw = bytearray(frame.marshal(commands.Basic.Ack(delivery_tag=1), 1))
    raw[-1] = 0
    with pytest.raises(FrameError):
        FrameSplitter().feed(bytes(raw))


def delivery(tag: int, body: bytes, frame_max: int = 4096, ctag: str = "perf-0") -> bytes:
    method = commands.Basic.Deliver(
        consumer_tag=ctag, delivery_tag=tag, exchange="perf.direct", routing_key="q-1"
    )
    parts = [frame.marshal(method, 1), frame.marshal(ContentHeader(0, len(body)), 1)]
    chunk = frame_max - 8
    parts += [
        frame.marshal(ContentBody(body[i : i + chunk]), 1) for i in range(0, len(body), chunk)
    ]
    return b"".join(parts)


@PERF
@given(
    stamps=st.lists(st.integers(0, 3), min_size=1, max_size=20),
    size=st.integers(0, 100),
    chunk=st.integers(1, 300),
    frame_max=st.integers(20, 200),
)
def test_delivery_parser(stamps: list[int], size: int, chunk: int, frame_max: int) -> None:
    stream = b"".join(
        delivery(
            n + 1,
            s.to_bytes(8, "big") + bytes(max(size - 8, 0)) if size >= 8 else bytes(size),
            frame_max,
        )
        for n, s in enumerate(stamps)
    )
    stream += frame.marshal(commands.Basic.ConsumeOk(consumer_tag="perf-0"), 1)
    parser = DeliveryParser(keep_tags=True)
    counts: dict[int, int] = {}
    for start in range(0, len(stream), chunk):
        parser.feed(stream[start : start + chunk])
        for stamp, n in parser.take_stamps():
            counts[stamp] = counts.get(stamp, 0) + n
    assert parser.deliveries == len(stamps)
    assert parser.last_tag == len(stamps)
    assert parser.take_tags() == list(range(1, len(stamps) + 1))
    if size >= 8:
        expected: dict[int, int] = {}
        for s in stamps:
            expected[s] = expected.get(s, 0) + 1
        assert counts == expected
    else:
        assert counts == {}
    (method,) = parser.take_methods()
    assert isinstance(decode_method(method), commands.Basic.ConsumeOk)


def mixed_delivery(tag: int, stamp: int, key: str, size: int, redelivered: bool) -> bytes:
    method = commands.Basic.Deliver(
        consumer_tag="perf-0",
        delivery_tag=tag,
        redelivered=redelivered,
        exchange="perf.direct",
        routing_key=key,
    )
    body = stamp.to_bytes(8, "big") + bytes(max(size - 8, 0)) if size >= 8 else bytes(size)
    parts = [frame.marshal(method, 1), frame.marshal(ContentHeader(0, len(body)), 1)]
    parts += [frame.marshal(ContentBody(body[i : i + 60]), 1) for i in range(0, len(body), 60)]
    return b"".join(parts)


messages = st.tuples(
    st.integers(0, 2),  # stamp
    st.sampled_from(["q-1", "q-22"]),  # two routing keys: two record lengths
    st.sampled_from([0, 5, 8, 40, 100]),  # 100: two body frames, no record runs
    st.booleans(),  # redelivered: same length, another byte
    st.sampled_from([None, "consume-ok", "cancel"]),  # another method frame after it
)


@settings(deadline=None, max_examples=150)
@given(
    stream_of=st.lists(messages, min_size=1, max_size=60),
    cuts=st.lists(st.integers(1, 4000), max_size=8),
)
def test_delivery_parser_record_runs_match_frame_by_frame(
    stream_of: list[tuple[int, str, int, bool, str | None]], cuts: list[int]
) -> None:
    """Runs of same-shaped deliveries are taken as records; anything else in between
    (another routing key or body size, a method frame) goes frame by frame: the counts,
    tags, stamps and methods are those of the frames, however the stream is cut."""
    stream = b""
    extras: list[type] = []
    for tag, (stamp, key, size, redelivered, extra) in enumerate(stream_of, 1):
        stream += mixed_delivery(tag, stamp, key, size, redelivered)
        if extra == "consume-ok":
            stream += frame.marshal(commands.Basic.ConsumeOk(consumer_tag="perf-0"), 1)
            extras.append(commands.Basic.ConsumeOk)
        elif extra == "cancel":
            stream += frame.marshal(commands.Basic.Cancel(consumer_tag="perf-0"), 1)
            extras.append(commands.Basic.Cancel)
    parser = DeliveryParser(keep_tags=True)
    counts: dict[int, int] = {}
    points = sorted({0, len(stream), *(c * 7 % (len(stream) + 1) for c in cuts)})
    for start, end in itertools.pairwise(points):
        parser.feed(stream[start:end])
        for stamp, n in parser.take_stamps():
            counts[stamp] = counts.get(stamp, 0) + n
    assert parser.deliveries == len(stream_of)
    assert parser.last_tag == len(stream_of)
    assert parser.take_tags() == list(range(1, len(stream_of) + 1))
    expected: dict[int, int] = {}
    for stamp, _key, size, _redelivered, _extra in stream_of:
        if size >= 8:
            expected[stamp] = expected.get(stamp, 0) + 1
    assert counts == expected
    assert [type(decode_method(m)) for m in parser.take_methods()] == extras


def test_delivery_parser_takes_a_run_of_records_at_once() -> None:
    """After one delivery parsed frame by frame, a chunk of same-shaped deliveries is
    taken as one run of records (the layout is kept), with its tags and stamps."""
    parser = DeliveryParser(keep_tags=True)
    parser.feed(mixed_delivery(1, 7, "q-1", 40, False))
    assert parser._layout is not None
    run = b"".join(mixed_delivery(t, 9 if t % 2 else 8, "q-1", 40, t == 5) for t in range(2, 402))
    parser.feed(run)
    assert parser._layout is not None
    assert parser.deliveries == 401 and parser.last_tag == 401
    assert parser.take_tags() == list(range(1, 402))
    assert dict(parser.take_stamps()) == {7: 1, 8: 200, 9: 200}


def test_ack_frames_every_n_like_perftest() -> None:
    # 120 deliveries in a chunk after 30 earlier ones, ack every 50: acks at 50, 100, 150
    raw = ack_frames(1, [], previous=30, count=150, every=50, tag_offset=0)
    frames = FrameSplitter().feed(raw)
    acks = [decode_method(p) for _t, _c, p in frames]
    assert [(a.delivery_tag, a.multiple) for a in acks] == [(50, True), (100, True), (150, True)]


def test_ack_frames_single() -> None:
    raw = ack_frames(1, [4, 5], previous=3, count=5, every=0, tag_offset=0)
    assert raw == encode_ack(1, 4, False) + encode_ack(1, 5, False)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("amqp://guest:guest@127.0.0.1:5672/", ("127.0.0.1", 5672, "guest", "guest", "/")),
        ("amqp://u:p%40ss@host/%2F", ("host", 5672, "u", "p@ss", "/")),
        ("amqp://host:5699/prod", ("host", 5699, "guest", "guest", "prod")),
        ("amqp://", ("127.0.0.1", 5672, "guest", "guest", "/")),
    ],
)
def test_broker_address(url: str, expected: tuple[str, int, str, str, str]) -> None:
    a = BrokerAddress.parse(url)
    assert (a.host, a.port, a.user, a.password, a.vhost) == expected


def test_broker_address_rejects_amqps() -> None:
    with pytest.raises(ValueError, match="amqps"):
        BrokerAddress.parse("amqps://host/")
