"""Policies and operator policies, as RabbitMQ 3.10 has them (pure).

Theory of operation
-------------------
A policy (`PolicyRecord`: vhost, name, pattern, apply-to, priority, definition) applies to
the queues and/or exchanges of its vhost whose name the pattern matches (a regular
expression search, as ``re:run``). Of the policies that match an object, the one with the
highest priority applies, and only that one (ties: the first by name); the same, separately,
for operator policies. This module validates records (`validate`), picks the policy of an
object (`select`), merges a policy with an operator policy (`merge`:
``effective_policy_definition``) and folds the result into a queue's settings
(`effective_queue_settings`), with RabbitMQ's precedence:

* numeric limits (``message-ttl``, ``expires``, ``max-length``, ``max-length-bytes``,
  ``delivery-limit``): the lowest of the queue argument, the policy and the operator
  policy (``rabbit_policies:merge_policy_value`` and ``res_min`` in
  ``rabbit_amqqueue_process``);
* ``dead-letter-exchange``, ``dead-letter-routing-key``, ``overflow``: the queue argument
  if there is one, else the policy (``res_arg``); operator policies cannot set them;
* ``alternate-exchange`` (exchanges): the exchange argument if there is one, else the
  policy (``rabbit_policy:get_arg``);
* ``queue-mode``: accepted, no effect (amqpd pages long queues out on its own);
* streams (model/stream_args.py ``stream_policy_settings``, RabbitMQ's
  ``rabbit_stream_queue`` ``args_policy_lookup``): ``max-length-bytes`` and
  ``stream-max-segment-size-bytes`` the lower of argument and policy, ``max-age`` the
  shorter; ``queue-leader-locator`` and ``initial-cluster-size`` checked and kept (one node);
* classic mirroring (``ha-mode`` ...) and ``queue-master-locator``: checked, kept and
  ignored with a warning (model/ha_policy.py: a single node has nothing to mirror);
* ``federation-upstream-set`` / ``federation-upstream`` / ``federation-upstream-pattern``:
  checked here (one of them, a string), acted on by the federation links
  (model/federation.py resolves them, amqpd/shell/links/ runs them).

The broker applies the result live: VirtualHost.apply_policies re-evaluates every queue
and exchange when the policies change.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from amqpd.model.ha_policy import HA_KEYS, check_ha, ignored_keys
from amqpd.model.queue_args import QueueSettings, parse_queue_arguments
from amqpd.model.stream_args import parse_age
from persistence.access import PolicyRecord

__all__ = [
    "APPLY_TO",
    "PolicyError",
    "PolicyRecord",
    "effective_queue_settings",
    "merge",
    "policy_json",
    "select",
    "validate",
]

APPLY_TO: Final = ("queues", "classic_queues", "quorum_queues", "exchanges", "all")
MIN_KEYS: Final = ("message-ttl", "expires", "max-length", "max-length-bytes", "delivery-limit")
OPERATOR_KEYS: Final = (*MIN_KEYS, "max-in-memory-length", "max-in-memory-bytes")
_NON_NEGATIVE_INT: Final = {
    "message-ttl": "a valid message TTL",
    "max-length": "a valid maximum length",
    "max-length-bytes": "a valid maximum length in bytes",
    "max-in-memory-length": "a valid maximum memory in bytes",
    "max-in-memory-bytes": "a valid maximum memory in bytes",
    "delivery-limit": "a valid delivery limit",
}
_STRINGS: Final = {
    "alternate-exchange": "a valid alternate exchange name",
    "dead-letter-exchange": "a valid dead letter exchange name",
    "dead-letter-routing-key": "a valid dead letter routing key",
}
_CHOICES: Final = {
    "queue-mode": (("default", "lazy"), "a valid queue-mode value"),
    "queue-version": ((1, 2), "a valid queue-version value"),
    "queue-leader-locator": (
        ("client-local", "random", "least-leaders"),
        "a valid queue leader locator value",
    ),
    "overflow": (("drop-head", "reject-publish", "reject-publish-dlx"), "a valid overflow value"),
}
# Federation (model/federation.py validates them; importing it here would be a cycle)
FEDERATION_KEYS: Final = (
    "federation-upstream-set",
    "federation-upstream",
    "federation-upstream-pattern",
)
_STREAM_INT: Final = {
    "stream-max-segment-size-bytes": "a valid segment size",
    "initial-cluster-size": "a valid cluster size",
}
POLICY_KEYS: Final = (
    *_NON_NEGATIVE_INT,
    *_STREAM_INT,
    "expires",
    "max-age",
    *_STRINGS,
    *_CHOICES,
    *FEDERATION_KEYS,
)

log = logging.getLogger(__name__)


class PolicyError(ValueError):
    """A policy RabbitMQ would refuse. ``str()`` is RabbitMQ's text (the HTTP API's 400
    ``reason``, what ``rabbitmqctl`` prints after ``Error:``)."""


def erlang_term(value: Any) -> str:
    """A JSON value the way Erlang's ``~p`` prints the decoded term."""
    if isinstance(value, str):
        return f'<<"{value}">>'
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, list):
        return "[" + ",".join(erlang_term(item) for item in value) + "]"
    if isinstance(value, dict):
        return (
            "[" + ",".join(f"{{{erlang_term(k)},{erlang_term(v)}}}" for k, v in value.items()) + "]"
        )
    return json.dumps(value)


