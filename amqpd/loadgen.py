"""A lean pipelined AMQP 0-9-1 publisher for measurements (the seed of ``amqpd perf``).

Publishes pre-encoded frames in batches so the client is not the bottleneck, over plain
asyncio streams. Works against any AMQP 0-9-1 broker.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

from pamqp import body, commands, frame, header

from amqpd import codec


@dataclass(slots=True)
class PublishResult:
    """Outcome of one run."""

    messages: int
    seconds: float
    acks: int
    nacks: int
    confirm_frames: int

    @property
    def rate(self) -> float:
        """Messages per second."""
        return self.messages / self.seconds if self.seconds else 0.0


class RawClient:
    """Minimal client: handshake, one channel, raw frame I/O."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.frames = codec.FrameReader(131072)

    @classmethod
    async def connect(cls, url: str) -> RawClient:
        """Connect and open channel 1."""
        parts = urlparse(url)
        reader, writer = await asyncio.open_connection(
            parts.hostname or "127.0.0.1", parts.port or 5672
        )
        client = cls(reader, writer)
        user, password = unquote(parts.username or "guest"), unquote(parts.password or "guest")
        vhost = unquote(parts.path[1:]) if parts.path not in ("", "/") else "/"
        writer.write(codec.PROTOCOL_HEADER)
        await client.expect(commands.Connection.Start)
        client.send(
            0,
            commands.Connection.StartOk(
                client_properties={"product": "amqpd-loadgen"},
                mechanism="PLAIN",
                response=f"\0{user}\0{password}",
            ),
        )
        tune = await client.expect(commands.Connection.Tune)
        assert isinstance(tune, commands.Connection.Tune)
        client.send(
            0,
            commands.Connection.TuneOk(
                channel_max=tune.channel_max, frame_max=tune.frame_max, heartbeat=0
            ),
        )
        client.send(0, commands.Connection.Open(virtual_host=vhost))
        await client.expect(commands.Connection.OpenOk)
        client.send(1, commands.Channel.Open())
        await client.expect(commands.Channel.OpenOk)
        return client

    def send(self, channel: int, method: object) -> None:
        """Send one method frame."""
        self.writer.write(frame.marshal(method, channel))  # type: ignore[arg-type]

    async def read_frames(self) -> list[tuple[int, int, bytes]]:
        """At least one complete frame (type, channel, payload)."""
        out: list[tuple[int, int, bytes]] = []
        while not out:
            data = await self.reader.read(65536)
            if not data:
                raise ConnectionError("broker closed the connection")
            self.frames.feed(data)
            while (item := self.frames.next_frame()) is not None:
                out.append(item)
            self.frames.compact()
        return out

    async def expect(self, kind: type) -> object:
        """Read until a method of ``kind`` arrives (others on channel 0/1 are errors)."""
        while True:
            for frame_type, _channel, payload in await self.read_frames():
                if frame_type != codec.FRAME_METHOD:
                    continue
                index = codec.method_index(payload)
                method = codec.decode_method(index, payload)
                if isinstance(method, kind):
                    return method
                if isinstance(method, commands.Connection.Close | commands.Channel.Close):
                    raise ConnectionError(
                        f"closed by broker: {method.reply_code} {method.reply_text}"
                    )

    async def close(self) -> None:
        """Close the connection politely."""
        self.send(
            0, commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
        )
        try:
            await asyncio.wait_for(self.expect(commands.Connection.CloseOk), 5)
        finally:
            self.writer.close()
            await self.writer.wait_closed()


def encode_publish(routing_key: str, payload: bytes, persistent: bool, exchange: str = "") -> bytes:
    """One pre-encoded publish (method + header + body frames) on channel 1."""
    props = commands.Basic.Properties(delivery_mode=2 if persistent else 1)
    return b"".join(
        (
            frame.marshal(commands.Basic.Publish(exchange=exchange, routing_key=routing_key), 1),
            frame.marshal(header.ContentHeader(0, len(payload), props), 1),
            frame.marshal(body.ContentBody(payload), 1),
        )
    )


async def publish_with_confirms(
    url: str, queue: str, count: int, size: int, window: int, persistent: bool
) -> PublishResult:
    """Publish ``count`` messages keeping at most ``window`` unconfirmed."""
    client = await RawClient.connect(url)
    client.send(1, commands.Queue.Declare(queue=queue, durable=True))
    await client.expect(commands.Queue.DeclareOk)
    client.send(1, commands.Confirm.Select())
    await client.expect(commands.Confirm.SelectOk)
    one = encode_publish(queue, b"x" * size, persistent)
    sent = confirmed = acks = nacks = frames = 0
    start = time.perf_counter()
    while confirmed < count:
        room = min(window - (sent - confirmed), count - sent)
        if room > 0:
            client.writer.write(one * room)
            sent += room
        for frame_type, _channel, payload in await client.read_frames():
            if frame_type != codec.FRAME_METHOD:
                continue
            index = codec.method_index(payload)
            if index in (codec.BASIC_ACK, codec.BASIC_NACK):
                tag = int.from_bytes(payload[4:12], "big")
                multiple = bool(payload[12] & 1)
                settled = tag - confirmed if multiple else 1
                confirmed = tag if multiple else confirmed + 1
                frames += 1
                if index == codec.BASIC_ACK:
                    acks += settled
                else:
                    nacks += settled
            elif index in (commands.Channel.Close.index, commands.Connection.Close.index):
                raise ConnectionError(f"closed by broker: {codec.decode_method(index, payload)}")
    seconds = time.perf_counter() - start
    client.send(1, commands.Queue.Purge(queue=queue))
    await client.expect(commands.Queue.PurgeOk)
    await client.close()
    return PublishResult(count, seconds, acks, nacks, frames)


async def publish_tx_per_message(
    url: str, queue: str, count: int, size: int, persistent: bool
) -> PublishResult:
    """Publish ``count`` messages with a tx.commit after each one."""
    client = await RawClient.connect(url)
    client.send(1, commands.Queue.Declare(queue=queue, durable=True))
    await client.expect(commands.Queue.DeclareOk)
    client.send(1, commands.Tx.Select())
    await client.expect(commands.Tx.SelectOk)
    one = encode_publish(queue, b"x" * size, persistent) + frame.marshal(commands.Tx.Commit(), 1)
    start = time.perf_counter()
    for _ in range(count):
        client.writer.write(one)
        await client.expect(commands.Tx.CommitOk)
    seconds = time.perf_counter() - start
    client.send(1, commands.Queue.Purge(queue=queue))
    await client.expect(commands.Queue.PurgeOk)
    await client.close()
    return PublishResult(count, seconds, count, 0, count)
