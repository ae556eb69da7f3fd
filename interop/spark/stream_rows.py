"""Stream deliveries as columns, and their Arrow record batches: the source's per-row path.

Theory of operation. A Spark task turns each delivery into one row; at 100k rows/s every
Python operation per row counts, so nothing here builds a per-delivery object. The socket
consumer appends each delivery's fields straight to the lists of a `Rows` (offset, routing
key and message id as raw bytes, timestamp in seconds, body) and the headers table as a
small number: its index in `HeaderSets`, which decodes each distinct table once. Messages
written by one producer carry the same headers, only ``x-stream-offset`` differs, and the
broker puts that entry last: so a table is interned by its bytes with the offset's 8 bytes
cut off, and its decoded pairs are reused. Tables that do not end with the offset entry are
decoded each time (still correct, only slower).

`Rows.batch` converts columns with Arrow's vectorised kernels: the byte strings are cast to
UTF-8 (decoded one by one, replacing what is not UTF-8, only if that cast fails), the
timestamps from seconds to microseconds, and the ``headers`` map is taken from the distinct
tables by index. A consumer keeps one `HeaderSets` for the `Rows` of all its polls, so a table
is decoded once per task, and starts a fresh one after ``MAX_HEADER_SETS`` distinct tables
(interop/spark/stream_socket.py), which bounds the memory of headers unique to each message;
rows moved into another `Rows` bring the tables they use (`Rows.extend`).
"""

from __future__ import annotations

import struct
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from pamqp.decode import field_table

OFFSET_HEADER = "x-stream-offset"
OFFSET_ENTRY = b"\x0fx-stream-offsetl"
_TAIL = len(OFFSET_ENTRY) + 8  # the offset entry, last in a table
_SIZE = struct.Struct(">I")
_OFFSET = struct.Struct(">q")

