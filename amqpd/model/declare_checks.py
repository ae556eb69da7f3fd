"""RabbitMQ's checks on Exchange.Declare and Queue.Declare, with its reply codes and texts:
exchange types and their arguments, the equivalence of a redeclaration with what exists
(rabbit_misc:assert_args_equivalence), and what quorum queues refuse. Pure functions that
raise :class:`AMQPError`; the vhost (model/vhost.py) calls them before it changes anything."""

from __future__ import annotations

from typing import Any, Final

from amqpd.model.exchange import FEDERATION_UPSTREAM, Exchange
from amqpd.model.queue import Queue
from amqpd.model.queue_args import amqp_type_name
from amqpd.wire.errors import (
    COMMAND_INVALID,
    PRECONDITION_FAILED,
    AMQPError,
    precondition_failed,
)
from exchanges.delayed import DELAYED_TYPE
from exchanges.delayed import argument_problem as delayed_problem
from exchanges.federation_upstream import MAX_HOPS_ARG
from exchanges.registry import EXCHANGE_TYPES, declaration_problem

# Queue arguments compared on redeclare (RabbitMQ's rabbit_amqqueue:declare_args()).
EQUIVALENT_QUEUE_ARGS: Final = (
    "x-expires",
    "x-message-ttl",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-priority",
    "x-overflow",
    "x-queue-mode",
    "x-queue-type",
    "x-single-active-consumer",
    "x-delivery-limit",
    "x-max-age",
    "x-stream-max-segment-size-bytes",
)
# Classic-queue arguments RabbitMQ 3.x refuses on quorum queues.
QUORUM_UNSUPPORTED_ARGS: Final = ("x-max-priority", "x-queue-mode")


def check_exchange_type(type_name: str, arguments: dict[str, Any], new: bool) -> None:
    """503 for an unknown exchange type; for a ``new`` exchange also the type's own argument
    checks (406, or 503 for an x-delayed-message exchange's bad x-delayed-type)."""
    if type_name not in EXCHANGE_TYPES:
        raise AMQPError(COMMAND_INVALID, f"unknown exchange type '{type_name}'", 40, 10)
    if new:
        problem = declaration_problem(type_name, arguments)
        if problem is not None:
            raise precondition_failed(problem)
    if type_name == DELAYED_TYPE and new:
        channel_error, problem = delayed_problem(arguments, EXCHANGE_TYPES)
        if problem:
            code = PRECONDITION_FAILED if channel_error else COMMAND_INVALID
            raise AMQPError(code, problem, 40, 10)


def check_exchange_equivalent(
    vhost: str,
    existing: Exchange,
    type_name: str,
    durable: bool,
    auto_delete: bool,
    internal: bool,
    arguments: dict[str, Any],
) -> None:
    """406 unless a redeclaration of ``existing`` matches it."""
    what = f"for exchange '{existing.name}' in vhost '{vhost}'"
    check_equivalent("type", what, type_name, existing.type_name)
    check_equivalent("durable", what, _flag(durable), _flag(existing.durable))
    check_equivalent("auto_delete", what, _flag(auto_delete), _flag(existing.auto_delete))
    check_equivalent("internal", what, _flag(internal), _flag(existing.internal))
    _check_equivalent_arg(
        "alternate-exchange",
        what,
        arguments.get("alternate-exchange"),
        existing.arguments.get("alternate-exchange"),
    )
    if type_name == FEDERATION_UPSTREAM:
        _check_equivalent_arg(
            MAX_HOPS_ARG,
            what,
            arguments.get(MAX_HOPS_ARG),
            existing.arguments.get(MAX_HOPS_ARG),
        )


def check_queue_equivalent(
    vhost: str, existing: Queue, durable: bool, auto_delete: bool, arguments: dict[str, Any]
) -> None:
    """406 unless a redeclaration of ``existing`` matches it (exclusivity is checked first,
    by the vhost)."""
    what = f"for queue '{existing.name}' in vhost '{vhost}'"
    check_equivalent("durable", what, _flag(durable), _flag(existing.durable))
    check_equivalent("auto_delete", what, _flag(auto_delete), _flag(existing.auto_delete))
    for arg in EQUIVALENT_QUEUE_ARGS:
        _check_equivalent_arg(arg, what, arguments.get(arg), existing.arguments.get(arg))


def check_quorum_declare(
    vhost: str,
    name: str,
    durable: bool,
    exclusive: bool,
    auto_delete: bool,
    arguments: dict[str, Any],
) -> None:
    """406 for what RabbitMQ 3.x refuses on a new quorum queue, in its order of checks
    (rabbit_quorum_queue:declare)."""
    for arg in QUORUM_UNSUPPORTED_ARGS:
        if arg in arguments:
            raise precondition_failed(
                f"invalid arg '{arg}' for queue '{name}' in vhost '{vhost}' "
                "of queue type rabbit_quorum_queue"
            )
    for flag, bad in (
        ("auto-delete", auto_delete),
        ("exclusive-owner", exclusive),
        ("non-durable", not durable),
    ):
        if bad:
            raise precondition_failed(
                f"invalid property '{flag}' for queue '{name}' in vhost '{vhost}'"
            )


def check_equivalent(arg: str, what: str, received: object, current: object) -> None:
    """406 if a declared property differs from the existing one."""
    if received != current:
        raise precondition_failed(
            f"inequivalent arg '{arg}' {what}: received {_show(received)} "
            f"but current is {_show(current)}"
        )


def _flag(value: object) -> str:
    return "true" if value else "false"


def _check_equivalent_arg(arg: str, what: str, received: object, current: object) -> None:
    """An x-argument compared on redeclare, worded like rabbit_misc:assert_args_equivalence
    (a side that is missing makes the other one show its value and AMQP type)."""
    if arg == "x-queue-type":  # RabbitMQ: no x-queue-type is the same as "classic"
        same = (received or "classic") == (current or "classic")
    elif isinstance(received, bool) or isinstance(current, bool):
        same = type(received) is type(current) and received == current
    else:
        same = received == current
    if same:
        return
    typed = received is None or current is None
    raise precondition_failed(
        f"inequivalent arg '{arg}' {what}: received {_show_arg(received, typed)} "
        f"but current is {_show_arg(current, typed)}"
    )


def _show_arg(value: object, typed: bool) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, bytes | bytearray):
        text = value.decode(errors="replace")
    else:
        text = str(value)
    return f"the value '{text}' of type '{amqp_type_name(value)}'" if typed else f"'{text}'"


def _show(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, str) and value in ("true", "false"):
        return f"'{value}'"
    return f"'{value}'"
