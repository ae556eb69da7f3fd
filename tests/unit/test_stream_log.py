"""The stream segment store (persistence/stream/log.py): append, read, recovery, retention."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from persistence.stream.format import bloom_bits
from persistence.stream.log import StreamLog, StreamStorage, fsync_all


def _append(
    log: StreamLog, count: int, now_ms: int = 1000, filter_value: bytes | None = None
) -> None:
    for _ in range(count):
        offset = log.next_offset
        log.append(b"\x00", b"\x02rk", b"hdr", b"body-%d" % offset, filter_value, now_ms)


def _read_all(log: StreamLog, offset: int = 0) -> list[int]:
    reader = log.reader(offset)
    offsets: list[int] = []
    while True:
        entries = reader.next_chunk()
        if not entries and reader.offset >= log.next_offset:
            return offsets
        offsets += [entry.offset for entry in entries]


def test_append_then_read_back_in_order(tmp_path: Path) -> None:
    log = StreamLog(tmp_path / "s")
    _append(log, 2500)  # more than two full chunks, and an open one
    assert log.next_offset == 2500
    assert log.written_next == 2048  # two chunks sealed when full
    reader = log.reader(0)
    first = reader.next_chunk()
    assert [e.offset for e in first][:3] == [0, 1, 2]
    assert first[5].body == b"body-5" and first[5].routing_key_raw == b"\x02rk"
    assert _read_all(log) == list(range(2500))  # reading the open chunk flushes it
    assert _read_all(log, 1500) == list(range(1500, 2500))
    log.close()


def test_offsets_contiguous_across_segments_and_reopen(tmp_path: Path) -> None:
    log = StreamLog(tmp_path / "s", max_segment_bytes=4000)
    for _ in range(30):
        _append(log, 10)
        log.flush()
    assert log.segment_count >= 3
    log.close()
    again = StreamLog(tmp_path / "s", max_segment_bytes=4000)
    assert again.next_offset == 300 and again.first_offset == 0
    assert _read_all(again, 123) == list(range(123, 300))
    again.close()


def test_torn_tail_is_truncated_and_whole_chunks_kept(tmp_path: Path) -> None:
    log = StreamLog(tmp_path / "s")
    _append(log, 5)
    fds, upto = log.sync_targets()
    fsync_all(fds)
    log.synced(upto)
    _append(log, 5)
    log.flush()
    log.close()
    segment = next((tmp_path / "s").glob("*.seg"))
    size = segment.stat().st_size
    with segment.open("r+b") as file:  # a crash in the middle of the second chunk
        file.truncate(size - 7)
    recovered = StreamLog(tmp_path / "s")
    assert recovered.next_offset == 5
    assert _read_all(recovered) == [0, 1, 2, 3, 4]
    _append(recovered, 2)  # appends continue at the cut
    assert _read_all(recovered) == list(range(7))
    recovered.close()


def test_garbage_tail_and_lost_index_entries(tmp_path: Path) -> None:
    log = StreamLog(tmp_path / "s")
    for _ in range(3):
        _append(log, 4)
        log.flush()
    log.close()
    index = next((tmp_path / "s").glob("*.idx"))
    index.write_bytes(index.read_bytes()[:24])  # only the first chunk indexed
    segment = next((tmp_path / "s").glob("*.seg"))
    with segment.open("ab") as file:
        file.write(b"AQS1 garbage that is no chunk")
    recovered = StreamLog(tmp_path / "s")
    assert recovered.next_offset == 12
    assert _read_all(recovered, 9) == [9, 10, 11]
    assert index.stat().st_size == 3 * 24  # rebuilt
    recovered.close()


def test_retention_removes_whole_segments_by_size_and_age(tmp_path: Path) -> None:
    log = StreamLog(tmp_path / "s", max_segment_bytes=1000)
    for step in range(20):
        _append(log, 10, now_ms=step * 1000)
        log.flush()
    segments = log.segment_count
    assert segments > 4
    assert log.apply_retention(None, None, 20_000) == 0
    removed = log.apply_retention(log.size_bytes // 2, None, 20_000)
    assert removed >= 1 and log.segment_count == segments - removed
    assert log.first_offset > 0 and log.first_offset % 10 == 0
    assert _read_all(log)[0] == log.first_offset
    assert log.reader(0).offset == log.first_offset  # below the oldest kept: the oldest
    log.apply_retention(None, 1, 10**9)  # everything old: only the active segment stays
    assert log.segment_count == 1
    assert log.next_offset == 200
    log.close()


def test_timestamps_last_chunk_and_filters(tmp_path: Path) -> None:
    log = StreamLog(tmp_path / "s")
    _append(log, 3, now_ms=1000, filter_value=b"red")
    log.flush()
    _append(log, 3, now_ms=2000, filter_value=b"blue")
    log.flush()
    _append(log, 2, now_ms=3000)
    assert log.offset_for_timestamp(1500) == 3
    assert log.offset_for_timestamp(500) == 0
    assert log.offset_for_timestamp(9000) == 8
    assert log.last_chunk_offset() == 6
    reader = log.reader(0)
    red = [bloom_bits(b"red")]
    assert [e.offset for e in reader.next_chunk(red)] == [0, 1, 2]
    assert reader.next_chunk(red) == [] and reader.offset == 6  # the blue chunk skipped
    assert reader.next_chunk(red) == [] and reader.offset == 8
    unfiltered = log.reader(3)
    assert unfiltered.next_chunk(red) == []
    assert [e.offset for e in unfiltered.next_chunk(red, match_unfiltered=True)] == [6, 7]
    entry = log.reader(0).next_chunk()[0]
    assert entry.filter_value == b"red"
    log.close()


def test_tracked_offsets_survive_reopen_and_delete_removes_files(tmp_path: Path) -> None:
    storage = StreamStorage(tmp_path / "streams")
    log = storage.open("/", "my stream", None)
    log.store_offset("consumer-1", 41)
    log.flush()
    log.close()
    again = storage.open("/", "my stream", None)
    assert again.tracked_offset("consumer-1") == 41
    directory = storage.directory("/", "my stream")
    assert directory.name == "my%20stream" and directory.parent.name == "%2F"
    again.delete()
    assert not directory.exists()
    assert not os.path.exists(directory / "offsets.json")


def test_reader_keeps_its_place_when_retention_removes_older_segments(tmp_path: Path) -> None:
    log = StreamLog(tmp_path / "s", max_segment_bytes=1000)
    for step in range(20):
        _append(log, 10, now_ms=step)
        log.flush()
    assert log.segment_count > 4
    reader = log.reader(150)
    assert [e.offset for e in reader.next_chunk()] == list(range(150, 160))
    log.apply_retention(log.size_bytes // 3, None, 0)  # segments before the reader go
    assert log.first_offset < 160
    assert [e.offset for e in reader.next_chunk()] == list(range(160, 170))
    log.close()


def test_a_failed_write_is_cut_off_and_reported_by_the_next_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = StreamLog(tmp_path / "s")
    _append(log, 3)
    log.flush()
    real = os.write
    calls = []

    def failing(fd: int, data: bytes) -> int:
        calls.append(fd)
        if len(calls) == 1:
            real(fd, bytes(data)[:10])  # a torn write, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)

    # os.write itself: a compiled build calls its own _write_all directly, never a patch.
    monkeypatch.setattr(os, "write", failing)
    _append(log, 2)
    log.flush()
    assert log.next_offset == 3  # the two messages are gone, their offsets free again
    with pytest.raises(OSError, match="No space left"):
        log.sync_targets()
    _append(log, 2)
    fds, upto = log.sync_targets()  # the error was reported once
    fsync_all(fds)
    assert upto == 5
    assert _read_all(log) == [0, 1, 2, 3, 4]
    log.close()
    assert _read_all(StreamLog(tmp_path / "s")) == [0, 1, 2, 3, 4]
