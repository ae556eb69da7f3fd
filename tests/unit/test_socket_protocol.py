"""amqpd/shell/socket_protocol.py: the protocol that feeds a plain TCP connection as data
arrives. No sockets: a fake transport records pausing and resuming; the connection is the
real engine's (alarms, end of stream) or a stand-in (a flow delay, a bug)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import cast

from pamqp import frame

from amqpd.engine.connection import Connection
from amqpd.model.alarms import CLEAR_READINGS
from amqpd.model.broker import Broker, BrokerConfig
from amqpd.shell.socket_protocol import READ_SIZE, FeedProtocol
from tests.unit.engine_driver import Client
from tests.unit.protocol_support import counts, declare, publish_frames

CAPABILITIES = {"connection.blocked": True}


class FakeTransport:
    def __init__(self) -> None:
        self.reading = True
        self.closing = False
        self.resumed = 0

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.protocol = protocol

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True
        self.resumed += 1

    def is_closing(self) -> bool:
        return self.closing


class StandIn:
    """A connection that records what it is given and answers ``read_delay`` from a list."""

    def __init__(self, delays: list[float | None] | None = None, fail: bool = False) -> None:
        self.delays = delays or []
        self.fail = fail
        self.fed: list[bytes] = []
        self.should_close = False
        self.lost = 0
        self.move_to: int | None = None  # set: it moves to that worker (engine/moving.py)

    def receive_data(self, data: bytes, now: float) -> None:
        if self.fail:
            raise RuntimeError("a bug")
        self.fed.append(data)

    def read_delay(self, now: float) -> float | None:
        return self.delays.pop(0) if self.delays else None

    def connection_lost(self) -> None:
        self.lost += 1
        self.should_close = True


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())  # type: ignore[arg-type]


def protocol(conn: object, transport: FakeTransport, calls: list[str]) -> FeedProtocol:
    return FeedProtocol(cast(Connection, conn), transport, lambda: calls.append("after_core"))


def publisher(broker: Broker) -> Client:
    client = Client(broker, capabilities=CAPABILITIES)
    client.handshake()
    client.open_channel(1)
    declare(client, 1, "q")
    client.received()
    return client


def test_each_chunk_is_fed_then_after_core_runs() -> None:
    async def test() -> None:
        conn, transport, calls = StandIn(), FakeTransport(), []
        reader = protocol(conn, transport, calls)
        reader.start([b"before the swap"], eof=False)
        reader.data_received(b"abc")
        assert conn.fed == [b"before the swap", b"abc"]
        assert calls == ["after_core", "after_core"]
        assert transport.reading and not reader.finished.is_set()

    run(test)


def test_an_alarm_stops_reading_mid_message_until_the_engine_unpauses() -> None:
    async def test() -> None:
        broker = Broker(BrokerConfig(memory_high_watermark=1000))
        client = publisher(broker)
        transport = FakeTransport()
        reader = protocol(client.conn, transport, [])
        reader.start([], eof=False)
        broker.memory_used(2000)
        publish, content, body = publish_frames("q", b"half")
        reader.data_received(frame.marshal(publish, 1) + frame.marshal(content, 1))
        assert not transport.reading  # the body stays unread
        reader.data_received(frame.marshal(body, 1))  # a transport that delivers anyway
        reader.unpause()  # still blocked: looks again, stays paused
        await asyncio.sleep(0)
        assert not transport.reading
        for _ in range(CLEAR_READINGS):
            broker.memory_used(10)
        assert client.conn in client.conn.outbox.take_resume()
        reader.unpause()  # what the server's after_core does for a resumed connection
        await asyncio.sleep(0)
        assert transport.reading
        client.received()  # blocked, unblocked
        assert counts(client, 1, "q") == (1, 0)  # the held body completed the message

    run(test)


async def until_reading(transport: FakeTransport) -> None:
    """Let the loop run the protocol's callbacks (one piece each) until it reads again."""
    for _ in range(100):
        if transport.reading:
            return
        await asyncio.sleep(0)
    raise AssertionError("still paused")


