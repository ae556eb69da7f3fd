"""Lossless binary encoding of AMQP field tables for the definitions tables.

pamqp's wire encoder is not lossless for values the broker may hold: it writes ``float``
as a 32-bit float, rejects ``bytes`` (only ``bytearray`` is a byte array), truncates
timestamps to whole seconds and drops their time zone, and limits integers to 64 bits. The
store must give back exactly what it was given (arguments are compared on redeclare), so
it uses this small tagged format instead. Pure and standard-library only.

Format: one version byte (``0x01``) then a tagged table. Lengths and counts are unsigned
32-bit big-endian. Tags::

    N None          1 True          0 False
    i int (signed 64-bit)           I int (length + decimal digits, any size)
    d float (IEEE 754 double)       D Decimal (length + str(value))
    s str (length + UTF-8, lone surrogates kept)
    b bytes         x bytearray     (length + raw bytes)
    t datetime: wall-clock isoformat (length + text), fold (1 byte), then the zone:
        N naive | O fixed offset (signed 64-bit microseconds) | Z zoneinfo key (length + text)
    M table (count + (key as str, tagged value) pairs)
    L array (count + tagged values)

``encode(table, canonical=True)`` sorts keys at every level, so equal tables give equal
bytes whatever their key order; the store uses it where the table is part of an identity
(binding arguments), as RabbitMQ sorts binding arguments.
"""

from __future__ import annotations

import datetime
import decimal
import struct
import zoneinfo
from collections.abc import Iterable
from typing import Any

__all__ = ["decode", "encode"]

_VERSION = b"\x01"
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")
_I64_MIN = -(2**63)
_I64_MAX = 2**63 - 1
_MICROSECOND = datetime.timedelta(microseconds=1)


def encode(table: dict[str, Any], *, canonical: bool = False) -> bytes:
    """Encode a field table.

    Args:
        table: A dict of ``str`` keys to field values (``None``, ``bool``, ``int``, ``float``,
            ``Decimal``, ``str``, ``bytes``, ``bytearray``, ``datetime``, ``dict``,
            ``list``), nested to any depth.
        canonical: Sort keys at every level so equal tables encode identically.

    Returns:
        The encoded bytes.

    Raises:
        TypeError: A key is not a ``str`` or a value has an unsupported type.
    """
    out = bytearray(_VERSION)
    _table(out, table, canonical)
    return bytes(out)


def decode(data: bytes) -> dict[str, Any]:
    """Decode bytes written by :func:`encode`.

    Args:
        data: The encoded table.

    Returns:
        The table, with the key order it was encoded with.

    Raises:
        ValueError: The bytes are not a table in this format.
    """
    view = memoryview(data)
    if view[:1] != _VERSION:
        raise ValueError(f"unknown field-table encoding version {bytes(view[:1])!r}")
    try:
        value, offset = _value(view, 1, ord("M"))
    except (
        IndexError,
        struct.error,
        UnicodeDecodeError,
        decimal.InvalidOperation,
        zoneinfo.ZoneInfoNotFoundError,
    ) as exc:
        raise ValueError(f"corrupt field table: {exc}") from exc
    if offset != len(view):
        raise ValueError(f"corrupt field table: {len(view) - offset} trailing bytes")
    assert isinstance(value, dict)
    return value


def _str(out: bytearray, value: str) -> None:
    raw = value.encode("utf-8", "surrogatepass")
    out += _U32.pack(len(raw))
    out += raw


def _table(out: bytearray, table: dict[str, Any], canonical: bool) -> None:
    if not isinstance(table, dict):
        raise TypeError(f"a field table must be a dict, not {type(table).__name__}")
    # Keys typed object: compiled (mypyc), unpacking into a str would raise its own TypeError
    # before the check below could name the problem.
    items: Iterable[tuple[object, Any]] = sorted(table.items()) if canonical else table.items()
    out += _U32.pack(len(table))
    for key, item in items:
        if not isinstance(key, str):
            raise TypeError(f"field table keys must be str, not {type(key).__name__}")
        _str(out, key)
        _encode_value(out, item, canonical)


