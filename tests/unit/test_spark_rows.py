"""Stream deliveries as columns (interop/spark/stream_rows.py): headers tables interned by
their bytes without the offset, and the Arrow record batch built from the columns."""

from __future__ import annotations

import struct
from datetime import UTC, datetime
from typing import Any

import pytest
from pamqp.encode import field_table

from interop.spark.stream_rows import HeaderSets, NotAStreamError, Rows


def _table(entries: dict[str, Any], offset: int | None = None, *, last: bool = True) -> bytes:
    """A headers table as a broker sends it: ``x-stream-offset`` a long (``l``), last or
    first (pamqp alone would encode a small number in the smallest integer type)."""
    rest = bytes(field_table(entries))[4:]
    entry = b"" if offset is None else b"\x0fx-stream-offsetl" + struct.pack(">q", offset)
    content = rest + entry if last else entry + rest
    return struct.pack(">I", len(content)) + content


def test_tables_that_differ_only_in_a_final_offset_share_one_decoded_set() -> None:
    sets = HeaderSets()
    got = [sets.add_raw(_table({"source": "spark", "n": 7}, o)) for o in (3, 4)]
    assert got == [(3, 0), (4, 0)]
    assert sets.pairs == [[("n", "7"), ("source", "spark")]] and len(sets.index) == 1
    other = sets.add_raw(_table({"source": "flink"}, 5))
    assert other == (5, 1) and sets.pairs[1] == [("source", "flink")]


def test_an_offset_not_last_is_decoded_each_time_and_a_lookalike_value_is_not_trusted() -> None:
    sets = HeaderSets()
    assert sets.add_raw(_table({"a": "\x01"}, 9, last=False)) == (9, 0)
    assert sets.add_raw(_table({"a": "\x01"}, 10, last=False)) == (10, 1)
    assert sets.index == {}
    # a long string whose last bytes look like a final x-stream-offset entry
    spoof = b"\x0fx-stream-offsetl" + struct.pack(">q", 777)
    table = _table({"s": spoof.decode("latin-1")}, 11, last=False)
    assert table.endswith(spoof)
    assert sets.add_raw(table) == (11, 2) and sets.index == {}
    assert sets.pairs[2] == [("s", spoof.decode("latin-1"))]


def test_a_table_without_an_offset_is_not_a_stream() -> None:
    with pytest.raises(NotAStreamError):
        HeaderSets().add_raw(_table({"a": 1}))
    with pytest.raises(NotAStreamError):
        HeaderSets().add_raw(_table({"x-stream-offset": True}))
    with pytest.raises(NotAStreamError):
        HeaderSets().add_raw(_table({}))


def test_rows_become_a_record_batch_of_the_source_schema() -> None:
    rows = Rows()
    rows.add(5, 1, "rk", 1_700_000_000, "m5", {"x-stream-offset": 5, "h": b"v"}, b"body")
    rows.add(6, 2, "rk", None, None, {}, b"")
    rows.keys.append(b"\xffbad")  # not UTF-8: replaced, not an error
    rows.offsets.append(7)
    rows.stamps.append(None)
    rows.ids.append(b"m7")
    rows.sets.append(0)
    rows.values.append(b"x")
    table = rows.batch("s1").to_pylist()
    assert [r["offset"] for r in table] == [5, 6, 7] and {r["stream"] for r in table} == {"s1"}
    assert table[0]["timestamp"] == datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)
    assert table[1]["timestamp"] is None and table[1]["message_id"] is None
    assert [r["routing_key"] for r in table] == ["rk", "rk", "\ufffdbad"]
    assert [r["headers"] for r in table] == [[("h", "v")], [], [("h", "v")]]
    assert table[0]["value"] == b"body" and table[1]["value"] == b""
    assert Rows().batch("s1").num_rows == 0


def test_extending_from_rows_with_other_header_sets_moves_the_sets_used() -> None:
    mine, theirs = Rows(), Rows()
    mine.add(1, 1, "k", None, None, {"a": "1"}, b"")
    for offset, value in ((2, "2"), (3, "3"), (4, "4")):
        theirs.add(offset, offset, "k", None, None, {"a": value}, b"")
    mine.extend(theirs, 1, 3)
    assert mine.offsets == [1, 3, 4]
    headers = [r["headers"] for r in mine.batch("s").to_pylist()]
    assert headers == [[("a", "1")], [("a", "3")], [("a", "4")]]
    same = Rows(mine.headers)
    same.extend(mine, 0, 2)
    assert same.sets == mine.sets[:2]
