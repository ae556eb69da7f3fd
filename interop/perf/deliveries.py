"""Allocation-light parsing of what a consumer receives: Deliver + header + body frames.

`DeliveryParser.feed` counts deliveries, remembers the last delivery tag, and collects the
publish timestamp of each message (the first 8 body bytes) run-length encoded, since
messages of one producer batch share a stamp. Any other method frame is handed back raw for
the cold path.

Two ways through a chunk:

- **Frame by frame** (`_frame`): every frame's head is unpacked in Python, ~1.8 µs per
  delivery of three frames. Always correct; used for anything unusual.
- **Record runs** (`_DeliveryLayout`): one consumer's deliveries are byte-for-byte the same
  shape (same consumer tag, exchange, routing key, properties and body size; only the
  delivery tag, the redelivered bit and the body differ), so once a delivery was parsed
  frame by frame, the next ``k`` complete deliveries are ``k`` records of that delivery's
  length. Every byte that decides the framing (each frame's type, channel and size, the
  method id, the body size, each frame-end octet) is checked for all ``k`` records at once
  with one strided slice per byte position, and the stamps are read with
  `struct.iter_unpack` into a `Counter`: C loops, a few hundred ns per delivery. A run that
  fails the check is halved until it passes; what is left goes frame by frame.

On a 2-core machine the load generator shares the cores with the broker (W3 delivers ~300k
messages/s), so each µs per delivery here is CPU the broker does not get.
"""

from __future__ import annotations

import struct
from collections import Counter
from operator import itemgetter

from interop.perf.wire import (
    BASIC_DELIVER,
    FRAME_BODY,
    FRAME_END,
    FRAME_HEAD,
    FRAME_HEADER,
    FRAME_METHOD,
    METHOD_INDEX,
    STAMP,
    STAMP_SIZE,
    U64,
    FrameError,
)

_FIRST = itemgetter(0)
_BODY_SIZE_AT = 4  # in a content header payload: class id, weight, then the body size


class _DeliveryLayout:
    """The shape of one delivery (its frames back to back), learnt from a parsed one."""

    __slots__ = ("checks", "size", "stamps", "tag_at", "tags")

    def __init__(self, record: bytes, method_size: int, header_size: int, body: bool) -> None:
        self.size = len(record)
        header_at = method_size + 8
        positions = [*range(11), method_size + 7]  # method frame head, method id, frame end
        positions += range(header_at, header_at + 7)  # header frame head
        body_size_at = header_at + 7 + _BODY_SIZE_AT
        positions += range(body_size_at, body_size_at + 8)
        positions.append(header_at + 7 + header_size)
        stamp_at = None
        if body:
            body_at = header_at + 8 + header_size
            positions += range(body_at, body_at + 7)
            positions.append(self.size - 1)
            if self.size - 1 - (body_at + 7) >= STAMP_SIZE:
                stamp_at = body_at + 7
        self.checks = [(at, record[at]) for at in positions]
        self.tag_at = 12 + record[11]  # after the consumer tag (a short string)
        self.tags = struct.Struct(f">{self.tag_at}xQ{self.size - self.tag_at - 8}x")
        self.stamps = (
            None
            if stamp_at is None
            else struct.Struct(f">{stamp_at}xQ{self.size - stamp_at - STAMP_SIZE}x")
        )

    def matches(self, region: bytearray, count: int) -> bool:
        """Whether ``region`` is ``count`` deliveries of this shape."""
        step = self.size
        return all(region[at::step].count(value) == count for at, value in self.checks)


