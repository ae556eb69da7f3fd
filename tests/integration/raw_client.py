"""A tiny raw AMQP 0-9-1 client for tests: `socket` + pamqp, nothing hidden.

It does only what a test asks: the handshake (optionally), sending any frame or any bytes,
and reading decoded frames with a timeout. It never answers anything on its own (no
heartbeats, no Close-Ok), so a test sees exactly what the broker sends and controls exactly
what the broker receives. Use it as a context manager: the socket is always closed.

    with RawClient.open(server.port) as client:
        client.open_channel(1)
        client.send_method(1, commands.Queue.Declare(queue="q", passive=True))
        close = client.expect(commands.Channel.Close, channel=1)
"""

from __future__ import annotations

import socket
import struct
import time
from types import TracebackType
from typing import Any, TypeVar

from pamqp import commands, frame
from pamqp.base import Frame as Method
from pamqp.body import ContentBody
from pamqp.header import ContentHeader, ProtocolHeader
from pamqp.heartbeat import Heartbeat

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_END = 0xCE
DEFAULT_TIMEOUT = 5.0
CLIENT_CAPABILITIES = {
    "authentication_failure_close": True,
    "consumer_cancel_notify": True,
    "publisher_confirms": True,
    "basic.nack": True,
}

AnyFrame = Method | ContentHeader | ContentBody | Heartbeat | ProtocolHeader
T = TypeVar("T")


class PeerClosed(Exception):
    """The broker closed the socket (EOF or reset) while we were reading."""


