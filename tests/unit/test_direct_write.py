"""amqpd/shell/direct_write.py: output written straight to an idle transport, or left for
the writer task (a transport with a backlog, large output, no transport). No sockets: a
fake transport records what it is given."""

from __future__ import annotations

from pamqp import commands

from amqpd.model.broker import Broker
from amqpd.shell.direct_write import DIRECT_MAX, transport_of, write_now
from tests.unit.engine_driver import Client


class FakeTransport:
    """Keeps ``kept`` bytes of each write unsent (a full socket buffer), as asyncio's does."""

    def __init__(self, backlog: int = 0, kept: int = 0, closing: bool = False) -> None:
        self.backlog = backlog
        self.kept = kept
        self.closing = closing
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)
        self.backlog += min(self.kept, len(data))

    def get_write_buffer_size(self) -> int:
        return self.backlog

    def is_closing(self) -> bool:
        return self.closing


def _client_with_output() -> Client:
    client = Client(Broker())
    client.handshake()
    client.open_channel()
    client.received()
    client.send(1, commands.Queue.Declare(queue="q"))  # declare-ok waits in the output
    return client


def test_an_idle_transport_gets_the_output_at_once() -> None:
    client = _client_with_output()
    transport = FakeTransport()
    assert write_now(client.conn, transport) is True
    assert not client.conn.output_pending
    assert len(transport.written) == 1
    assert transport.written[0].startswith(b"\x01\x00\x01")  # a method frame on channel 1
    assert b"\x00\x32\x00\x0b" in transport.written[0]  # queue.declare-ok


def test_a_transport_with_a_backlog_is_left_to_the_writer() -> None:
    for transport in (FakeTransport(backlog=10), FakeTransport(closing=True)):
        client = _client_with_output()
        assert write_now(client.conn, transport) is None
        assert transport.written == []
        assert client.conn.output_pending


def test_a_partial_write_asks_the_writer_to_wait_for_the_drain() -> None:
    client = _client_with_output()
    transport = FakeTransport(kept=5)
    assert write_now(client.conn, transport) is False
    assert len(transport.written) == 1
    assert not client.conn.output_pending


def test_large_output_goes_through_the_writer() -> None:
    client = _client_with_output()
    for n in range(DIRECT_MAX // 20 + 1):
        client.send(1, commands.Queue.Declare(queue=f"q{n}"))
    assert client.conn.output_size > DIRECT_MAX
    transport = FakeTransport()
    assert write_now(client.conn, transport) is None
    assert transport.written == []


def test_only_a_stream_with_a_transport_has_one() -> None:
    class Stream:
        def __init__(self, transport: object) -> None:
            self._transport = transport

    fake = FakeTransport()
    assert transport_of(Stream(fake)) is fake
    assert transport_of(Stream(object())) is None
    assert transport_of(object()) is None