class DeliveryParser:
    """Incremental parser of one consumer channel's incoming frames."""

    __slots__ = (
        "_between",
        "_body_left",
        "_buf",
        "_expect_stamp",
        "_layout",
        "_start",
        "deliveries",
        "keep_tags",
        "last_tag",
        "methods",
        "stamps",
        "tags",
    )

    def __init__(self, keep_tags: bool = False) -> None:
        self._buf = bytearray()
        self._expect_stamp = False
        self._between = True  # not inside a delivery's frames: a record run may start here
        self._body_left = -1  # body bytes still to come of the delivery being parsed, -1: none
        self._start = -1  # where in the buffer that delivery began (-1: in an earlier chunk)
        self._layout: _DeliveryLayout | None = None
        self.deliveries = 0
        self.last_tag = 0
        self.keep_tags = keep_tags
        self.tags: list[int] = []  # every delivery tag, only with keep_tags
        self.stamps: dict[int, int] = {}  # publish stamp -> messages, since the last take
        self.methods: list[bytes] = []  # payloads of non-Deliver method frames

    def feed(self, data: bytes) -> None:
        """Parse every complete frame of ``data`` (plus what was buffered before).

        Raises:
            FrameError: on a bad frame-end octet.
        """
        buf = self._buf
        buf += data
        size_buf = len(buf)
        pos = 0
        while size_buf - pos >= 8:
            if self._layout is not None and self._between:
                pos = self._runs(buf, pos, size_buf, self._layout)
                if size_buf - pos < 8:
                    break
            end = self._frame(buf, pos, size_buf)
            if end < 0:
                break
            pos = end
        self._start = -1
        if pos:
            del buf[:pos]

    def _runs(self, buf: bytearray, pos: int, size_buf: int, layout: _DeliveryLayout) -> int:
        """Take the complete deliveries of ``layout``'s shape at ``pos``; the new position."""
        count = (size_buf - pos) // layout.size
        while count:
            end = pos + count * layout.size
            region = buf[pos:end]
            if layout.matches(region, count):
                self._took(region, count, layout)
                return end
            count //= 2
        return pos

    def _took(self, region: bytearray, count: int, layout: _DeliveryLayout) -> None:
        self.deliveries += count
        self.last_tag = U64.unpack_from(region, len(region) - layout.size + layout.tag_at)[0]
        if self.keep_tags:
            self.tags.extend(map(_FIRST, layout.tags.iter_unpack(region)))
        if layout.stamps is not None:
            stamps = self.stamps
            for stamp, n in Counter(map(_FIRST, layout.stamps.iter_unpack(region))).items():
                stamps[stamp] = stamps.get(stamp, 0) + n

    def _frame(self, buf: bytearray, pos: int, size_buf: int) -> int:
        """Parse the frame at ``pos``: the position after it, -1 if it is incomplete."""
        frame_type, _channel, size = FRAME_HEAD.unpack_from(buf, pos)
        end: int = pos + 7 + size
        if end >= size_buf:
            return -1
        if buf[end] != FRAME_END:
            raise FrameError(f"bad frame end octet {buf[end]:#04x}")
        if frame_type == FRAME_BODY:
            if self._expect_stamp:
                self._expect_stamp = False
                if size >= STAMP_SIZE:
                    stamp = STAMP.unpack_from(buf, pos + 7)[0]
                    self.stamps[stamp] = self.stamps.get(stamp, 0) + 1
            if self._body_left >= 0:
                self._body_left -= size
                if self._body_left <= 0:
                    self._delivered(buf, end + 1, body=True)
        elif frame_type == FRAME_METHOD:
            if METHOD_INDEX.unpack_from(buf, pos + 7)[0] == BASIC_DELIVER:
                tag = U64.unpack_from(buf, pos + 12 + buf[pos + 11])[0]
                self.deliveries += 1
                self.last_tag = tag
                if self.keep_tags:
                    self.tags.append(tag)
                self._expect_stamp = True
                self._start = pos
                self._between = False
                self._body_left = -1
            else:
                self.methods.append(bytes(buf[pos + 7 : end]))
        elif frame_type == FRAME_HEADER and self._expect_stamp:
            body_size = U64.unpack_from(buf, pos + 7 + _BODY_SIZE_AT)[0]
            self._body_left = body_size
            if body_size == 0:  # an empty body has no body frame
                self._expect_stamp = False
                self._delivered(buf, end + 1, body=False)
        return end + 1

    def _delivered(self, buf: bytearray, end: int, body: bool) -> None:
        """A delivery parsed frame by frame ended at ``end``: learn its shape (one body
        frame at most, all of it in this buffer) for the record runs that follow."""
        self._between = True
        self._body_left = -1
        start = self._start
        self._start = -1
        if start < 0:
            self._layout = None
            return
        record = bytes(buf[start:end])
        method_size = FRAME_HEAD.unpack_from(record, 0)[2]
        header_size = FRAME_HEAD.unpack_from(record, method_size + 8)[2]
        one_body = method_size + header_size + 16 + (8 if body else 0)
        if body:
            one_body += FRAME_HEAD.unpack_from(record, method_size + header_size + 16)[2]
        self._layout = (
            _DeliveryLayout(record, method_size, header_size, body)
            if one_body == len(record)
            else None
        )

    def take_stamps(self) -> list[tuple[int, int]]:
        """(stamp, count) of the messages parsed since the last call."""
        out = list(self.stamps.items())
        self.stamps.clear()
        return out

    def take_methods(self) -> list[bytes]:
        """Raw payloads of the non-Deliver methods parsed since the last call."""
        out = self.methods
        self.methods = []
        return out

    def take_tags(self) -> list[int]:
        """Delivery tags parsed since the last call (only with ``keep_tags``)."""
        out = self.tags
        self.tags = []
        return out
