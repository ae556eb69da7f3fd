"""A minimal asyncio AMQP 0-9-1 client for the load generator: one connection, channel 1.

The handshake and every cold method go through pamqp; producers and consumers write their
hot frames themselves (see `interop.perf.wire`) on `AMQPClient.writer` and parse what they
read. Heartbeats are switched off (tune-ok heartbeat=0), so an idle client never has to
answer anything.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TypeVar

from pamqp import commands, frame
from pamqp.base import Frame as Method
from pamqp.common import FieldTable

from interop.perf.wire import (
    FRAME_METHOD,
    METHOD_INDEX,
    PROTOCOL_HEADER,
    BrokerAddress,
    FrameSplitter,
)

M = TypeVar("M", bound=Method)
CHANNEL = 1
READ_SIZE = 262144
CLIENT_PROPERTIES: FieldTable = {
    "product": "amqpd perf",
    "capabilities": {
        "publisher_confirms": True,
        "basic.nack": True,
        "consumer_cancel_notify": True,
        "authentication_failure_close": True,
    },
}


class BrokerClosed(Exception):
    """The broker closed the connection or channel, or the socket went away."""


def decode_method(payload: bytes) -> Method | None:
    """Decode a method frame payload with pamqp (None for an unknown method)."""
    cls = commands.INDEX_MAPPING.get(METHOD_INDEX.unpack_from(payload, 0)[0])
    if cls is None:
        return None
    method: Method = cls()
    method.unmarshal(payload[4:])
    return method


def closed_error(method: Method) -> BrokerClosed | None:
    """A `BrokerClosed` for a Connection.Close or Channel.Close method, else None."""
    if isinstance(method, commands.Connection.Close | commands.Channel.Close):
        scope = "connection" if isinstance(method, commands.Connection.Close) else "channel"
        return BrokerClosed(f"broker closed the {scope}: {method.reply_code} {method.reply_text}")
    return None


class AMQPClient:
    """One connection with channel 1 open."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.frames = FrameSplitter()
        self.frame_max = 131072
        self._closing = False

    @classmethod
    async def connect(cls, address: BrokerAddress, name: str = "amqpd perf") -> AMQPClient:
        """Connect, authenticate with PLAIN, open the vhost and channel 1.

        Raises:
            BrokerClosed: if the broker refuses (e.g. bad credentials or vhost).
            OSError: if the TCP connection fails.
        """
        reader, writer = await asyncio.open_connection(address.host, address.port, limit=READ_SIZE)
        client = cls(reader, writer)
        writer.write(PROTOCOL_HEADER)
        await client.expect(commands.Connection.Start)
        properties: FieldTable = dict(CLIENT_PROPERTIES, connection_name=name)
        client.send_method(
            commands.Connection.StartOk(
                client_properties=properties,
                mechanism="PLAIN",
                response=f"\0{address.user}\0{address.password}",
            ),
            channel=0,
        )
        tune = await client.expect(commands.Connection.Tune)
        client.frame_max = tune.frame_max or 131072
        client.send_method(
            commands.Connection.TuneOk(
                channel_max=tune.channel_max, frame_max=client.frame_max, heartbeat=0
            ),
            channel=0,
        )
        client.send_method(commands.Connection.Open(virtual_host=address.vhost), channel=0)
        await client.expect(commands.Connection.OpenOk)
        await client.call(commands.Channel.Open(), commands.Channel.OpenOk)
        return client

    def send_method(self, method: Method, channel: int = CHANNEL) -> None:
        """Write one method frame (cold path, pamqp-encoded)."""
        self.writer.write(frame.marshal(method, channel))

    async def read_frames(self) -> list[tuple[int, int, bytes]]:
        """At least one complete frame (type, channel, payload).

        Raises:
            BrokerClosed: at end of stream.
        """
        while True:
            data = await self.reader.read(READ_SIZE)
            if not data:
                raise BrokerClosed("the broker closed the socket")
            frames = self.frames.feed(data)
            if frames:
                return frames

    async def expect(self, kind: type[M]) -> M:
        """Read until a method of ``kind`` arrives; frames of other kinds are skipped.

        Raises:
            BrokerClosed: if the broker closes the channel or connection instead.
        """
        while True:
            for frame_type, _channel, payload in await self.read_frames():
                if frame_type != FRAME_METHOD:
                    continue
                method = decode_method(payload)
                if isinstance(method, kind):
                    return method
                if method is not None and (error := closed_error(method)) is not None:
                    if isinstance(method, commands.Connection.Close):
                        self.send_method(commands.Connection.CloseOk(), channel=0)
                    raise error

    async def call(self, method: Method, reply: type[M]) -> M:
        """Send ``method`` on channel 1 and wait for its ``reply``."""
        self.send_method(method)
        return await self.expect(reply)

    async def close(self, timeout: float = 5.0) -> None:
        """Close the connection politely (Connection.Close, wait for Close-Ok), then the socket.

        Never raises: a broker that already went away is fine at this point.
        """
        if self._closing:
            return
        self._closing = True
        try:
            self.send_method(
                commands.Connection.Close(
                    reply_code=200, reply_text="bye", class_id=0, method_id=0
                ),
                channel=0,
            )
            await asyncio.wait_for(self.expect(commands.Connection.CloseOk), timeout)
        except (BrokerClosed, OSError, TimeoutError):
            pass
        finally:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()
