"""Tests for the lossless field-table codec (persistence/fieldcodec.py)."""

from __future__ import annotations

import datetime
import decimal
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from persistence import fieldcodec

TRICKY: dict[str, Any] = {
    "bytes": b"\x00\xff raw",
    "bytearray": bytearray(b"\x01\x02"),
    "decimal": decimal.Decimal("-12.3400"),
    "decimal-exp": decimal.Decimal("1E+3"),
    "aware": datetime.datetime(2024, 2, 29, 23, 59, 58, 123456, tzinfo=datetime.UTC),
    "offset": datetime.datetime(
        2020, 1, 1, tzinfo=datetime.timezone(datetime.timedelta(hours=-5, minutes=-30))
    ),
    "naive": datetime.datetime(1970, 1, 1, 0, 0, 1),
    "nested": {"table": {"deeper": [1, "two", None, [True, False], {"k": 3.25}]}},
    "empty-table": {},
    "empty-array": [],
    "big": 2**80,
    "negative": -(2**63),
    "double": 0.1,
    "negative-zero": -0.0,
    "infinity": math.inf,
    "true": True,
    "false": False,
    "none": None,
    "unicode \u00e9\u4e2d": "\U0001f600 lone \ud800 surrogate",
}


def test_codec_round_trips_tricky_tables_exactly() -> None:
    back = fieldcodec.decode(fieldcodec.encode(TRICKY))
    assert back == TRICKY
    assert list(back) == list(TRICKY), "key order kept"
    for key, value in TRICKY.items():
        assert type(back[key]) is type(value), key
    assert math.copysign(1.0, back["negative-zero"]) == -1.0
    assert str(back["decimal"]) == "-12.3400"
    assert back["aware"].utcoffset() == datetime.timedelta(0)
    assert back["naive"].tzinfo is None


def test_codec_canonical_is_order_independent() -> None:
    a = {"b": 1, "a": {"y": 1, "x": 2}}
    b = {"a": {"x": 2, "y": 1}, "b": 1}
    assert fieldcodec.encode(a) != fieldcodec.encode(b)
    assert fieldcodec.encode(a, canonical=True) == fieldcodec.encode(b, canonical=True)


@pytest.mark.parametrize("value", [{1, 2}, (1, 2), object(), datetime.date(2020, 1, 1)])
def test_codec_rejects_unsupported_values(value: object) -> None:
    with pytest.raises(TypeError):
        fieldcodec.encode({"k": value})


def test_codec_rejects_non_str_keys() -> None:
    with pytest.raises(TypeError, match="keys"):
        fieldcodec.encode({1: "x"})  # type: ignore[dict-item]


@pytest.mark.parametrize(
    "data", [b"", b"\x02\x00\x00\x00\x00", b"\x01\x00\x00\x00\x01", b"\x01\x00\x00\x00\x00!"]
)
def test_codec_rejects_corrupt_data(data: bytes) -> None:
    with pytest.raises(ValueError):
        fieldcodec.decode(data)


def test_codec_rejects_unknown_tag() -> None:
    with pytest.raises(ValueError, match="tag"):
        fieldcodec.decode(b"\x01\x00\x00\x00\x01\x00\x00\x00\x01kZ")


field_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.decimals(allow_nan=False, allow_infinity=False)
    | st.text()
    | st.binary()
    | st.binary().map(bytearray)
    | st.datetimes(timezones=st.none() | st.timezones()),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
field_tables = st.dictionaries(st.text(max_size=8), field_values, max_size=6)


@settings(max_examples=200, deadline=None)
@given(field_tables)
def test_codec_round_trip_property(table: dict[str, Any]) -> None:
    data = fieldcodec.encode(table)
    back = fieldcodec.decode(data)
    assert fieldcodec.encode(back) == data
    assert back == table