class RawClient:
    """One TCP connection to the broker, driven frame by frame."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buf = bytearray()
        self.frame_max = 131072
        self.channel_max = 2047
        self.heartbeat = 0
        self.server_properties: dict[str, Any] = {}
        self.received: list[tuple[int, AnyFrame]] = []  # every frame read, for diagnostics

    # -- lifecycle ---------------------------------------------------------------------------
    @classmethod
    def connect(
        cls, port: int, host: str = "127.0.0.1", timeout: float = DEFAULT_TIMEOUT
    ) -> RawClient:
        """A TCP connection with nothing sent yet."""
        sock = socket.create_connection((host, port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(sock)

    @classmethod
    def open(
        cls,
        port: int,
        *,
        user: str = "guest",
        password: str = "guest",
        vhost: str = "/",
        heartbeat: int = 0,
        channel_max: int | None = None,
        frame_max: int | None = None,
        host: str = "127.0.0.1",
    ) -> RawClient:
        """Connect and complete the handshake (up to Connection.Open-Ok)."""
        client = cls.connect(port, host)
        try:
            client.handshake(
                user=user,
                password=password,
                vhost=vhost,
                heartbeat=heartbeat,
                channel_max=channel_max,
                frame_max=frame_max,
            )
        except BaseException:
            client.close()
            raise
        return client

    def close(self) -> None:
        """Close the socket (idempotent; sends nothing)."""
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- handshake ---------------------------------------------------------------------------
    def start(
        self,
        user: str = "guest",
        password: str = "guest",
        capabilities: dict[str, bool] | None = None,
    ) -> None:
        """Protocol header, Connection.Start, Start-Ok (PLAIN) — stops before Tune.
        ``capabilities``: announced beside the default ones (e.g. connection.blocked)."""
        self.send_bytes(PROTOCOL_HEADER)
        start = self.expect(commands.Connection.Start, channel=0)
        self.server_properties = dict(start.server_properties or {})
        self.send_method(
            0,
            commands.Connection.StartOk(
                client_properties={
                    "product": "amqpd raw test client",
                    "capabilities": {**CLIENT_CAPABILITIES, **(capabilities or {})},
                },
                mechanism="PLAIN",
                response=f"\0{user}\0{password}",
                locale="en_US",
            ),
        )

    def tune(
        self, heartbeat: int = 0, channel_max: int | None = None, frame_max: int | None = None
    ) -> commands.Connection.Tune:
        """Read Connection.Tune and answer Tune-Ok with our choices (server's by default)."""
        tune = self.expect(commands.Connection.Tune, channel=0)
        self.channel_max = tune.channel_max if channel_max is None else channel_max
        self.frame_max = tune.frame_max if frame_max is None else frame_max
        self.heartbeat = heartbeat
        self.send_method(
            0,
            commands.Connection.TuneOk(
                channel_max=self.channel_max, frame_max=self.frame_max, heartbeat=heartbeat
            ),
        )
        return tune

    def handshake(
        self,
        *,
        user: str = "guest",
        password: str = "guest",
        vhost: str = "/",
        heartbeat: int = 0,
        channel_max: int | None = None,
        frame_max: int | None = None,
    ) -> None:
        """The whole handshake: header, Start-Ok, Tune-Ok, Open, Open-Ok."""
        self.start(user, password)
        self.tune(heartbeat, channel_max, frame_max)
        self.send_method(0, commands.Connection.Open(virtual_host=vhost))
        self.expect(commands.Connection.OpenOk, channel=0)

    # -- sending -----------------------------------------------------------------------------
    def send_bytes(self, data: bytes) -> None:
        """Send raw bytes."""
        self.sock.sendall(data)

    def send(self, channel: int, *frames: Method | ContentHeader | ContentBody | Heartbeat) -> None:
        """Marshal frames with pamqp and send them in one write."""
        self.send_bytes(b"".join(frame.marshal(value, channel) for value in frames))

    def send_method(self, channel: int, method: Method) -> None:
        """Send one method frame."""
        self.send(channel, method)

    def publish_frames(
        self,
        channel: int,
        body: bytes,
        exchange: str = "",
        routing_key: str = "",
        properties: commands.Basic.Properties | None = None,
        *,
        mandatory: bool = False,
        immediate: bool = False,
    ) -> list[Method | ContentHeader | ContentBody]:
        """Basic.Publish + content header + body frames (split to the negotiated frame_max)."""
        frames: list[Method | ContentHeader | ContentBody] = [
            commands.Basic.Publish(
                exchange=exchange,
                routing_key=routing_key,
                mandatory=mandatory,
                immediate=immediate,
            ),
            ContentHeader(0, len(body), properties or commands.Basic.Properties()),
        ]
        chunk = self.frame_max - 8
        frames += [ContentBody(body[i : i + chunk]) for i in range(0, len(body), chunk)]
        return frames

    def publish(
        self, channel: int, body: bytes, exchange: str = "", routing_key: str = "", **kw: Any
    ) -> None:
        """Send a whole message (see `publish_frames`)."""
        self.send(channel, *self.publish_frames(channel, body, exchange, routing_key, **kw))

    # -- receiving ---------------------------------------------------------------------------
    def _fill(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("no complete frame from the broker in time")
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            raise TimeoutError("no complete frame from the broker in time") from None
        except (ConnectionResetError, BrokenPipeError) as exc:
            raise PeerClosed(f"connection reset: {exc}") from exc
        if not data:
            raise PeerClosed("the broker closed the connection")
        self._buf += data

    def read_frame(self, timeout: float = DEFAULT_TIMEOUT) -> tuple[int, AnyFrame]:
        """The next frame as (channel, decoded frame); receives until one is complete.

        Raises:
            TimeoutError: no complete frame within ``timeout`` seconds.
            PeerClosed: the broker closed the socket first.
        """
        deadline = time.monotonic() + timeout
        while True:
            buf = self._buf
            if len(buf) >= 8 and buf[:4] == b"AMQP":
                value: AnyFrame = ProtocolHeader()
                value.unmarshal(bytes(buf[:8]))
                del buf[:8]
                self.received.append((0, value))
                return 0, value
            if len(buf) >= 7 and buf[:4] != b"AMQP":
                frame_type, channel, size = struct.unpack_from(">BHI", buf, 0)
                if len(buf) >= size + 8:
                    raw = bytes(buf[: size + 8])
                    del buf[: size + 8]
                    if raw[-1] != FRAME_END:
                        raise AssertionError(f"broker sent a bad frame end: {raw!r}")
                    if frame_type == 3 and size == 0:  # pamqp cannot unmarshal an empty body
                        value = ContentBody(b"")
                    else:
                        _consumed, channel, value = frame.unmarshal(raw)
                    self.received.append((channel, value))
                    return channel, value
            self._fill(deadline)

    def read_raw_frame(self, timeout: float = DEFAULT_TIMEOUT) -> tuple[int, int, bytes]:
        """The next frame undecoded, as (frame type, channel, payload): for tests that check
        the exact bytes the broker sends (e.g. the field types in a content header)."""
        deadline = time.monotonic() + timeout
        while True:
            buf = self._buf
            if len(buf) >= 7 and buf[:4] != b"AMQP":
                frame_type, channel, size = struct.unpack_from(">BHI", buf, 0)
                if len(buf) >= size + 8:
                    payload = bytes(buf[7 : 7 + size])
                    del buf[: size + 8]
                    return frame_type, channel, payload
            self._fill(deadline)

    def expect(
        self,
        kind: type[T],
        channel: int | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        skip_heartbeats: bool = True,
    ) -> T:
        """Read the next frame (skipping heartbeats) and assert its type and channel."""
        while True:
            number, value = self.read_frame(timeout)
            if skip_heartbeats and isinstance(value, Heartbeat):
                continue
            break
        assert isinstance(value, kind), f"expected {kind.__name__}, got {value!r} on {number}"
        if channel is not None:
            assert number == channel, f"expected {kind.__name__} on channel {channel}, got {number}"
        return value

    def rpc(
        self, channel: int, method: Method, reply: type[T], timeout: float = DEFAULT_TIMEOUT
    ) -> T:
        """Send a method and read its reply (on the same channel)."""
        self.send_method(channel, method)
        return self.expect(reply, channel=channel, timeout=timeout)

    def open_channel(self, channel: int) -> None:
        """Channel.Open -> Open-Ok."""
        self.rpc(channel, commands.Channel.Open(), commands.Channel.OpenOk)

    def read_until_closed(self, timeout: float = DEFAULT_TIMEOUT) -> list[tuple[int, AnyFrame]]:
        """Read frames until the broker closes the socket; return them.

        Raises:
            TimeoutError: the socket is still open after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        frames: list[tuple[int, AnyFrame]] = []
        while True:
            try:
                frames.append(self.read_frame(max(deadline - time.monotonic(), 0.0)))
            except PeerClosed:
                return frames

    def recv_until_closed(self, timeout: float = DEFAULT_TIMEOUT) -> bytes:
        """All raw bytes (including any already buffered) until the broker closes the socket.

        Raises:
            TimeoutError: the socket is still open after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._fill(deadline)
            except PeerClosed:
                data = bytes(self._buf)
                self._buf.clear()
                return data

    def expect_connection_close(
        self, reply_code: int, timeout: float = DEFAULT_TIMEOUT, answer: bool = True
    ) -> commands.Connection.Close:
        """Read Connection.Close with ``reply_code``; answer Close-Ok and wait for the socket
        to close if ``answer``."""
        close = self.expect(commands.Connection.Close, channel=0, timeout=timeout)
        assert close.reply_code == reply_code, f"expected {reply_code}, got {close!r}"
        if answer:
            self.send_method(0, commands.Connection.CloseOk())
            leftovers = self.read_until_closed(timeout)
            assert all(isinstance(f, Heartbeat) for _, f in leftovers), leftovers
        return close

    def expect_channel_close(
        self, channel: int, reply_code: int, timeout: float = DEFAULT_TIMEOUT, answer: bool = True
    ) -> commands.Channel.Close:
        """Read Channel.Close with ``reply_code`` on ``channel``; answer Close-Ok if ``answer``."""
        close = self.expect(commands.Channel.Close, channel=channel, timeout=timeout)
        assert close.reply_code == reply_code, f"expected {reply_code}, got {close!r}"
        if answer:
            self.send_method(channel, commands.Channel.CloseOk())
        return close
