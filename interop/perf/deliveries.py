"""Allocation-light parsing of what a consumer receives: Deliver + header + body frames.

`DeliveryParser.feed` walks the frames of a received chunk in place (no per-frame copy),
counts deliveries, remembers the last delivery tag, and collects the publish timestamp of
each message (the first 8 body bytes) run-length encoded, since messages of one producer
batch share a stamp. Any other method frame is handed back raw for the cold path.
"""

from __future__ import annotations

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


class DeliveryParser:
    """Incremental parser of one consumer channel's incoming frames."""

    __slots__ = (
        "_buf",
        "_expect_stamp",
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
        unpack_head = FRAME_HEAD.unpack_from
        stamps = self.stamps
        while size_buf - pos >= 8:
            frame_type, _channel, size = unpack_head(buf, pos)
            end = pos + 7 + size
            if end >= size_buf:
                break
            if buf[end] != FRAME_END:
                raise FrameError(f"bad frame end octet {buf[end]:#04x}")
            if frame_type == FRAME_BODY:
                if self._expect_stamp:
                    self._expect_stamp = False
                    if size >= STAMP_SIZE:
                        stamp = STAMP.unpack_from(buf, pos + 7)[0]
                        stamps[stamp] = stamps.get(stamp, 0) + 1
            elif frame_type == FRAME_METHOD:
                if METHOD_INDEX.unpack_from(buf, pos + 7)[0] == BASIC_DELIVER:
                    tag = U64.unpack_from(buf, pos + 12 + buf[pos + 11])[0]
                    self.deliveries += 1
                    self.last_tag = tag
                    if self.keep_tags:
                        self.tags.append(tag)
                    self._expect_stamp = True
                else:
                    self.methods.append(bytes(buf[pos + 7 : end]))
            elif (
                frame_type == FRAME_HEADER
                and self._expect_stamp
                and U64.unpack_from(buf, pos + 11)[0] == 0  # an empty body has no body frame
            ):
                self._expect_stamp = False
            pos = end + 1
        if pos:
            del buf[:pos]

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
