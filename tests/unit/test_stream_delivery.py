"""Stream deliveries built from chunk bytes (amqpd/model/stream_delivery.py): byte for byte
what the general encoders (codec.encode_deliver, with_offset, codec.encode_content) give."""

from __future__ import annotations

from pathlib import Path

from pamqp import commands, header

from amqpd.model.stream_delivery import StreamReader, offset_split, with_offset
from amqpd.wire import codec
from persistence.stream.log import StreamLog

_FRAME_MAX = 4096


def _header(body_size: int, properties: commands.Basic.Properties) -> bytes:
    return header.ContentHeader(0, body_size, properties).marshal()


_HEADERS = [
    _header(5, commands.Basic.Properties()),
    _header(5, commands.Basic.Properties(content_type="text/plain", headers={"a": 1})),
    _header(5, commands.Basic.Properties(headers={"x-stream-offset": 7, "b": "c"})),
    _header(5, commands.Basic.Properties(content_encoding="gzip", correlation_id="id")),
    *(  # a message id each: headers that differ from one message to the next
        _header(5, commands.Basic.Properties(headers={"s": "x"}, message_id=f"m{n}"))
        for n in range(3)
    ),
    _header(5, commands.Basic.Properties(content_type="a", content_encoding="b", headers={})),
]


def _expected(
    tag: int, offset: int, exchange: bytes, key: bytes, head: bytes, body: bytes
) -> bytes:
    first = codec.encode_deliver(1, b"\x03ctg", tag, False, exchange, key)
    return b"".join([first, *codec.encode_content(1, with_offset(head, offset), body, _FRAME_MAX)])


def test_run_frames_match_the_general_encoders(tmp_path: Path) -> None:
    log = StreamLog(tmp_path / "s")
    stored = []
    bodies = [b"hello", b"hello", b"", b"x" * 10_000, b"hello", b"hi", b"hi"]
    for number in range(90):
        body = bodies[number % len(bodies)]
        head = _HEADERS[(number // 3 + number % 2) % len(_HEADERS)]
        key = b"\x02rk" if number % 5 else b"\x03key"
        exchange = b"\x00" if number % 7 else b"\x02ex"
        offset = log.append(exchange, key, head, body, None, 1000)
        stored.append((offset, exchange, key, head, body))
        if number == 20:
            log.flush()  # two chunks
    for number in range(4):  # one header, then the same header again: both ways of sending
        head = _HEADERS[4 + number // 2]
        offset = log.append(b"\x00", b"\x02rk", head, b"hello", None, 1000)
        stored.append((offset, b"\x00", b"\x02rk", head, b"hello"))
    log.flush()
    reader = StreamReader(log.reader(3), None, False, None)
    got: list[bytes] = []
    tag = 1
    while (run := reader.take(log.next_offset, 7)) is not None:
        assert len(run) <= 7
        got += run.frames(1, b"\x03ctg", tag, _FRAME_MAX)
        tag += len(run)
    expected = [_expected(tag, *entry) for tag, entry in enumerate(stored[3:], start=1)]
    assert b"".join(got) == b"".join(expected)
    assert reader.offset == log.next_offset


def test_filtered_runs_skip_other_values_and_stop_at_end(tmp_path: Path) -> None:
    log = StreamLog(tmp_path / "s")
    for number in range(30):
        value = b"red" if number % 3 == 0 else b"blue"
        log.append(b"\x00", b"\x01k", _HEADERS[0], b"hello", value, 1000)
    log.flush()
    reader = StreamReader(log.reader(0), (b"red",), False, "tracker")
    run = reader.take(20, 100)
    assert run is not None
    assert run.offset_list() == [0, 3, 6, 9, 12, 15, 18]
    assert [entry.seq for entry in run.entries()] == [0, 3, 6, 9, 12, 15, 18]
    assert reader.take(20, 100) is None  # offset 20 on is not visible yet
    run = reader.take(30, 100)
    assert run is not None and run.offset_list() == [21, 24, 27]


def _split_by_difference(head: bytes) -> tuple[bytes, bytes]:
    zeros, ones = with_offset(head, 0), with_offset(head, -1)
    at = next(i for i in range(len(zeros)) if zeros[i] != ones[i])
    return zeros[:at], zeros[at + 8 :]


def test_offset_split_cuts_where_with_offset_puts_the_offset() -> None:
    heads = [
        *_HEADERS,
        _header(0, commands.Basic.Properties(message_id="bench-1", headers={"s": "spark"})),
        _header(9, commands.Basic.Properties(content_type="a", content_encoding="b")),
        _header(9, commands.Basic.Properties(content_type="json", headers={})),
        _header(9, commands.Basic.Properties(headers={"x-stream-offset": 1}, delivery_mode=2)),
    ]
    for head in heads:
        before, after = offset_split(head)
        assert (before, after) == _split_by_difference(head)
        assert before + (12345).to_bytes(8, "big") + after == with_offset(head, 12345)
