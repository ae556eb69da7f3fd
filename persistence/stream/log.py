"""One stream's log on disk: segment files appended and read sequentially (issue 29).

Theory of operation
-------------------
A stream lives in its own directory (``<data>/streams/<vhost>/<queue>/``): segment files
``<first offset>.seg`` holding chunks (persistence/stream/format.py) and beside each an
index ``<first offset>.idx`` with one entry per chunk (offset, file position, timestamp):
a sparse index, one entry per chunk of up to `CHUNK_MAX_ENTRIES` messages.

Appending: `StreamLog.append` adds a message to the *open chunk* in memory and returns
its offset (offsets are contiguous from 0). The open chunk is sealed and written to the
active segment (one ``os.write`` for the chunk, one for its index entry) when it is full
or on `flush`, which the group committer calls before its fsync and a reader calls when
it reaches the open chunk. A chunk that would make the active segment larger than
``max_segment_bytes`` starts a new segment (a rolled segment is fsynced with the next
group commit). Durability: `sync_targets` flushes and hands duplicated file descriptors to
fsync off the event loop (the shell's committer, amqpd/shell/streams.py), then
`synced` records how far the log is durable; confirms and deliveries wait for that. A
chunk that cannot be written (disk full) is cut off again and its offsets are given to the
next appends; the next `sync_targets` raises, so the batch holding those messages fails and
their publishers get nacks.

Reading: a `LogReader` holds a position (segment, file position, offset), never the
stream: `LogReader.next_chunk` reads one chunk (header, then payload) with ``os.pread``
and returns its entries from the reader's offset on; a chunk whose bloom filter excludes
the reader's filter values is skipped after reading its 48-byte header. Locating an offset
is a bisect over the segments (kept in memory: a few per GB) and a binary search over the
segment's index file (read from disk), so memory does not grow with the stream's length.

Recovery (after a crash, kill -9 included; persistence/stream/segment.py): every
segment's last index entry is checked against its chunk (crc, length); if it does not end
the file, the segment is scanned forward from the last valid indexed chunk, the index
rebuilt, and a torn tail truncated.
A segment cut short that is not the last one makes every later segment go (none of their
data was confirmed: fsyncs are in order). Everything fsynced before a confirm was sent
is kept.

Retention (`apply_retention`) deletes whole segments, oldest first, never the active one:
while the stream is larger than ``max_bytes``, or while a segment's newest chunk is older
than ``max_age_ms``.

Offset tracking (named consumers): `store_offset` keeps the offsets in memory and writes
them to ``offsets.json`` (write, then rename) on the next flush.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
from bisect import bisect_left, bisect_right
from pathlib import Path
from urllib.parse import quote

from persistence.stream.format import (
    CHUNK_HEADER,
    CHUNK_MAX_BYTES,
    CHUNK_MAX_ENTRIES,
    ENTRY_LENGTHS,
    FILTER_LENGTH,
    FLAG_UNFILTERED,
    INDEX_ENTRY,
    ChunkHeader,
    StoredEntry,
    bloom_bits,
    decode_entries,
    encode_chunk,
)
from persistence.stream.segment import (
    Segment,
    pread_exact,
    recover_segment,
    remove_segment_files,
)

__all__ = ["LogReader", "StreamLog", "StreamStorage"]

log = logging.getLogger(__name__)

DEFAULT_SEGMENT_BYTES = 500_000_000  # RabbitMQ's x-stream-max-segment-size-bytes default
_HEADER = CHUNK_HEADER.size
_INDEX = INDEX_ENTRY.size
_MAX_READ_FDS = 32
_LENGTH = ENTRY_LENGTHS.pack
_FILTER_LENGTH = FILTER_LENGTH.pack
_NO_FILTER = FILTER_LENGTH.pack(0)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        # Two statements on purpose: compiled by mypyc (mypy 2.4), ``view = view[os.write(fd,
        # view):]`` in this loop ran the write twice (a test of the compiled build caught it).
        written = os.write(fd, view)
        view = view[written:]


class StreamLog:
    """The segment files of one stream (see the module's theory of operation)."""

    def __init__(self, directory: Path, max_segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> None:
        self.directory = directory
        self.max_segment_bytes = max(max_segment_bytes, 1)
        directory.mkdir(parents=True, exist_ok=True)
        self._segments: list[Segment] = []
        self._firsts: list[int] = []
        self._read_fds: dict[Path, int] = {}
        self._rolled: list[int] = []  # dup'd fds of rolled segments awaiting their fsync
        self._entries: list[bytes] = []  # the open chunk: its entries' parts
        self._open_count = 0
        self._open_bytes = 0
        self._open_first = 0
        self._open_timestamp = 0
        self._open_flags = 0
        self._open_bloom = 0
        self._offsets_path = directory / "offsets.json"
        self._tracked: dict[str, int] = {}
        self._tracked_dirty = False
        self._recover()
        active = self._segments[-1]
        self._fd = os.open(active.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._index_fd = os.open(active.index_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.next_offset = active.next_offset
        self.written_next = self.next_offset  # written to the segment file
        self.synced_next = self.next_offset  # fsynced (recovered data counts as durable)
        self.closed = False
        self.write_error: OSError | None = None  # a chunk write failed since the last sync

    # -- state ---------------------------------------------------------------------------
    @property
    def first_offset(self) -> int:
        """The oldest offset kept."""
        return self._segments[0].first_offset

    @property
    def segment_count(self) -> int:
        """Segment files on disk."""
        return len(self._segments)

    @property
    def size_bytes(self) -> int:
        """Bytes in the segment files (written chunks only)."""
        return sum(segment.size for segment in self._segments)

    @property
    def last_timestamp(self) -> int:
        """The newest chunk's timestamp (ms), -1 if empty."""
        if self._entries:
            return self._open_timestamp
        for segment in reversed(self._segments):
            if segment.last_timestamp >= 0:
                return segment.last_timestamp
        return -1

    # -- appending -----------------------------------------------------------------------
    def append(
        self,
        exchange_raw: bytes,
        routing_key_raw: bytes,
        header: bytes,
        body: bytes,
        filter_value: bytes | None,
        now_ms: int,
    ) -> int:
        """Add a message to the open chunk; its offset."""
        entries = self._entries
        offset = self.next_offset
        if not entries:
            self._open_first = offset
            self._open_timestamp = now_ms
        pack = _LENGTH
        if filter_value:
            self._open_bloom |= bloom_bits(filter_value)
            tail = _FILTER_LENGTH(len(filter_value)) + filter_value
        else:
            self._open_flags |= FLAG_UNFILTERED
            tail = _NO_FILTER
        entries += (exchange_raw, routing_key_raw, pack(len(header)), header, pack(len(body)), body)
        entries.append(tail)
        size = self._open_bytes + len(exchange_raw) + len(routing_key_raw) + len(header)
        self._open_bytes = size = size + len(body) + len(tail) + 8
        self.next_offset = offset + 1
        self._open_count = count = self._open_count + 1
        if count >= CHUNK_MAX_ENTRIES or size >= CHUNK_MAX_BYTES:
            self._seal()
        return offset

    def flush(self) -> None:
        """Write the open chunk (and changed tracked offsets) to the files."""
        if self._entries:
            self._seal()
        if self._tracked_dirty:
            self._tracked_dirty = False
            temporary = self._offsets_path.with_suffix(".tmp")
            temporary.write_text(json.dumps(self._tracked))
            os.replace(temporary, self._offsets_path)

    def _seal(self) -> None:
        payload = b"".join(self._entries)
        count = self._open_count
        self._open_count = 0
        chunk = encode_chunk(
            self._open_first,
            self._open_timestamp,
            count,
            payload,
            self._open_flags,
            self._open_bloom,
        )
        self._entries = []
        self._open_bytes = self._open_flags = self._open_bloom = 0
        first = self._open_first
        active = self._segments[-1]
        index_size = -1
        try:
            if active.size and active.size + len(chunk) > self.max_segment_bytes:
                active = self._roll(first)
            index_size = os.fstat(self._index_fd).st_size
            _write_all(self._fd, chunk)
            _write_all(self._index_fd, INDEX_ENTRY.pack(first, active.size, self._open_timestamp))
        except OSError as exc:  # disk full, I/O error: the chunk is dropped, not confirmed
            log.error("stream %s: cannot write %d messages: %s", self.directory, count, exc)
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, active.size)
                if index_size >= 0:
                    os.ftruncate(self._index_fd, index_size)
            self.next_offset = first  # offsets stay contiguous: the next append reuses them
            self.write_error = exc
            return
        active.size += len(chunk)
        active.next_offset = first + count
        active.last_timestamp = self._open_timestamp
        self.written_next = active.next_offset

    def _roll(self, first_offset: int) -> Segment:
        self._rolled += [self._fd, self._index_fd]  # fsynced (then closed) by the next sync
        segment = Segment(self.directory, first_offset)
        self._fd = os.open(segment.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._index_fd = os.open(segment.index_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._segments.append(segment)
        self._firsts.append(first_offset)
        return segment

    def resize_segments(self, max_segment_bytes: int | None) -> None:
        """A new segment size (a policy changed): the next chunk that would pass it rolls."""
        size = DEFAULT_SEGMENT_BYTES if max_segment_bytes is None else max_segment_bytes
        self.max_segment_bytes = max(size, 1)

    def sync_targets(self) -> tuple[list[int], int]:
        """Flush, then the file descriptors to fsync (each a duplicate the caller closes,
        so the log may roll or close meanwhile) and the offset durable once they are."""
        self.flush()
        error = self.write_error
        if error is not None:  # the batch fails: its confirms are nacked
            self.write_error = None
            raise error
        fds = [os.dup(self._fd), os.dup(self._index_fd), *self._rolled]
        self._rolled = []
        return fds, self.written_next

    def synced(self, upto: int) -> None:
        """Everything below ``upto`` is on disk."""
        if upto > self.synced_next:
            self.synced_next = upto

    # -- reading -------------------------------------------------------------------------
    def reader(self, offset: int) -> LogReader:
        """A reader positioned at ``offset`` (clamped to what is kept)."""
        return LogReader(self, offset)

    def last_chunk_offset(self) -> int:
        """The first offset of the newest chunk (RabbitMQ's ``last``); next_offset if empty."""
        self.flush()
        for segment in reversed(self._segments):
            if segment.size:
                entry = self._index_entry(segment, self._index_count(segment) - 1)
                return entry[0]
        return self.next_offset

    def offset_for_timestamp(self, timestamp_ms: int) -> int:
        """The first offset of the first chunk written at or after ``timestamp_ms``
        (chunk granularity, as RabbitMQ); next_offset if there is none."""
        self.flush()
        for segment in self._segments:
            if segment.last_timestamp < timestamp_ms:
                continue
            low, high = 0, self._index_count(segment)
            while low < high:
                middle = (low + high) // 2
                if self._index_entry(segment, middle)[2] < timestamp_ms:
                    low = middle + 1
                else:
                    high = middle
            if low < self._index_count(segment):
                return self._index_entry(segment, low)[0]
        return self.next_offset

    def _locate(self, offset: int) -> tuple[int, int]:
        """(segment number, file position of the chunk holding ``offset``)."""
        number = max(bisect_right(self._firsts, offset) - 1, 0)
        segment = self._segments[number]
        low, high = 0, self._index_count(segment)
        while high - low > 1:
            middle = (low + high) // 2
            if self._index_entry(segment, middle)[0] <= offset:
                low = middle
            else:
                high = middle
        if high == 0:
            return number, 0
        return number, self._index_entry(segment, low)[1]

    def _index_count(self, segment: Segment) -> int:
        return os.stat(segment.index_path).st_size // _INDEX if segment.size else 0

    def _index_entry(self, segment: Segment, number: int) -> tuple[int, int, int]:
        raw = pread_exact(self._read_fd(segment.index_path), _INDEX, number * _INDEX)
        first, position, timestamp = INDEX_ENTRY.unpack(raw)
        return first, position, timestamp

    def _read_fd(self, path: Path) -> int:
        fds = self._read_fds
        fd = fds.get(path)
        if fd is None:
            if len(fds) >= _MAX_READ_FDS:
                oldest = next(iter(fds))
                os.close(fds.pop(oldest))
            fd = fds[path] = os.open(path, os.O_RDONLY)
        return fd

    def _read_chunk_header(self, segment_number: int, position: int) -> ChunkHeader | None:
        segment = self._segments[segment_number]
        if position + _HEADER > segment.size:
            return None
        raw = pread_exact(self._read_fd(segment.path), _HEADER, position)
        return ChunkHeader(raw)

    def _read_payload(self, segment_number: int, position: int, length: int) -> bytes:
        segment = self._segments[segment_number]
        return pread_exact(self._read_fd(segment.path), length, position + _HEADER)

    # -- retention -----------------------------------------------------------------------
    def apply_retention(self, max_bytes: int | None, max_age_ms: int | None, now_ms: int) -> int:
        """Delete whole old segments over the limits (never the active one); how many."""
        removed = 0
        while len(self._segments) > 1:
            oldest = self._segments[0]
            too_big = max_bytes is not None and self.size_bytes > max_bytes
            too_old = max_age_ms is not None and oldest.last_timestamp < now_ms - max_age_ms
            if not (too_big or too_old):
                break
            self._drop_oldest()
            removed += 1
        return removed

    def _drop_oldest(self) -> None:
        oldest = self._segments.pop(0)
        self._firsts.pop(0)
        for path in (oldest.path, oldest.index_path):
            fd = self._read_fds.pop(path, None)
            if fd is not None:
                os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    # -- offset tracking -----------------------------------------------------------------
    def store_offset(self, name: str, offset: int) -> None:
        """Remember a named consumer's offset (written on the next flush)."""
        if self._tracked.get(name) != offset:
            self._tracked[name] = offset
            self._tracked_dirty = True

    def tracked_offset(self, name: str) -> int | None:
        """A named consumer's stored offset."""
        return self._tracked.get(name)

    # -- lifecycle -----------------------------------------------------------------------
    def close(self) -> None:
        """Write what is open and close every file."""
        if self.closed:
            return
        self.flush()
        self.closed = True
        for fd in (self._fd, self._index_fd, *self._rolled, *self._read_fds.values()):
            os.close(fd)
        self._rolled = []
        self._read_fds.clear()

    def delete(self) -> None:
        """The stream was deleted: close and remove its directory."""
        self._entries = []
        self._open_count = 0
        self._tracked_dirty = False
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    # -- recovery ------------------------------------------------------------------------
    def _recover(self) -> None:
        if self._offsets_path.exists():
            try:
                loaded = json.loads(self._offsets_path.read_text())
                self._tracked = {str(k): int(v) for k, v in loaded.items()}
            except (OSError, ValueError, AttributeError) as exc:
                log.error("stream %s: unreadable offsets.json (%s); ignored", self.directory, exc)
        firsts = sorted(int(path.stem) for path in self.directory.glob("*.seg"))
        segments: list[Segment] = []
        for number, first in enumerate(firsts):
            segment = Segment(self.directory, first)
            if segments and segments[-1].next_offset != first:
                log.warning("stream %s: dropping segment %s after a gap", self.directory, first)
                remove_segment_files(self.directory, firsts[number:])
                break
            complete = recover_segment(segment)
            segments.append(segment)
            if not complete and number + 1 < len(firsts):
                log.warning(
                    "stream %s: torn segment %d; later segments dropped", self.directory, first
                )
                remove_segment_files(self.directory, firsts[number + 1 :])
                break
        if not segments:
            segment = Segment(self.directory, 0)
            segment.path.touch()
            segment.index_path.touch()
            segments.append(segment)
        self._segments = segments
        self._firsts = [segment.first_offset for segment in segments]


class LogReader:
    """A position in a stream (see `StreamLog`): where the next chunk read starts."""

    __slots__ = ("_log", "_position", "_segment_first", "offset")

    def __init__(self, stream_log: StreamLog, offset: int) -> None:
        self._log = stream_log
        self.offset = max(offset, stream_log.first_offset)
        self._segment_first = -1  # the first offset of the segment we read (located lazily)
        self._position = 0

    def next_chunk(
        self, masks: list[int] | None = None, match_unfiltered: bool = False
    ) -> list[StoredEntry]:
        """The entries from ``offset`` to the end of its chunk (the reader moves past them);
        [] at the end of the log. With filter ``masks``, a chunk none of them may be in
        (bloom filter) is skipped: [] is returned and ``offset`` moves past it."""
        payload, first, start = self.next_raw(masks, match_unfiltered)
        if not payload:
            return []
        entries = decode_entries(payload, first)
        return entries[start - first :] if start > first else entries

    def next_raw(
        self, masks: list[int] | None = None, match_unfiltered: bool = False
    ) -> tuple[bytes, int, int]:
        """Like `next_chunk`, undecoded: (the chunk's payload, the offset of its first
        entry, the offset the reader was at); the payload is empty where `next_chunk`
        returns []."""
        stream_log = self._log
        if self.offset < stream_log.first_offset:  # retention removed our position
            self.offset = stream_log.first_offset
            self._segment_first = -1
        if self.offset >= stream_log.written_next:
            if self.offset >= stream_log.next_offset:
                return b"", self.offset, self.offset
            stream_log.flush()
        firsts = stream_log._firsts
        number = bisect_left(firsts, self._segment_first)
        if (
            self._segment_first < 0
            or number >= len(firsts)
            or firsts[number] != self._segment_first
        ):
            number, self._position = stream_log._locate(self.offset)  # (segments were removed)
        while True:
            header = stream_log._read_chunk_header(number, self._position)
            if header is None:
                if number + 1 >= len(firsts):
                    self._segment_first = firsts[number]
                    return b"", self.offset, self.offset
                number += 1
                self._position = 0
                continue
            chunk_end = header.first_offset + header.count
            if chunk_end <= self.offset:  # a chunk before our offset (after _locate)
                self._position += _HEADER + header.length
                continue
            break
        self._segment_first = firsts[number]
        position = self._position
        self._position += _HEADER + header.length
        start = self.offset
        self.offset = chunk_end
        if masks is not None and not (
            (match_unfiltered and header.flags & FLAG_UNFILTERED)
            or any(header.bloom & mask == mask for mask in masks)
        ):
            return b"", start, start
        payload = stream_log._read_payload(number, position, header.length)
        return payload, header.first_offset, start


class StreamStorage:
    """Where streams live: ``<root>/<vhost>/<queue>/`` (names percent-encoded)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def directory(self, vhost: str, name: str) -> Path:
        """The directory of a stream."""
        return self.root / _component(vhost) / _component(name)

    def open(self, vhost: str, name: str, max_segment_bytes: int | None) -> StreamLog:
        """Open (recovering) or create a stream's log."""
        return StreamLog(
            self.directory(vhost, name),
            DEFAULT_SEGMENT_BYTES if max_segment_bytes is None else max_segment_bytes,
        )


def _component(name: str) -> str:
    text = quote(name, safe="") or "%"
    if len(text) > 200 or text in (".", ".."):
        text = "_" + hashlib.sha256(name.encode()).hexdigest()
    return text


def fsync_all(fds: list[int]) -> None:
    """fsync then close each descriptor (run off the event loop)."""
    try:
        for fd in fds:
            os.fsync(fd)
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