def _failed(text: str) -> PolicyError:
    return PolicyError(f"Validation failed\n\n{text}\n")


def _check_key(key: str, value: Any) -> None:
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if key in _NON_NEGATIVE_INT or key in _STREAM_INT:
        if not (is_int and value >= 0):
            what = _NON_NEGATIVE_INT.get(key) or _STREAM_INT[key]
            raise _failed(f"{erlang_term(value)} is not {what}")
    elif key == "max-age":
        if not (isinstance(value, str) and parse_age(value) is not None):
            raise _failed(f"{erlang_term(value)} is not a valid max age")
    elif key == "expires":
        if not (is_int and value >= 1):
            raise _failed(f"{erlang_term(value)} is not a valid queue expiry")
    elif key in _STRINGS:
        if not isinstance(value, str):
            raise _failed(f"{erlang_term(value)} is not {_STRINGS[key]}")
    else:
        allowed, what = _CHOICES[key]
        if value not in allowed or isinstance(value, bool):
            raise _failed(f"{erlang_term(value)} is not {what}")


def validate(
    vhost: str,
    name: Any,
    pattern: Any,
    definition: Any,
    priority: Any = 0,
    apply_to: Any = "all",
    operator: bool = False,
    priority_text: bool = True,
    warn: bool = True,
) -> PolicyRecord:
    """A checked policy (``operator``: an operator policy, fewer keys allowed). As in
    RabbitMQ, every field is checked and the errors are listed one a line, in the order
    apply-to, definition, pattern, priority. ``priority_text``: accept a priority written
    as a decimal string (the CLI, definitions files); RabbitMQ's HTTP API refuses one.
    ``warn``: log the keys that are accepted and ignored (model/ha_policy.py).

    Raises:
        PolicyError: RabbitMQ's validation text.
    """
    if not isinstance(name, str) or not name:
        raise _failed("policy name must be a non-empty string")
    errors = []
    if apply_to not in APPLY_TO:
        shown = "null" if apply_to is None else apply_to
        errors.append(f"apply-to '{shown}' unrecognised; should be 'queues', 'exchanges' or 'all'")
    try:
        _check_definition(definition, operator)
    except PolicyError as exc:
        errors.append(str(exc).removeprefix("Validation failed\n\n").removesuffix("\n"))
    if not isinstance(pattern, str):
        errors.append(f"pattern should be a binary but was {erlang_term(pattern)}")
    else:
        try:
            re.compile(pattern)
        except re.error as bad:  # not "exc": compiled, one name has one type per function
            errors.append(
                f'pattern should be regular expression but is invalid: {{"{bad.msg}",{bad.pos}}}'
            )
    if priority_text and isinstance(priority, str) and re.fullmatch(r"-?[0-9]+", priority):
        priority = int(priority)
    if isinstance(priority, bool) or not isinstance(priority, int):
        errors.append(f"priority should be a number, actually was {erlang_term(priority)}")
    if errors:
        raise _failed("\n".join(errors))
    assert isinstance(definition, Mapping) and isinstance(pattern, str)
    ignored = ignored_keys(definition)
    if ignored and warn and not operator:
        log.warning(
            "policy '%s' in vhost '%s': %s ignored (amqpd is a single node without classic "
            "queue mirroring); the policy's other keys apply",
            name,
            vhost,
            ", ".join(ignored),
        )
    return PolicyRecord(vhost, name, pattern, str(apply_to), priority, dict(definition))


def _check_definition(definition: Any, operator: bool) -> None:
    if not isinstance(definition, Mapping):
        raise _failed(f"definition should be a JSON object, actually was {erlang_term(definition)}")
    if not definition:
        raise _failed("no policy provided")
    allowed = OPERATOR_KEYS if operator else (*POLICY_KEYS, *HA_KEYS)
    unknown = {key: value for key, value in definition.items() if key not in allowed}
    if unknown:
        raise _failed(f"{erlang_term(unknown)} are not recognised policy settings")
    mirroring = None if operator else check_ha(definition)
    if mirroring is not None:
        raise _failed(mirroring)
    federation = _check_federation(definition)
    if federation is not None:
        raise _failed(federation)
    for key, value in definition.items():
        if key not in FEDERATION_KEYS and key not in HA_KEYS:
            _check_key(key, value)