HEADERS_TYPE = pa.map_(pa.string(), pa.string())
ARROW_SCHEMA = pa.schema(
    [
        ("stream", pa.string()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("routing_key", pa.string()),
        ("message_id", pa.string()),
        ("headers", HEADERS_TYPE),
        ("value", pa.binary()),
    ]
)
_SECONDS = pa.timestamp("s", tz="UTC")
_MICROS = pa.timestamp("us", tz="UTC")

Pairs = list[tuple[str, str | None]]


class NotAStreamError(ValueError):
    """A delivery without an ``x-stream-offset`` header."""


class HeaderSets:
    """Distinct headers tables (without ``x-stream-offset``), each decoded once."""

    def __init__(self) -> None:
        self.index: dict[bytes, int] = {}  # table bytes, offset value cut off -> position
        self.pairs: list[Pairs] = []

    def add_raw(self, table: bytes) -> tuple[int, int]:
        """(offset, set) of a raw headers table (its 4-byte length included).

        Raises:
            NotAStreamError: The table has no ``x-stream-offset`` long.
        """
        cut = len(table) - 8
        found = self.index.get(table[:cut])
        if found is not None:
            return _OFFSET.unpack_from(table, cut)[0], found
        decoded = field_table(table)[1]
        offset = decoded.pop(OFFSET_HEADER, None)
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise NotAStreamError(OFFSET_HEADER)
        pairs = [(key, text(value)) for key, value in decoded.items()]
        position = len(self.pairs)
        self.pairs.append(pairs)
        if table[cut - len(OFFSET_ENTRY) : cut] == OFFSET_ENTRY and _rest(table, cut) == decoded:
            self.index[table[:cut]] = position  # the offset entry is last: reuse it
        return offset, position

    def add(self, headers: dict[str, Any]) -> int:
        """The set of decoded headers (``x-stream-offset`` left out)."""
        self.pairs.append([(k, text(v)) for k, v in headers.items() if k != OFFSET_HEADER])
        return len(self.pairs) - 1

    def arrow(self) -> pa.MapArray:
        return pa.array(self.pairs, HEADERS_TYPE)


def _rest(table: bytes, cut: int) -> dict[str, Any] | None:
    """The entries before a final ``x-stream-offset`` entry, if they form a table of their
    own (so that entry is an entry, not bytes inside another value)."""
    start = cut - len(OFFSET_ENTRY)
    try:
        used, rest = field_table(_SIZE.pack(start - 4) + table[4:start])
    except (ValueError, struct.error, UnicodeDecodeError, IndexError, KeyError):
        return None
    return rest if used == start else None


class Rows:
    """Deliveries as column lists (see the module docstring); ``last_tag`` is the delivery
    tag of the last one (tags are consecutive on the task's one channel)."""

    __slots__ = ("headers", "ids", "keys", "last_tag", "offsets", "sets", "stamps", "values")

    def __init__(self, headers: HeaderSets | None = None) -> None:
        self.offsets: list[int] = []
        self.keys: list[bytes] = []
        self.stamps: list[int | None] = []
        self.ids: list[bytes | None] = []
        self.sets: list[int] = []
        self.values: list[bytes] = []
        self.headers = HeaderSets() if headers is None else headers
        self.last_tag = 0

    def __len__(self) -> int:
        return len(self.offsets)

    def add(
        self,
        offset: int,
        tag: int,
        routing_key: str,
        timestamp: int | None,
        message_id: str | None,
        headers: dict[str, Any],
        body: bytes,
    ) -> None:
        """One decoded delivery (pika's, for ``amqps://``)."""
        self.offsets.append(offset)
        self.keys.append(routing_key.encode())
        self.stamps.append(timestamp)
        self.ids.append(None if message_id is None else message_id.encode())
        self.sets.append(self.headers.add(headers))
        self.values.append(body)
        self.last_tag = tag

    def extend(self, other: Rows, lo: int, hi: int) -> None:
        """Rows ``lo:hi`` of ``other``."""
        self.offsets += other.offsets[lo:hi]
        self.keys += other.keys[lo:hi]
        self.stamps += other.stamps[lo:hi]
        self.ids += other.ids[lo:hi]
        self.values += other.values[lo:hi]
        if other.headers is self.headers:
            self.sets += other.sets[lo:hi]
            return
        base = len(self.headers.pairs)
        used = sorted(set(other.sets[lo:hi]))
        moved = {old: base + new for new, old in enumerate(used)}
        self.headers.pairs += [other.headers.pairs[old] for old in used]
        self.sets += [moved[old] for old in other.sets[lo:hi]]

    def batch(self, stream: str) -> pa.RecordBatch:
        """All rows as one record batch."""
        count = len(self.offsets)
        sets = self.headers.arrow()
        headers = sets.take(pa.array(self.sets, pa.int32())) if count else sets.slice(0, 0)
        return pa.RecordBatch.from_arrays(
            [
                pa.repeat(pa.scalar(stream, pa.string()), count),
                pa.array(self.offsets, pa.int64()),
                pa.array(self.stamps, _SECONDS).cast(_MICROS),
                _strings(self.keys),
                _strings(self.ids),
                headers,
                pa.array(self.values, pa.binary()),
            ],
            schema=ARROW_SCHEMA,
        )


def _strings(raw: list[bytes] | list[bytes | None]) -> pa.Array:
    """UTF-8 bytes as a string column; bytes that are not UTF-8 decoded with replacement."""
    binary = pa.array(raw, pa.binary())
    try:
        return binary.cast(pa.string())
    except pa.ArrowInvalid:
        decoded = [None if b is None else b.decode("utf-8", "replace") for b in raw]
        return pa.array(decoded, pa.string())


def text(value: Any) -> str | None:
    """A header value as a string: text as is, bytes decoded as UTF-8 (replacing what is
    not), anything else with ``str`` (numbers, booleans, timestamps, decimals)."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, str):
        return value
    return str(value)
