"""Malformed input never crashes the engine: it answers with an AMQP error or keeps going."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands

from amqpd.engine.connection import State
from amqpd.model.broker import Broker
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


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_from_the_first_byte_never_crash(data: bytes) -> None:
    client = Client(Broker())
    client.feed(data)
    client.conn.data_to_send()


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