def test_a_large_chunk_is_fed_one_piece_per_loop_iteration() -> None:
    async def test() -> None:
        conn, transport = StandIn(), FakeTransport()
        reader = protocol(conn, transport, [])
        reader.start([], eof=False)
        data = bytes(range(256)) * (3 * READ_SIZE // 256 + 1)
        reader.data_received(data)
        assert len(conn.fed) == 1 and not transport.reading  # the writers run meanwhile
        await asyncio.sleep(0)
        assert len(conn.fed) == 2
        await until_reading(transport)
        assert b"".join(conn.fed) == data and max(map(len, conn.fed)) == READ_SIZE

    run(test)


def test_an_alarm_stops_a_large_chunk_between_its_pieces() -> None:
    async def test() -> None:
        broker = Broker(BrokerConfig(memory_high_watermark=1000))
        client = publisher(broker)
        transport = FakeTransport()
        reader = protocol(client.conn, transport, [])
        reader.start([], eof=False)
        one = b"".join(frame.marshal(f, 1) for f in publish_frames("q", b"x" * 1000))
        total = 3 * READ_SIZE // len(one)
        queue = broker.vhosts["/"].queues["q"]  # (mid-frame: no passive declare)
        broker.memory_used(2000)
        reader.data_received(one * total)
        stored = len(queue.ready)
        assert 0 < stored < total  # the first piece only
        for _ in range(5):
            await asyncio.sleep(0)
        assert len(queue.ready) == stored and not transport.reading  # blocked
        for _ in range(CLEAR_READINGS):
            broker.memory_used(10)
        reader.unpause()
        await until_reading(transport)
        client.received()  # blocked, unblocked
        assert counts(client, 1, "q") == (total, 0)

    run(test)


def test_a_flow_delay_pauses_reading_for_that_long() -> None:
    async def test() -> None:
        conn, transport = StandIn(delays=[None, 0.01, 0.01, None]), FakeTransport()
        reader = protocol(conn, transport, [])
        reader.start([], eof=False)
        reader.data_received(b"1")
        assert not transport.reading
        reader.data_received(b"2")  # held until the delay is over
        assert conn.fed == [b"1"]
        while not transport.reading:
            await asyncio.sleep(0.01)
        assert conn.fed == [b"1", b"2"]

    run(test)


def test_a_bug_finishes_the_reader_with_it_and_reads_no_more() -> None:
    async def test() -> None:
        conn, transport = StandIn(fail=True), FakeTransport()
        reader = protocol(conn, transport, [])
        reader.start([], eof=False)
        reader.data_received(b"boom")
        assert reader.finished.is_set() and isinstance(reader.failure, RuntimeError)
        assert not transport.reading
        conn.fail = False
        reader.data_received(b"more")
        assert conn.fed == []

    run(test)


def test_end_of_stream_and_a_lost_transport_tell_the_connection_once() -> None:
    async def test() -> None:
        for end in ("eof", "lost"):
            conn, transport = StandIn(), FakeTransport()
            reader = protocol(conn, transport, [])
            reader.start([], eof=False)
            if end == "eof":
                assert reader.eof_received() is True  # half-open: the writer may flush
            else:
                reader.connection_lost(ConnectionResetError())
            reader.connection_lost(None)
            assert conn.lost == 1 and reader.finished.is_set() and reader.failure is None

    run(test)


def test_a_closing_connection_reads_no_more_and_a_closed_reader_ignores_callbacks() -> None:
    async def test() -> None:
        conn, transport = StandIn(), FakeTransport()
        reader = protocol(conn, transport, [])
        reader.start([], eof=False)
        conn.should_close = True
        reader.data_received(b"after close")
        assert conn.fed == [] and reader.finished.is_set() and not transport.reading
        conn2 = StandIn()
        reader2 = protocol(conn2, FakeTransport(), [])
        reader2.start([], eof=False)
        reader2.close()
        reader2.data_received(b"late")
        reader2.connection_lost(None)
        assert conn2.fed == [] and conn2.lost == 0

    run(test)


def test_a_moving_connection_keeps_what_it_was_not_fed_for_the_worker_it_moves_to() -> None:
    async def test() -> None:
        conn, transport = StandIn(), FakeTransport()
        reader = protocol(conn, transport, [])
        reader.start([], eof=False)
        conn.move_to = 1  # the engine stopped at a frame that moves it (engine/moving.py)
        conn.should_close = True
        reader.data_received(b"sent meanwhile")
        reader.data_received(b" and more")
        assert conn.fed == [] and reader.finished.is_set() and not transport.reading
        assert reader.unread() == b"sent meanwhile and more"  # goes along, in order

    run(test)


def test_end_of_stream_seen_before_the_swap_comes_after_the_data_read_then() -> None:
    async def test() -> None:
        conn, transport = StandIn(), FakeTransport()
        reader = protocol(conn, transport, [])
        reader.start([b"last words"], eof=True)
        assert conn.fed == [b"last words"] and conn.lost == 1 and reader.finished.is_set()

    run(test)
