"""Wire helpers of the load generator: broker URLs, pre-encoded frames, a frame splitter.

Everything cold (the handshake, declarations, consume) is encoded and decoded with pamqp.
Only the hot frames are written here with `struct`: the publish template (Basic.Publish,
content header and body, with an 8-byte timestamp at the start of the body), Basic.Ack and
Tx.Commit. tests/unit/test_perf_wire.py checks them byte for byte against pamqp.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final
from urllib.parse import unquote, urlparse

from pamqp import body, commands, frame, header
from pamqp.common import FieldTable

FRAME_METHOD: Final = 1
FRAME_HEADER: Final = 2
FRAME_BODY: Final = 3
FRAME_HEARTBEAT: Final = 8
FRAME_END: Final = 0xCE
PROTOCOL_HEADER: Final = b"AMQP\x00\x00\x09\x01"

BASIC_DELIVER: Final = 0x003C003C
BASIC_ACK: Final = 0x003C0050
BASIC_NACK: Final = 0x003C0078
BASIC_RETURN: Final = 0x003C0032
TX_COMMIT_OK: Final = 0x005A0015

FRAME_HEAD = struct.Struct(">BHI")
METHOD_INDEX = struct.Struct(">I")
U64 = struct.Struct(">Q")
STAMP = struct.Struct(">Q")  # the publish timestamp at the start of every body
STAMP_SIZE: Final = STAMP.size
_ACK = struct.Struct(">BHIIQBB")


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    """Where and as whom to connect, parsed from an ``amqp://`` URL."""

    host: str
    port: int
    user: str
    password: str
    vhost: str

    @classmethod
    def parse(cls, url: str) -> BrokerAddress:
        """Parse ``amqp://user:password@host:port/vhost`` (pika's rules for the vhost).

        An empty path or ``/`` means the vhost ``/``; ``%2F`` is ``/`` too.

        Raises:
            ValueError: for a scheme other than ``amqp`` or a malformed port.
        """
        parts = urlparse(url)
        if parts.scheme != "amqp":
            raise ValueError(f"unsupported URL scheme {parts.scheme!r} (only amqp:// is)")
        path = parts.path[1:] if parts.path.startswith("/") else parts.path
        return cls(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 5672,
            user=unquote(parts.username or "guest"),
            password=unquote(parts.password or "guest"),
            vhost=unquote(path) if path else "/",
        )


@dataclass(frozen=True, slots=True)
class PublishTemplate:
    """One message pre-encoded as Basic.Publish + content header + body frames.

    The body starts with an 8-byte big-endian timestamp (nanoseconds) when it is at least
    8 bytes long, so a batch costs one concatenation and one repetition, not an encoding.
    """

    prefix: bytes
    suffix: bytes
    stamped: bool

    def message(self, stamp: int) -> bytes:
        """The frames of one message carrying ``stamp``."""
        if not self.stamped:
            return self.prefix
        return self.prefix + STAMP.pack(stamp) + self.suffix

    def batch(self, stamp: int, count: int) -> bytes:
        """``count`` messages, all stamped ``stamp``, ready for one socket write."""
        return self.message(stamp) * count


def publish_template(
    channel: int,
    exchange: str,
    routing_key: str,
    size: int,
    frame_max: int,
    *,
    persistent: bool = False,
    headers: FieldTable | None = None,
    mandatory: bool = False,
) -> PublishTemplate:
    """Pre-encode a publish of a ``size``-byte body (split to respect ``frame_max``)."""
    method = frame.marshal(
        commands.Basic.Publish(exchange=exchange, routing_key=routing_key, mandatory=mandatory),
        channel,
    )
    props = commands.Basic.Properties(delivery_mode=2 if persistent else 1, headers=headers)
    content_header = frame.marshal(header.ContentHeader(0, size, props), channel)
    chunk = frame_max - 8
    payload = bytes(size)
    bodies = [
        frame.marshal(body.ContentBody(payload[start : start + chunk]), channel)
        for start in range(0, size, chunk)
    ]
    if size < STAMP_SIZE:
        return PublishTemplate(method + content_header + b"".join(bodies), b"", False)
    first = bodies[0]
    prefix = method + content_header + first[:7]
    suffix = first[7 + STAMP_SIZE :] + b"".join(bodies[1:])
    return PublishTemplate(prefix, suffix, True)


def encode_ack(channel: int, delivery_tag: int, multiple: bool) -> bytes:
    """A Basic.Ack method frame."""
    return _ACK.pack(FRAME_METHOD, channel, 13, BASIC_ACK, delivery_tag, int(multiple), FRAME_END)


def encode_tx_commit(channel: int) -> bytes:
    """A Tx.Commit method frame."""
    return FRAME_HEAD.pack(FRAME_METHOD, channel, 4) + b"\x00\x5a\x00\x14\xce"


def decode_confirm(payload: bytes) -> tuple[int, bool]:
    """(delivery_tag, multiple) of a Basic.Ack or Basic.Nack method payload."""
    return U64.unpack_from(payload, 4)[0], bool(payload[12] & 1)


class FrameError(Exception):
    """The broker sent bytes that are not AMQP frames."""


class FrameSplitter:
    """Split a received byte stream into (frame_type, channel, payload) tuples.

    Used on the cold paths and by producers, which receive few frames (coalesced confirms).
    """

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, int, bytes]]:
        """Append ``data`` and return every frame now complete.

        Raises:
            FrameError: on a bad frame-end octet.
        """
        buf = self._buf
        buf += data
        out: list[tuple[int, int, bytes]] = []
        pos = 0
        size_buf = len(buf)
        while size_buf - pos >= 8:
            frame_type, channel, size = FRAME_HEAD.unpack_from(buf, pos)
            end = pos + 7 + size
            if end >= size_buf:
                break
            if buf[end] != FRAME_END:
                raise FrameError(f"bad frame end octet {buf[end]:#04x}")
            out.append((frame_type, channel, bytes(buf[pos + 7 : end])))
            pos = end + 1
        if pos:
            del buf[:pos]
        return out
