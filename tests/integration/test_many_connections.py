"""A thousand clients connecting at once, each through the whole handshake, then closing:
every one is served (with ``--workers N``, every one handed over to its vhost's worker by
worker 0; with "/" spread, to the workers in turn), none is left open, and the broker then
serves as before."""

from __future__ import annotations

import asyncio
import io
import json
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

import pika
import pytest
from pamqp import commands, frame

from amqpd.cli.ctl import main as ctl
from tests.conftest import node_under_test
from tests.integration.raw_client import PROTOCOL_HEADER

DEADLINE = 60.0


async def _open_and_close(port: int, n: int) -> int:
    async def read_frame(reader: asyncio.StreamReader, buf: bytearray) -> Any:
        while True:
            if len(buf) >= 7:
                size = int.from_bytes(buf[3:7], "big")
                if len(buf) >= size + 8:
                    consumed, _channel, value = frame.unmarshal(bytes(buf[: size + 8]))
                    del buf[:consumed]
                    return value
            chunk = await reader.read(65536)
            if not chunk:
                raise ConnectionError("closed by the broker")
            buf += chunk

    async def close_writer(writer: asyncio.StreamWriter) -> None:
        writer.close()
        with suppress(OSError):
            await writer.wait_closed()

    async def handshake() -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytearray]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            return await start(reader, writer)
        except BaseException:
            await close_writer(writer)  # a failed handshake leaves no socket behind
            raise

    async def start(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytearray]:
        buf = bytearray()
        writer.write(PROTOCOL_HEADER)
        assert isinstance(await read_frame(reader, buf), commands.Connection.Start)
        writer.write(
            frame.marshal(
                commands.Connection.StartOk(
                    client_properties={}, mechanism="PLAIN", response="\0guest\0guest"
                ),
                0,
            )
        )
        tune = await read_frame(reader, buf)
        assert isinstance(tune, commands.Connection.Tune), tune
        writer.write(
            frame.marshal(
                commands.Connection.TuneOk(channel_max=2047, frame_max=131072, heartbeat=0),
                0,
            )
            + frame.marshal(commands.Connection.Open(virtual_host="/"), 0)
        )
        assert isinstance(await read_frame(reader, buf), commands.Connection.OpenOk)
        return reader, writer, buf

    async def close(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, buf: bytearray
    ) -> None:
        writer.write(
            frame.marshal(
                commands.Connection.Close(
                    reply_code=200, reply_text="bye", class_id=0, method_id=0
                ),
                0,
            )
        )
        assert isinstance(await read_frame(reader, buf), commands.Connection.CloseOk)
        await close_writer(writer)

    results = await asyncio.gather(*(handshake() for _ in range(n)), return_exceptions=True)
    opened = [item for item in results if not isinstance(item, BaseException)]
    try:
        assert len(opened) == n, [item for item in results if isinstance(item, BaseException)][:3]
        closed = await asyncio.gather(*(close(*item) for item in opened), return_exceptions=True)
        assert not [item for item in closed if item is not None], closed[:3]
    finally:  # every socket is closed, whatever failed
        await asyncio.gather(*(close_writer(writer) for _reader, writer, _buf in opened))
    return len(opened)


def _connections(data: Path) -> int:
    """How many client connections the broker lists (``amqpd ctl list-connections``)."""
    out = io.StringIO()
    assert ctl(["list-connections", "name", "--data-dir", str(data), "--format", "json"], out) == 0
    return len(json.loads(out.getvalue()))


def test_a_thousand_concurrent_connections_then_still_serving(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    with node_under_test(tmp_path_factory, data_dir=data) as server:
        assert asyncio.run(_open_and_close(server.port, 1000)) == 1000
        deadline = time.monotonic() + DEADLINE
        while _connections(data):  # the closes reach every worker (polled: no event here)
            assert time.monotonic() < deadline, f"{_connections(data)} connections left"
            time.sleep(0.05)
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.port))
        try:
            channel = conn.channel()
            channel.queue_declare("after-1000", auto_delete=True)
            channel.basic_publish("", "after-1000", b"still serving")
            assert channel.basic_get("after-1000", auto_ack=True)[2] == b"still serving"
        finally:
            conn.close()
