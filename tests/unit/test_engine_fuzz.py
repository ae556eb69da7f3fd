"""Malformed input never crashes the engine: it answers with an AMQP error or keeps going."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st
from pamqp import commands, frame

from amqpd.engine.connection_open import State
from amqpd.model.broker import Broker
from amqpd.wire import codec
from amqpd.wire.errors import ReplyCode
from tests.unit.engine_driver import Client

FRAME_TYPES = st.sampled_from([1, 2, 3, 8, 0, 4, 255])


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    """Well-framed but arbitrary frames (random types, channels, payloads), sometimes
    with a method index the broker knows so the argument decoders get exercised."""
    frame_type = draw(FRAME_TYPES)
    channel = draw(st.sampled_from([0, 1, 2, 65535]))
    payload = draw(st.binary(max_size=64))
    if frame_type == 1 and draw(st.booleans()):
        index = draw(st.sampled_from(sorted(commands.INDEX_MAPPING)))
        payload = index.to_bytes(4, "big") + payload
    end = b"\xce" if draw(st.integers(0, 9)) else bytes([draw(st.integers(0, 255))])
    return (
        bytes([frame_type])
        + channel.to_bytes(2, "big")
        + len(payload).to_bytes(4, "big")
        + payload
        + end
    )


@settings(max_examples=400, deadline=None)
@given(st.lists(frames(), max_size=8), st.integers(1, 64))
def test_random_frames_after_handshake_never_crash(chunks: list[bytes], split: int) -> None:
    broker = Broker()
    client = Client(broker)
    client.handshake()
    client.open_channel()
    data = b"".join(chunks)
    for start in range(0, len(data), split):
        client.feed(data[start : start + split])
    replies = client.methods()
    closes = [m for m in replies if isinstance(m, commands.Connection.Close)]
    assert all(close.reply_code != 541 for close in closes), closes  # 541 = a broker bug
    assert client.conn.state in (State.OPEN, State.CLOSING, State.CLOSED)
    # the broker keeps serving everyone else
    other = Client(broker)
    other.handshake()
    other.open_channel()
    other.send(1, commands.Queue.Declare(queue="still-alive"))
    assert isinstance(other.methods()[-1], commands.Queue.DeclareOk)


HEADER_PREFIXES = st.sampled_from([b"", codec.PROTOCOL_HEADER[:4], codec.PROTOCOL_HEADER])


def decode_frames(data: bytes) -> list[tuple[int, object]]:
    """Every byte the broker wrote, as frames (pamqp raises on anything else)."""
    out = []
    while data:
        consumed, channel, value = frame.unmarshal(data)
        assert consumed > 0
        out.append((channel, value))
        data = data[consumed:]
    return out


@settings(max_examples=300, deadline=None)
@given(
    HEADER_PREFIXES,
    st.one_of(st.binary(max_size=300), st.lists(frames(), max_size=4).map(b"".join)),
)
@example(codec.PROTOCOL_HEADER, b"\x01\x00\x00\x00\x00\x00\x04\x00\n\x002\xce")  # a Close
def test_random_bytes_from_the_first_byte_never_crash(prefix: bytes, garbage: bytes) -> None:
    """Whatever arrives first, the broker answers in one of three well-formed ways: it waits
    for the rest of a protocol header, refuses a wrong header with its own header (and closes),
    or greets with Connection.Start; after that, at most one Connection.Close with a hard
    RabbitMQ reply code (never 541, which means a broker bug), and then nothing more."""
    data = prefix + garbage
    client = Client(Broker())
    conn = client.conn
    conn.receive_data(data)
    out = conn.data_to_send()
    if len(data) < 8 and codec.PROTOCOL_HEADER.startswith(data):  # incomplete: keep waiting
        assert (out, conn.state, conn.should_close) == (b"", State.AWAIT_HEADER, False)
        return
    if not data.startswith(codec.PROTOCOL_HEADER):  # refused: our header, then hang up
        assert out == codec.PROTOCOL_HEADER
        assert conn.state is State.CLOSED and conn.should_close
        return
    frames = decode_frames(out)
    assert isinstance(frames[0][1], commands.Connection.Start), frames
    rest = frames[1:]
    assert all(channel == 0 for channel, _value in rest), rest
    closes = [value for _channel, value in rest if isinstance(value, commands.Connection.Close)]
    assert [value for _channel, value in rest] == closes[:1], rest  # nothing but one Close
    if closes:
        code = ReplyCode(closes[0].reply_code)  # a known code, not just any number
        assert code is not ReplyCode.INTERNAL_ERROR and code.closes_connection, closes[0]
        assert closes[0].reply_text.startswith(code.name), closes[0]
        assert conn.state in (State.CLOSING, State.CLOSED)
        # a closing connection says nothing more, but for the Close-Ok a crossing
        # Connection.Close gets (AMQP 0-9-1: a peer that sent Close answers a Close with
        # Close-Ok; found by this test when its garbage was a Connection.Close frame)
        conn.receive_data(garbage)
        later = decode_frames(conn.data_to_send())
        assert all(isinstance(value, commands.Connection.CloseOk) for _ch, value in later), later
    else:
        assert conn.state is State.AWAIT_START_OK and not conn.should_close


def test_internal_errors_become_541_for_that_connection_only() -> None:
    broker = Broker()
    client = Client(broker)
    client.handshake()
    client.open_channel()

    def boom(*_args: object) -> None:
        raise RuntimeError("injected")

    client.conn.channels[1]._handlers[commands.Queue.Purge.index] = boom
    client.send(1, commands.Queue.Purge(queue="x"))
    close = client.methods()[-1]
    assert isinstance(close, commands.Connection.Close) and close.reply_code == 541
