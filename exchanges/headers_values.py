"""Value equality of the headers exchange, following RabbitMQ.

RabbitMQ compares a binding argument with a message header using Erlang's
``==`` on the *values* only; the AMQP type tags are ignored. Consequences, all
reproduced by :func:`comparable`:

* integers and floats compare numerically (``1`` matches ``1.0``; any integer
  width matches any other);
* booleans are atoms, never equal to numbers (``True`` does not match ``1``);
* ``longstr`` and ``binary`` values are both byte strings (``"abc"`` matches
  ``b"abc"`` and ``bytearray(b"abc")``);
* timestamps are integers of seconds (a timestamp matches the equal integer);
* decimals are ``{scale, unscaled}`` pairs (``Decimal("1.0")`` does not match
  ``Decimal("1")`` nor any number).

Deliberate simplification: nested tables compare by value, ignoring key order
and the nested type tags that RabbitMQ would also compare (Python values do
not carry them).
"""

from __future__ import annotations

import calendar
import datetime
import decimal
from collections.abc import Hashable, Mapping

__all__ = ["comparable"]

_TRUE = ("bool", True)
_FALSE = ("bool", False)
_VOID = ("void",)


def comparable(value: object) -> Hashable:
    """Map a decoded AMQP field value to a form where ``==`` is RabbitMQ's match.

    Args:
        value: A header or binding-argument value.

    Returns:
        A hashable stand-in; ``comparable(a) == comparable(b)`` exactly when
        RabbitMQ's headers exchange would consider ``a`` and ``b`` equal.
    """
    kind = type(value)
    if kind is str or kind is int or kind is float:  # the common cases, unchanged
        return value
    if isinstance(value, bool):
        return _TRUE if value else _FALSE
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        try:
            return raw.decode("utf-8")  # so that it equals the same text as str
        except UnicodeDecodeError:
            return raw
    if value is None:
        return _VOID
    if isinstance(value, decimal.Decimal):
        return _decimal(value)
    if isinstance(value, datetime.datetime):
        return calendar.timegm(value.utctimetuple())
    if isinstance(value, Mapping):
        return ("table", frozenset((comparable(k), comparable(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return ("array", tuple(comparable(item) for item in value))
    try:
        hash(value)
    except TypeError:
        return ("repr", type(value).__qualname__, repr(value))
    return ("other", value)


def _decimal(value: decimal.Decimal) -> Hashable:
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):  # NaN / Infinity: not representable in AMQP
        return ("decimal", str(value))
    unscaled = int("".join(map(str, digits)) or "0")
    return ("decimal", -exponent, -unscaled if sign else unscaled)
