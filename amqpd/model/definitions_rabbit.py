"""The parts of RabbitMQ 3.10's definitions layout that differ from amqpd's tables (pure),
so that a file moves between them both ways without losing anything:

* operator policies: RabbitMQ exports them as runtime parameters of component
  ``operator_policy`` (``{"vhost", "component", "name", "value": {"pattern",
  "definition", "priority", "apply-to"}}``), and ``rabbitmqctl export_definitions`` writes
  the definition as a list of ``[key, value]`` pairs rather than an object. amqpd reads
  both shapes (and its own older ``operator_policies`` section) and writes RabbitMQ's
  (`operator_policy_parameter`): RabbitMQ's import ignores an ``operator_policies``
  section without a word;
* user limits: the ``limits`` object of a user (model/user_limits.py);
* vhost limits: the ``vhost-limits`` parameter; amqpd enforces ``max-connections`` and
  ``max-queues`` (`vhost_limits`), and reports any other key as not applied rather than
  dropping it silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from persistence.access import PolicyRecord, VhostInfo

__all__ = [
    "OPERATOR_POLICY",
    "VHOST_LIMITS",
    "as_policy_item",
    "operator_policy_parameter",
    "pairs_to_object",
    "parse_vhost_limits",
    "unsupported_vhost_limits",
    "vhost_limits",
]

OPERATOR_POLICY: Final = "operator_policy"
VHOST_LIMITS: Final = "vhost-limits"
SUPPORTED_VHOST_LIMITS: Final = ("max-connections", "max-queues")


def pairs_to_object(value: Any) -> Any:
    """``[[key, value], ...]`` (how ``rabbitmqctl export_definitions`` writes an Erlang
    proplist) as an object; anything else unchanged (so validation reports it)."""
    if (
        isinstance(value, list)
        and value
        and all(
            isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str) for pair in value
        )
    ):
        return {pair[0]: pair[1] for pair in value}
    return value


def as_policy_item(parameter: Mapping[str, Any]) -> dict[str, Any]:
    """A ``parameters`` entry of component ``operator_policy`` as a ``policies``-section
    item (``vhost``, ``name``, ``pattern``, ``definition``, ``priority``, ``apply-to``)."""
    value = parameter.get("value")
    body: Mapping[str, Any] = value if isinstance(value, Mapping) else {}
    return {
        "vhost": parameter.get("vhost", "/"),
        "name": parameter.get("name"),
        "pattern": body.get("pattern"),
        "definition": pairs_to_object(body.get("definition")),
        "priority": body.get("priority", 0),
        "apply-to": body.get("apply-to", "all"),
    }


def operator_policy_parameter(policy: PolicyRecord) -> dict[str, Any]:
    """An operator policy as RabbitMQ's ``GET /api/definitions`` exports it."""
    return {
        "value": {
            "pattern": policy.pattern,
            "definition": dict(policy.definition),
            "priority": policy.priority,
            "apply-to": policy.apply_to,
        },
        "vhost": policy.vhost,
        "component": OPERATOR_POLICY,
        "name": policy.name,
    }


def parse_vhost_limits(value: Any) -> tuple[int | None, int | None]:
    """(max-connections, max-queues) of a ``vhost-limits`` value (None: not set).

    Raises:
        ValueError: a limit that is not a number.
    """
    limits: list[int | None] = []
    for key in SUPPORTED_VHOST_LIMITS:
        limit = value.get(key) if isinstance(value, Mapping) else None
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise ValueError(f"{key} must be a number")
        limits.append(limit)
    return limits[0], limits[1]


def vhost_limits(info: VhostInfo) -> dict[str, int]:
    """A vhost's limits as the ``vhost-limits`` value (and ``/api/vhost-limits``) shows them."""
    limits = {"max-connections": info.max_connections, "max-queues": info.max_queues}
    return {key: value for key, value in limits.items() if value is not None}


def unsupported_vhost_limits(parameter: Mapping[str, Any]) -> list[str]:
    """What a ``vhost-limits`` entry sets that amqpd does not enforce (each a problem)."""
    value = parameter.get("value")
    if not isinstance(value, Mapping):
        return []
    vhost = parameter.get("vhost", "/")
    return [
        f"vhost limit {key!r} of vhost {vhost!r}: not supported by amqpd "
        f"(it enforces {', '.join(SUPPORTED_VHOST_LIMITS)})"
        for key, limit in value.items()
        if key not in SUPPORTED_VHOST_LIMITS
        and not (isinstance(limit, int) and limit < 0)  # negative: no limit
    ]
