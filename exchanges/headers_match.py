"""Binding patterns of the headers exchange: ``x-match`` parsing and matching.

Semantics (RabbitMQ 3.x ``rabbit_exchange_type_headers``):

* ``x-match`` is ``all`` (default when absent), ``any``, ``all-with-x`` or
  ``any-with-x``; anything else is rejected at bind time.
* The ``x-match`` argument itself never takes part in matching. Other
  arguments whose name starts with ``x-`` (case-sensitive) are ignored by
  ``all``/``any`` and compared like ordinary ones by the ``-with-x`` kinds.
* An argument with a void (``None``) value only requires the header to be
  present, whatever its value (even void).
* Otherwise the header must be present and equal (see
  :mod:`exchanges.headers_values`).
* ``all`` needs every considered argument to match; with none, it matches
  every message. ``any`` needs one; with none, it matches no message.
* A message without headers behaves like one with an empty table.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass

from exchanges.base import InvalidBinding
from exchanges.headers_values import comparable

__all__ = ["X_MATCH_VALUES", "HeadersPattern", "validate_x_match"]

X_MATCH_VALUES = ("all", "any", "all-with-x", "any-with-x")
"""The accepted values of the ``x-match`` binding argument."""

_X_MATCH = "x-match"
_MISSING = object()


class _Present:
    """Marker: the argument only requires the header to be present."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<present>"


PRESENT = _Present()
"""Stands for a void binding argument: the header must merely be present."""


def validate_x_match(arguments: Mapping[str, object]) -> None:
    """Reject an ``x-match`` argument that RabbitMQ would reject.

    Args:
        arguments: The binding arguments.

    Raises:
        InvalidBinding: If ``x-match`` is present but not one of
            :data:`X_MATCH_VALUES` (the text mirrors RabbitMQ's).
    """
    value = arguments.get(_X_MATCH, _MISSING)
    if value is _MISSING:
        return
    text = _as_longstr(value)
    if text is None:
        raise InvalidBinding(
            f"Invalid x-match field type {_amqp_type_name(value)} "
            f"(value {_erlang_repr(value)}); expected longstr"
        )
    if text not in X_MATCH_VALUES:
        raise InvalidBinding(
            f"Invalid x-match field value {_erlang_repr(value)}; "
            "expected all, any, all-with-x, or any-with-x"
        )


@dataclass(frozen=True, slots=True)
class HeadersPattern:
    """A binding's arguments compiled for fast matching.

    Attributes:
        match_all: True for ``all``/``all-with-x``, False for ``any``/``any-with-x``.
        expected: ``(header name, comparable value or PRESENT)`` for each
            argument that takes part in matching.
    """

    match_all: bool
    expected: tuple[tuple[str, Hashable], ...]

    @classmethod
    def compile(cls, arguments: Mapping[str, object]) -> HeadersPattern:
        """Compile binding arguments (assumed valid; bad ``x-match`` means ``all``).

        Args:
            arguments: The binding arguments.

        Returns:
            The compiled pattern.
        """
        kind = _as_longstr(arguments.get(_X_MATCH))
        match_all = kind not in ("any", "any-with-x")
        with_x = kind in ("all-with-x", "any-with-x")
        expected = tuple(
            (name, PRESENT if value is None else comparable(value))
            for name, value in arguments.items()
            if name != _X_MATCH and (with_x or not name.startswith("x-"))
        )
        return cls(match_all, expected)

    def matches(self, headers: Mapping[str, object]) -> bool:
        """Tell whether a message with ``headers`` matches.

        Args:
            headers: The message headers (empty mapping when the message has none).

        Returns:
            True if the message matches this pattern.
        """
        if self.match_all:
            for name, wanted in self.expected:
                actual = headers.get(name, _MISSING)
                if actual is _MISSING:
                    return False
                if wanted is not PRESENT and comparable(actual) != wanted:
                    return False
            return True
        for name, wanted in self.expected:
            actual = headers.get(name, _MISSING)
            if actual is not _MISSING and (wanted is PRESENT or comparable(actual) == wanted):
                return True
        return False


def _as_longstr(value: object) -> str | None:
    """Return the text of a longstr value (``str``, or undecodable ``bytes``), else None."""
    if isinstance(value, str):
        return value
    if type(value) is bytes:
        return value.decode("utf-8", errors="replace")
    return None


def _amqp_type_name(value: object) -> str:
    """Name the AMQP field type a value would have, in RabbitMQ's vocabulary."""
    if value is None:
        return "void"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        if -(2**31) <= value < 2**31:
            return "signedint"
        return "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, bytearray | memoryview):
        return "binary"
    if isinstance(value, Mapping):
        return "table"
    if isinstance(value, list | tuple):
        return "array"
    return type(value).__name__


def _erlang_repr(value: object) -> str:
    """Render a value roughly as Erlang's ``~tp`` would, for error messages."""
    if value is None:
        return "undefined"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | bytes | bytearray | memoryview):
        if isinstance(value, str):
            text, utf8 = value, not value.isascii()
        else:
            text, utf8 = bytes(value).decode("latin-1"), False
        escaped = text.replace("\\", "\\\\").replace('"', '\\"')
        return f'<<"{escaped}"/utf8>>' if utf8 else f'<<"{escaped}">>'
    return repr(value)
