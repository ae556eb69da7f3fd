"""Queue arguments (``x-…``) parsed and validated once, with RabbitMQ's rules and texts."""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

OVERFLOW_MODES: Final = ("drop-head", "reject-publish", "reject-publish-dlx")
QUEUE_TYPES: Final = ("classic", "quorum", "stream")
QUEUE_MODES: Final = ("default", "lazy")
MAX_PRIORITY: Final = 255
MAX_EXPIRY: Final = 315_360_000_000  # ms (ten years): RabbitMQ's limit for TTLs and x-expires
_INTEGER_PREFIX: Final = re.compile(r"[+-]?[0-9]+")


class InvalidQueueArgument(ValueError):
    """A queue argument RabbitMQ would refuse (reported as 406 PRECONDITION_FAILED)."""

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(problem)
        self.name = name
        self.problem = problem


@dataclass(slots=True, frozen=True)
class QueueSettings:
    """Everything the queue does differently because of its arguments."""

    max_length: int | None = None
    max_length_bytes: int | None = None
    overflow: str = "drop-head"
    message_ttl: int | None = None  # ms
    expires: int | None = None  # ms of disuse before the queue is deleted
    dead_letter_exchange: str | None = None
    dead_letter_routing_key: str | None = None
    max_priority: int | None = None
    delivery_limit: int | None = None
    queue_type: str = "classic"
    single_active_consumer: bool = False


def _text(value: Any) -> Any:
    return value.decode(errors="replace") if isinstance(value, bytes | bytearray) else value


def amqp_type_name(value: Any) -> str:
    """The AMQP field type RabbitMQ names in its texts for a decoded table value."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "signedint" if -(2**31) <= value < 2**31 else "long"
    if isinstance(value, bytearray):
        return "binary"
    if isinstance(value, str | bytes):
        return "longstr"
    if isinstance(value, float):
        return "double"
    if isinstance(value, Decimal):
        return "decimal"
    if isinstance(value, datetime.datetime):
        return "timestamp"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, list):
        return "array"
    return "void" if value is None else type(value).__name__


def _int(
    arguments: dict[str, Any],
    name: str,
    minimum: int = 0,
    maximum: int | None = None,
    too_large: str = "value_too_large",
) -> int | None:
    if name not in arguments:
        return None
    value = arguments[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidQueueArgument(name, f'"expected integer, got {amqp_type_name(value)}"')
    if value < minimum:
        problem = "value_negative" if value < 0 else "value_zero"
        raise InvalidQueueArgument(name, f"{{{problem},{value}}}")
    if maximum is not None and value > maximum:
        raise InvalidQueueArgument(name, f"{{{too_large},{value}}}")
    return value


def _str(arguments: dict[str, Any], name: str) -> str | None:
    if name not in arguments:
        return None
    value = _text(arguments[name])
    if not isinstance(value, str):
        raise InvalidQueueArgument(name, f"{{unacceptable_type,{amqp_type_name(arguments[name])}}}")
    return value


def _str_or(arguments: dict[str, Any], name: str, default: str) -> str:
    value = _str(arguments, name)
    return default if value is None else value


def parse_queue_arguments(arguments: dict[str, Any]) -> QueueSettings:
    """Validate and parse queue arguments (unknown ``x-`` keys are ignored, as RabbitMQ does),
    in the order RabbitMQ checks them (rabbit_amqqueue:declare_args/0), so the first invalid
    argument is the one reported.

    Raises:
        InvalidQueueArgument: with the argument's name and RabbitMQ-style problem text.
    """
    expires = _int(arguments, "x-expires", minimum=1, maximum=MAX_EXPIRY)
    message_ttl = _int(arguments, "x-message-ttl", maximum=MAX_EXPIRY)
    dead_letter_exchange = _str(arguments, "x-dead-letter-exchange")
    dead_letter_routing_key = _str(arguments, "x-dead-letter-routing-key")
    if dead_letter_routing_key is not None and dead_letter_exchange is None:
        raise InvalidQueueArgument("x-dead-letter-routing-key", "routing_key_but_no_dlx_defined")
    max_length = _int(arguments, "x-max-length")
    max_length_bytes = _int(arguments, "x-max-length-bytes")
    max_priority = _int(
        arguments, "x-max-priority", maximum=MAX_PRIORITY, too_large="max_value_exceeded"
    )
    overflow = _str_or(arguments, "x-overflow", "drop-head")
    if overflow not in OVERFLOW_MODES:
        raise InvalidQueueArgument("x-overflow", "invalid_overflow")
    queue_mode = _str_or(arguments, "x-queue-mode", "default")
    if queue_mode not in QUEUE_MODES:
        raise InvalidQueueArgument("x-queue-mode", f"\"unsupported queue mode '{queue_mode}'\"")
    sac = arguments.get("x-single-active-consumer", False)
    if not isinstance(sac, bool):
        raise InvalidQueueArgument(
            "x-single-active-consumer", f"{{unacceptable_type,{amqp_type_name(sac)}}}"
        )
    queue_type = _str_or(arguments, "x-queue-type", "classic")
    if queue_type not in QUEUE_TYPES:
        raise InvalidQueueArgument("x-queue-type", f"\"unsupported queue type '{queue_type}'\"")
    return QueueSettings(
        max_length=max_length,
        max_length_bytes=max_length_bytes,
        overflow=overflow,
        message_ttl=message_ttl,
        expires=expires,
        dead_letter_exchange=dead_letter_exchange,
        dead_letter_routing_key=dead_letter_routing_key,
        max_priority=max_priority,
        delivery_limit=_int(arguments, "x-delivery-limit"),
        queue_type=queue_type,
        single_active_consumer=sac,
    )


def parse_expiration(value: str) -> int:
    """The per-message ``expiration`` property in ms, parsed like RabbitMQ
    (rabbit_basic:parse_expiration: Erlang's string:to_integer, then the expiry range).

    Raises:
        ValueError: with RabbitMQ's wording for a bad value.
    """
    match = _INTEGER_PREFIX.match(value)
    if match is None:
        raise ValueError(f"invalid expiration '{value}': no_integer")
    leftover = value[match.end() :]
    if leftover:
        raise ValueError(f"invalid expiration '{value}': {{leftover_string,\"{leftover}\"}}")
    ms = int(match.group())
    if ms < 0:
        raise ValueError(f"invalid expiration '{value}': {{value_negative,{ms}}}")
    if ms > MAX_EXPIRY:
        raise ValueError(f"invalid expiration '{value}': {{value_too_large,{ms}}}")
    return ms
