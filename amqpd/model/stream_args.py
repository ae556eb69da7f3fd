"""Stream arguments: the declare rules of RabbitMQ's rabbit_stream_queue and the consumer
arguments (``x-stream-offset``, filters, offset tracking), with RabbitMQ's reply texts.

Measured against RabbitMQ 3.10.8 (see docs/architecture.md, Streams): a declare is checked
for a server-generated name, then for arguments the stream type does not take, then the
values of the ones it does, then the durable / exclusive / auto-delete flags.
"""

from __future__ import annotations

import calendar
import datetime
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from amqpd.model.queue_args import amqp_type_name
from amqpd.wire.errors import NOT_IMPLEMENTED, AMQPError, precondition_failed

STREAM_TYPE: Final = "stream"
# Arguments RabbitMQ knows (rabbit_amqqueue:declare_args) that a stream refuses, in its order.
UNSUPPORTED_ARGS: Final = (
    "x-expires",
    "x-message-ttl",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-max-length",
    "x-max-in-memory-length",
    "x-max-in-memory-bytes",
    "x-max-priority",
    "x-overflow",
    "x-queue-mode",
    "x-single-active-consumer",
    "x-quorum-initial-group-size",
    "x-delivery-limit",
)
_AGE: Final = re.compile(r"([0-9]+)([YMDhms])")
_AGE_SECONDS: Final = {
    "Y": 365 * 86400,
    "M": 30 * 86400,
    "D": 86400,
    "h": 3600,
    "m": 60,
    "s": 1,
}


def is_stream(arguments: dict[str, Any]) -> bool:
    """Whether queue arguments declare a stream."""
    value = arguments.get("x-queue-type")
    if isinstance(value, bytes | bytearray):
        value = value.decode(errors="replace")
    return value == STREAM_TYPE


def parse_age(value: str) -> int | None:
    """An ``x-max-age`` / interval string ("7D", "10m", "2s") in seconds; None if invalid."""
    match = _AGE.fullmatch(value)
    if match is None or int(match.group(1)) == 0:
        return None
    return int(match.group(1)) * _AGE_SECONDS[match.group(2)]


@dataclass(slots=True, frozen=True)
class StreamSettings:
    """What a stream does differently because of its arguments."""

    max_bytes: int | None = None  # x-max-length-bytes
    max_age: int | None = None  # x-max-age, seconds
    max_segment_bytes: int | None = None  # x-stream-max-segment-size-bytes


