"""Worker 0's gate (amqpd/shell/workers/front.py) keeps a handshake's timers: a connection
we sent Connection.Close to during its handshake (a 10 KB Start-Ok: 501) is closed once
the client's 3 s to answer are over, as on one process, not at the handshake timeout. The
gate used to wait in a read that only the client could end, so the socket lived until
the handshake timeout (10 s), which test_wire_compat.py's spread pass once saw."""

from __future__ import annotations

import time
from typing import Any, cast

import anyio
import anyio.abc
from pamqp import commands, frame

from amqpd.engine.connection import Connection
from amqpd.engine.connection_timers import CLOSE_TIMEOUT
from amqpd.model.broker import Broker, BrokerConfig
from amqpd.shell.workers.front import _receive
from persistence.journal import Journal


class _Client:
    """The client's side as the gate reads it: ``bytes_left`` once, then silence."""

    def __init__(self, bytes_left: bytes = b"") -> None:
        self.bytes_left = bytes_left

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self.bytes_left:
            data, self.bytes_left = self.bytes_left[:max_bytes], self.bytes_left[max_bytes:]
            return data
        await anyio.sleep_forever()
        raise AssertionError("never")


def _refused_handshake(started: float) -> Connection:
    """A connection that sent a 10 KB Start-Ok at ``started``: we answered Close 501."""
    conn = Connection(Broker(BrokerConfig(), Journal()), started, "127.0.0.1:5672")
    conn.receive_data(b"AMQP\x00\x00\x09\x01", started)
    start_ok = commands.Connection.StartOk(
        client_properties={"padding": "x" * 10_000}, mechanism="PLAIN", response="\0guest\0guest"
    )
    conn.receive_data(frame.marshal(start_ok, 0), started)
    assert b"frame_too_large" in conn.data_to_send()
    assert not conn.should_close  # the client may still answer Close-Ok
    return conn


def _gated(client: _Client) -> anyio.abc.ByteStream:
    return cast(anyio.abc.ByteStream, client)


def test_a_silent_client_ends_the_gated_handshake_at_its_close_timeout() -> None:
    conn = _refused_handshake(time.time())
    handshake_timeout = conn.broker.config.handshake_timeout
    assert handshake_timeout > CLOSE_TIMEOUT + 2

    async def gate() -> Any:
        with anyio.fail_after(CLOSE_TIMEOUT + 2):  # well before the handshake timeout
            return await _receive(conn, _gated(_Client()))

    assert anyio.run(gate) is None
    assert conn.should_close


def test_the_gate_reads_what_a_client_sends_before_its_deadline() -> None:
    conn = _refused_handshake(time.time())

    async def gate() -> Any:
        return await _receive(conn, _gated(_Client(b"more")))

    assert anyio.run(gate) == b"more"
    assert not conn.should_close