def _encode_value(out: bytearray, value: Any, canonical: bool) -> None:
    if value is None:
        out += b"N"
    elif value is True:
        out += b"1"
    elif value is False:
        out += b"0"
    elif isinstance(value, int):
        if _I64_MIN <= value <= _I64_MAX:
            out += b"i"
            out += _I64.pack(value)
        else:
            out += b"I"
            _str(out, str(int(value)))
    elif isinstance(value, float):
        out += b"d"
        out += _F64.pack(value)
    elif isinstance(value, decimal.Decimal):
        out += b"D"
        _str(out, str(value))
    elif isinstance(value, str):
        out += b"s"
        _str(out, value)
    elif isinstance(value, bytes):
        out += b"b"
        out += _U32.pack(len(value))
        out += value
    elif isinstance(value, bytearray):
        out += b"x"
        out += _U32.pack(len(value))
        out += value
    elif isinstance(value, datetime.datetime):
        out += b"t"
        _datetime(out, value)
    elif isinstance(value, dict):
        out += b"M"
        _table(out, value, canonical)
    elif isinstance(value, list):
        out += b"L"
        out += _U32.pack(len(value))
        for item in value:
            _encode_value(out, item, canonical)
    else:
        raise TypeError(f"cannot store a field value of type {type(value).__name__}: {value!r}")


def _datetime(out: bytearray, value: datetime.datetime) -> None:
    _str(out, value.replace(tzinfo=None, fold=0).isoformat())
    out += b"\x01" if value.fold else b"\x00"
    tz = value.tzinfo
    if tz is None:
        out += b"N"
    elif isinstance(tz, zoneinfo.ZoneInfo) and tz.key is not None:
        out += b"Z"
        _str(out, tz.key)
    else:  # datetime.timezone, or another tzinfo: kept as its offset at that moment
        offset = value.utcoffset()
        assert offset is not None
        out += b"O"
        out += _I64.pack(offset // _MICROSECOND)


def _read_datetime(view: memoryview, offset: int) -> tuple[datetime.datetime, int]:
    text, offset = _read_str(view, offset)
    wall = datetime.datetime.fromisoformat(text).replace(fold=view[offset])
    kind = view[offset + 1]
    offset += 2
    if kind == 0x4E:  # N
        return wall, offset
    if kind == 0x5A:  # Z
        key, offset = _read_str(view, offset)
        return wall.replace(tzinfo=zoneinfo.ZoneInfo(key)), offset
    if kind == 0x4F:  # O
        (micros,) = _I64.unpack_from(view, offset)
        tz = datetime.timezone(micros * _MICROSECOND)
        return wall.replace(tzinfo=tz), offset + 8
    raise ValueError(f"unknown time zone kind {kind:#04x}")


def _read_str(view: memoryview, offset: int) -> tuple[str, int]:
    (size,) = _U32.unpack_from(view, offset)
    start = offset + 4
    end = start + size
    if end > len(view):
        raise IndexError("string runs past the end")
    return str(view[start:end], "utf-8", "surrogatepass"), end


def _read_bytes(view: memoryview, offset: int) -> tuple[bytes, int]:
    (size,) = _U32.unpack_from(view, offset)
    start = offset + 4
    end = start + size
    if end > len(view):
        raise IndexError("byte string runs past the end")
    return bytes(view[start:end]), end


def _value(view: memoryview, offset: int, tag: int) -> tuple[Any, int]:
    """Decode the value with ``tag`` whose payload starts at ``offset``."""
    if tag == 0x4E:  # N
        return None, offset
    if tag == 0x31:  # 1
        return True, offset
    if tag == 0x30:  # 0
        return False, offset
    if tag == 0x69:  # i
        return _I64.unpack_from(view, offset)[0], offset + 8
    if tag == 0x49:  # I
        text, offset = _read_str(view, offset)
        return int(text), offset
    if tag == 0x64:  # d
        return _F64.unpack_from(view, offset)[0], offset + 8
    if tag == 0x44:  # D
        text, offset = _read_str(view, offset)
        return decimal.Decimal(text), offset
    if tag == 0x73:  # s
        return _read_str(view, offset)
    if tag == 0x62:  # b
        return _read_bytes(view, offset)
    if tag == 0x78:  # x
        raw, offset = _read_bytes(view, offset)
        return bytearray(raw), offset
    if tag == 0x74:  # t
        return _read_datetime(view, offset)
    if tag == 0x4D:  # M
        (count,) = _U32.unpack_from(view, offset)
        offset += 4
        table: dict[str, Any] = {}
        for _ in range(count):
            key, offset = _read_str(view, offset)
            table[key], offset = _value(view, offset + 1, view[offset])
        return table, offset
    if tag == 0x4C:  # L
        (count,) = _U32.unpack_from(view, offset)
        offset += 4
        items: list[Any] = []
        for _ in range(count):
            item, offset = _value(view, offset + 1, view[offset])
            items.append(item)
        return items, offset
    raise ValueError(f"unknown field value tag {tag:#04x}")
