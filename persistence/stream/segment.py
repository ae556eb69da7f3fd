"""A stream segment's files, and their recovery after a crash (persistence/stream/log.py
holds the segments of one stream).

Theory of operation
-------------------
A segment is two files: ``<first offset>.seg``, chunks one after another
(persistence/stream/format.py), and ``<first offset>.idx``, one fixed-size entry per chunk
(first offset, file position, timestamp), appended after its chunk. A crash (kill -9, power
loss) can leave either file torn: a chunk written without its index entry, or a chunk cut
short. `recover_segment` checks the newest index entry against its chunk (crc, length),
stepping back over entries whose chunk is not whole, then scans forward from there for
chunks whose index entry was lost (re-indexing them), and truncates what follows the last
whole chunk. The log then drops every segment after a torn one (none of their data was
confirmed: fsyncs are in order).
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from persistence.stream.format import CHUNK_HEADER, INDEX_ENTRY, ChunkHeader

log = logging.getLogger(__name__)

_HEADER = CHUNK_HEADER.size
_INDEX = INDEX_ENTRY.size


class Segment:
    """One segment's two files (``<first offset>.seg``, ``<first offset>.idx``) and what
    the log knows of them: size, next offset, newest chunk's timestamp."""

    __slots__ = ("first_offset", "index_path", "last_timestamp", "next_offset", "path", "size")

    def __init__(self, directory: Path, first_offset: int) -> None:
        self.first_offset = first_offset
        self.path = directory / f"{first_offset:020d}.seg"
        self.index_path = directory / f"{first_offset:020d}.idx"
        self.size = 0
        self.next_offset = first_offset
        self.last_timestamp = -1


def pread_exact(fd: int, size: int, position: int) -> bytes:
    """``size`` bytes at ``position`` (fewer only at the end of the file)."""
    data = os.pread(fd, size, position)
    while len(data) < size:
        more = os.pread(fd, size - len(data), position + len(data))
        if not more:
            break
        data += more
    return data


def remove_segment_files(directory: Path, firsts: list[int]) -> None:
    """Delete the files of the segments starting at ``firsts`` (those that exist)."""
    for first in firsts:
        segment = Segment(directory, first)
        for path in (segment.path, segment.index_path):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def recover_segment(segment: Segment) -> bool:
    """Check (and repair) one segment; False if its tail was torn and cut off. Reads
    the index from its end (one entry per step back), so a long segment recovers in
    a few reads."""
    if not segment.path.exists():
        segment.path.touch()
    if not segment.index_path.exists():
        segment.index_path.touch()
    size = segment.path.stat().st_size
    index_size = segment.index_path.stat().st_size
    count = index_size // _INDEX
    with segment.path.open("rb") as file, segment.index_path.open("rb") as index:
        fd, index_fd = file.fileno(), index.fileno()

        def valid(position: int, first: int) -> ChunkHeader | None:
            if position + _HEADER > size:
                return None
            try:
                header = ChunkHeader(pread_exact(fd, _HEADER, position))
            except ValueError:
                return None
            if header.first_offset != first:
                return None
            payload = pread_exact(fd, header.length, position + _HEADER)
            return header if header.valid_payload(payload) else None

        kept = count
        position, expected, last_ts = 0, segment.first_offset, -1
        while kept:  # the newest indexed chunk that is whole
            raw = pread_exact(index_fd, _INDEX, (kept - 1) * _INDEX)
            first, at, _ts = INDEX_ENTRY.unpack(raw)
            header = valid(at, first)
            if header is not None:
                position = at + _HEADER + header.length
                expected = first + header.count
                last_ts = header.timestamp
                break
            kept -= 1
        added: list[bytes] = []
        while True:  # chunks written after their index entry was lost
            header = valid(position, expected)
            if header is None:
                break
            added.append(INDEX_ENTRY.pack(expected, position, header.timestamp))
            last_ts = header.timestamp
            expected += header.count
            position += _HEADER + header.length
    complete: bool = position == size
    if not complete:
        log.warning(
            "stream %s: segment %d truncated from %d to %d bytes (torn tail)",
            segment.path.parent,
            segment.first_offset,
            size,
            position,
        )
        os.truncate(segment.path, position)
    if kept * _INDEX != index_size or added:
        os.truncate(segment.index_path, kept * _INDEX)
        with segment.index_path.open("ab") as index_file:
            index_file.write(b"".join(added))
    segment.size = position
    segment.next_offset = expected
    segment.last_timestamp = last_ts
    return complete