def _int_arg(arguments: dict[str, Any], name: str, where: str) -> int | None:
    if name not in arguments:
        return None
    value = arguments[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise precondition_failed(
            f"invalid arg '{name}' {where}: \"expected integer, got {amqp_type_name(value)}\""
        )
    if value < 0:
        raise precondition_failed(f"invalid arg '{name}' {where}: {{value_negative,{value}}}")
    return value


def check_stream_declare(
    name: str,
    vhost: str,
    durable: bool,
    exclusive: bool,
    auto_delete: bool,
    arguments: dict[str, Any],
) -> StreamSettings:
    """RabbitMQ's checks of a stream declaration (406 PRECONDITION_FAILED).

    Raises:
        AMQPError: with RabbitMQ's text.
    """
    if not name:
        raise precondition_failed(
            "Cannot declare a server-named queue for type rabbit_stream_queue"
        )
    where = f"for queue '{name}' in vhost '{vhost}'"
    for arg in UNSUPPORTED_ARGS:
        if arg in arguments:
            raise precondition_failed(
                f"invalid arg '{arg}' {where} of queue type rabbit_stream_queue"
            )
    max_bytes = _int_arg(arguments, "x-max-length-bytes", where)
    max_age = None
    if "x-max-age" in arguments:
        raw = arguments["x-max-age"]
        text = raw.decode(errors="replace") if isinstance(raw, bytes | bytearray) else raw
        if not isinstance(text, str):
            raise precondition_failed(
                f"invalid arg 'x-max-age' {where}: {{unacceptable_type,{amqp_type_name(raw)}}}"
            )
        max_age = parse_age(text)
        if max_age is None:
            raise precondition_failed(f"invalid arg 'x-max-age' {where}: invalid_max_age")
    segment = _int_arg(arguments, "x-stream-max-segment-size-bytes", where)
    _int_arg(arguments, "x-initial-cluster-size", where)
    for flag, bad in (
        ("auto-delete", auto_delete),
        ("exclusive-owner", exclusive),
        ("non-durable", not durable),
    ):
        if bad:
            raise precondition_failed(f"invalid property '{flag}' {where}")
    return StreamSettings(max_bytes, max_age, segment or None)


def stream_settings(arguments: dict[str, Any]) -> StreamSettings:
    """The settings of a stream whose declaration was already checked (recovery)."""
    max_bytes = arguments.get("x-max-length-bytes")
    age = arguments.get("x-max-age")
    if isinstance(age, bytes | bytearray):
        age = age.decode(errors="replace")
    segment = arguments.get("x-stream-max-segment-size-bytes")
    return StreamSettings(
        max_bytes if isinstance(max_bytes, int) and not isinstance(max_bytes, bool) else None,
        parse_age(age) if isinstance(age, str) else None,
        segment if isinstance(segment, int) and not isinstance(segment, bool) and segment else None,
    )


# -- consumers ---------------------------------------------------------------------------
@dataclass(slots=True, frozen=True)
class OffsetSpec:
    """Where a consumer starts: kind is first | last | next | offset | timestamp."""

    kind: str
    value: int = 0  # an offset, or a timestamp in ms


@dataclass(slots=True, frozen=True)
class StreamConsumerArgs:
    """A stream consumer's arguments, parsed."""

    offset: OffsetSpec | None  # None: none given (next, or the tracked offset)
    filters: tuple[bytes, ...] | None
    match_unfiltered: bool
    tracking: bool


def _offset_error(where: str, value: Any) -> AMQPError:
    if isinstance(value, bool):
        shown = f"{{bool,{'true' if value else 'false'}}}"
    elif isinstance(value, str | bytes | bytearray):
        text = value.decode(errors="replace") if isinstance(value, bytes | bytearray) else value
        shown = f'{{longstr,<<"{text}">>}}'
    else:
        shown = f"{{{amqp_type_name(value)},{value}}}"
    return precondition_failed(
        f"invalid arg 'x-stream-offset' {where}: {{invalid_stream_offset_arg,{shown}}}"
    )


def parse_offset(value: Any, now: float, where: str) -> OffsetSpec:
    """An ``x-stream-offset`` value (406 when it is not one RabbitMQ takes)."""
    if isinstance(value, bool):
        raise _offset_error(where, value)
    if isinstance(value, int):
        return OffsetSpec("offset", max(value, 0))
    if isinstance(value, datetime.datetime):
        seconds = calendar.timegm(value.utctimetuple())
        return OffsetSpec("timestamp", seconds * 1000)
    if isinstance(value, bytes | bytearray):
        value = value.decode(errors="replace")
    if isinstance(value, str):
        if value in ("first", "last", "next"):
            return OffsetSpec(value)
        interval = parse_age(value)
        if interval is not None:
            return OffsetSpec("timestamp", int((now - interval) * 1000))
    raise _offset_error(where, value)


def parse_consumer_args(arguments: dict[str, Any], now: float, where: str) -> StreamConsumerArgs:
    """A stream consumer's arguments (406 for a bad one)."""
    offset = None
    if "x-stream-offset" in arguments:
        offset = parse_offset(arguments["x-stream-offset"], now, where)
    filters: tuple[bytes, ...] | None = None
    raw = arguments.get("x-stream-filter")
    if raw is not None:
        values = raw if isinstance(raw, list) else [raw]
        parsed = []
        for value in values:
            if isinstance(value, str):
                value = value.encode()
            if not isinstance(value, bytes | bytearray):
                raise precondition_failed(
                    f"invalid arg 'x-stream-filter' {where}: "
                    f"{{unacceptable_type,{amqp_type_name(value)}}}"
                )
            parsed.append(bytes(value))
        filters = tuple(parsed)
    match_unfiltered = arguments.get("x-stream-match-unfiltered", False)
    tracking = arguments.get("x-stream-automatic-offset-tracking", False)
    for name, flag in (
        ("x-stream-match-unfiltered", match_unfiltered),
        ("x-stream-automatic-offset-tracking", tracking),
    ):
        if not isinstance(flag, bool):
            raise precondition_failed(
                f"invalid arg '{name}' {where}: {{unacceptable_type,{amqp_type_name(flag)}}}"
            )
    return StreamConsumerArgs(offset, filters, bool(match_unfiltered), bool(tracking))


def not_supported(what: str, queue_name: str, vhost: str) -> AMQPError:
    """RabbitMQ's connection error for what a stream does not do (540 NOT_IMPLEMENTED)."""
    return AMQPError(
        NOT_IMPLEMENTED,
        f"{what} not supported by stream queues queue '{queue_name}' in vhost '{vhost}'",
    )


def prefetch_not_set(queue_name: str, vhost: str) -> AMQPError:
    """RabbitMQ's refusal of a stream consumer without a per-consumer prefetch (406)."""
    return precondition_failed(
        f"consumer prefetch count is not set for 'queue '{queue_name}' in vhost '{vhost}''"
    )


def stream_policy_settings(
    base: StreamSettings, arguments: Mapping[str, Any], definition: Mapping[str, Any]
) -> StreamSettings:
    """A stream's settings from its arguments (``base``) and its merged policy definition,
    as RabbitMQ 3.10's ``rabbit_stream_queue`` looks them up (``args_policy_lookup``): a
    setting given by only one of them is taken from it; given by both, the lower size
    (``max-length-bytes``, ``stream-max-segment-size-bytes``) and the shorter age
    (``max-age``) win. Policies were validated, so their values parse."""

    def lower(argument: int | None, policy: Any) -> int | None:
        if isinstance(policy, bool) or not isinstance(policy, int):
            return argument
        return policy if argument is None else min(argument, policy)

    age = definition.get("max-age")
    policy_age = parse_age(age) if isinstance(age, str) else None
    segment = lower(
        base.max_segment_bytes if "x-stream-max-segment-size-bytes" in arguments else None,
        definition.get("stream-max-segment-size-bytes"),
    )
    return StreamSettings(
        lower(base.max_bytes, definition.get("max-length-bytes")),
        lower(base.max_age, policy_age),
        segment or None,
    )
