"""Hashable, type-aware keys for binding arguments (binding identity).

RabbitMQ stores a binding's arguments as a key-sorted AMQP field table and
treats two bindings as the same only if the tables are identical, type tags
included. Python values lose the wire type, so this module keeps apart the
Python types that stand for different AMQP types (``bool``/``int``/``float``,
``str``/``bytes``/``bytearray``, ...) while ignoring the key order of tables.
Values may be unhashable (nested tables and arrays), hence the freezing.
"""

from __future__ import annotations

import copy
import datetime
import decimal
from collections.abc import Hashable, Mapping
from typing import Any

__all__ = ["arguments_key", "copy_arguments"]

_EMPTY_KEY: frozenset[tuple[Hashable, Hashable]] = frozenset()


def arguments_key(arguments: Mapping[str, object]) -> Hashable:
    """Build the identity key of a binding's arguments.

    Args:
        arguments: The binding arguments; values may be nested tables/arrays.

    Returns:
        A hashable key; two argument tables get equal keys exactly when they
        hold the same names with values of the same type and value.
    """
    if not arguments:
        return _EMPTY_KEY
    return _freeze_table(arguments)


def copy_arguments(arguments: Mapping[str, object]) -> dict[str, object]:
    """Return a deep, independent copy of ``arguments`` as a plain dict.

    Args:
        arguments: The binding arguments.

    Returns:
        A new dict sharing no mutable state with ``arguments``.
    """
    if not arguments:
        return {}
    return copy.deepcopy(dict(arguments))


def _freeze_table(table: Mapping[Any, object]) -> frozenset[tuple[Hashable, Hashable]]:
    return frozenset((_freeze(name), _freeze(value)) for name, value in table.items())


def _freeze(value: object) -> Hashable:
    # Order matters: bool is an int subclass, datetime a date subclass.
    if value is None:
        return None
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, str):
        return ("str", str(value))
    if isinstance(value, int):
        return ("int", int(value))
    if isinstance(value, float):
        return ("float", float(value).hex())  # hex(): NaN equals itself, -0.0 != 0.0
    if isinstance(value, bytes):
        return ("bytes", bytes(value))
    if isinstance(value, bytearray | memoryview):
        return ("bytearray", bytes(value))
    if isinstance(value, decimal.Decimal):
        return ("decimal", value.as_tuple())
    if isinstance(value, datetime.datetime):
        return ("timestamp", value)
    if isinstance(value, Mapping):
        return ("table", _freeze_table(value))
    if isinstance(value, list | tuple):
        return ("array", tuple(_freeze(item) for item in value))
    try:
        hash(value)
    except TypeError:
        return ("repr", type(value).__qualname__, repr(value))
    return ("other", type(value).__qualname__, value)