def _check_federation(definition: Mapping[str, Any]) -> str | None:
    """rabbit_federation_parameters:validate_policy: at most one of the keys, a string
    (the pattern a regular expression)."""
    present = [key for key in FEDERATION_KEYS if key in definition]
    if len(present) >= 2:
        return (
            "cannot specify federation-upstream, federation-upstream-set "
            "or federation-upstream-pattern together"
        )
    if not present:
        return None
    key = present[0]
    value = definition[key]
    if not isinstance(value, str):
        what = {
            "federation-upstream-set": "federation upstream set name",
            "federation-upstream": "federation upstream name",
            "federation-upstream-pattern": "federation upstream pattern name",
        }[key]
        return f"{erlang_term(value)} is not a valid {what}"
    if key == "federation-upstream-pattern":
        try:
            re.compile(value)
        except re.error as exc:
            return (
                f"could not compile pattern {value} to a regular expression. "
                f'Error: {{"{exc.msg}",{exc.pos}}}'
            )
    return None


def applies(policy: PolicyRecord, kind: str, name: str, queue_type: str = "classic") -> bool:
    """Whether ``policy`` applies to the ``kind`` ("queue" or "exchange") called ``name``."""
    target = policy.apply_to
    if kind == "exchange":
        wanted = target in ("exchanges", "all")
    else:
        wanted = target in ("queues", "all") or target == f"{queue_type}_queues"
    return wanted and re.search(policy.pattern, name) is not None


def select(
    policies: Iterable[PolicyRecord], kind: str, name: str, queue_type: str = "classic"
) -> PolicyRecord | None:
    """The policy that applies: the highest priority of those that match (ties: by name).
    ``amq.*`` objects and server-named reply queues get none, as in RabbitMQ."""
    if name.startswith("amq."):
        return None
    best: PolicyRecord | None = None
    for policy in policies:
        if not applies(policy, kind, name, queue_type):
            continue
        if (
            best is None
            or policy.priority > best.priority
            or (policy.priority == best.priority and policy.name < best.name)
        ):
            best = policy
    return best


def merge(policy: PolicyRecord | None, operator: PolicyRecord | None) -> dict[str, Any]:
    """The effective policy definition (``effective_policy_definition`` of /api/queues):
    the policy's keys, the operator policy's, and the lower value where both set a limit."""
    merged: dict[str, Any] = dict(policy.definition) if policy is not None else {}
    if operator is not None:
        for key, value in operator.definition.items():
            if key in merged and key in OPERATOR_KEYS:
                merged[key] = min(merged[key], value)
            else:
                merged[key] = value
    return merged


_SETTING_OF: Final = {
    "message-ttl": "message_ttl",
    "expires": "expires",
    "max-length": "max_length",
    "max-length-bytes": "max_length_bytes",
    "delivery-limit": "delivery_limit",
    "dead-letter-exchange": "dead_letter_exchange",
    "dead-letter-routing-key": "dead_letter_routing_key",
    "overflow": "overflow",
}


def effective_queue_settings(
    base: QueueSettings, arguments: Mapping[str, Any], definition: Mapping[str, Any]
) -> QueueSettings:
    """``base`` (parsed from the queue's arguments) with the merged policy ``definition``
    applied by RabbitMQ's precedence (see the module docstring)."""
    changes: dict[str, Any] = {}
    for key, field_name in _SETTING_OF.items():
        if key not in definition:
            continue
        value = definition[key]
        argument_given = f"x-{key}" in arguments
        if key in MIN_KEYS:
            current = getattr(base, field_name)
            changes[field_name] = value if current is None else min(current, value)
        elif not argument_given:
            changes[field_name] = value
    return dataclasses.replace(base, **changes) if changes else base


def queue_policy(
    name: str,
    queue_type: str,
    arguments: Mapping[str, Any],
    policies: Iterable[PolicyRecord],
    operator_policies: Iterable[PolicyRecord],
) -> tuple[PolicyRecord | None, PolicyRecord | None, QueueSettings]:
    """The policy and operator policy of a queue and its effective settings.

    Raises:
        InvalidQueueArgument: never for a declared queue (its arguments were checked).
    """
    policy = select(policies, "queue", name, queue_type)
    operator = select(operator_policies, "queue", name, queue_type)
    base = parse_queue_arguments(dict(arguments))
    if policy is None and operator is None:
        return None, None, base
    return policy, operator, effective_queue_settings(base, arguments, merge(policy, operator))


def alternate_exchange(arguments: Mapping[str, Any], policy: PolicyRecord | None) -> str | None:
    """An exchange's alternate exchange: its argument, else its policy's."""
    argument = arguments.get("alternate-exchange")
    if isinstance(argument, str) and argument:
        return argument
    if policy is not None:
        value = policy.definition.get("alternate-exchange")
        if isinstance(value, str) and value:
            return value
    return None


def policy_json(policy: PolicyRecord) -> dict[str, Any]:
    """A policy as RabbitMQ's HTTP API and definitions show it."""
    return {
        "vhost": policy.vhost,
        "name": policy.name,
        "pattern": policy.pattern,
        "apply-to": policy.apply_to,
        "definition": dict(policy.definition),
        "priority": policy.priority,
    }
