"""Setting, clearing and listing policies on a `Broker` (sans-IO): the one implementation
behind ``amqpd ctl set-policy …`` (model/admin_commands.py), definitions import, and the
management API's ``/api/policies`` and ``/api/operator-policies``.

Each function works on a copy of the broker's definitions and hands the result to
``Broker.replace_access``, which applies it to every queue and exchange at once. The
caller persists it (a running broker: ``Server.save_access()``; a stopped one: the CLI
writes the access tables). Values are RabbitMQ-shaped dicts (`policy_json`); a refused
policy raises `PolicyError` whose text is RabbitMQ's 400 ``reason``, a missing vhost or
policy raises `PolicyNotFound` (404).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from amqpd.model.broker import Broker
from amqpd.model.policies import PolicyError, policy_json, validate
from persistence.access import AccessState, PolicyRecord

__all__ = [
    "PolicyError",
    "PolicyNotFound",
    "clear_policy",
    "get_policy",
    "list_policies",
    "set_policy",
]


class PolicyNotFound(LookupError):
    """No such vhost or policy (HTTP 404; ``rabbitmqctl``: an error)."""


def _table(state: AccessState, operator: bool) -> dict[tuple[str, str], PolicyRecord]:
    return state.operator_policies if operator else state.policies


def list_policies(
    broker: Broker, vhost: str | None = None, operator: bool = False
) -> list[dict[str, Any]]:
    """The policies (of one vhost, or all), RabbitMQ-shaped, sorted by vhost and name.

    Raises:
        PolicyNotFound: ``vhost`` does not exist.
    """
    state = broker.access.state
    if vhost is not None and vhost not in state.vhosts:
        raise PolicyNotFound(f"no such vhost: '{vhost}'")
    return [
        policy_json(policy)
        for key, policy in sorted(_table(state, operator).items())
        if vhost is None or key[0] == vhost
    ]


def get_policy(broker: Broker, vhost: str, name: str, operator: bool = False) -> dict[str, Any]:
    """One policy.

    Raises:
        PolicyNotFound: no such vhost or policy.
    """
    policy = _table(broker.access.state, operator).get((vhost, name))
    if policy is None:
        raise PolicyNotFound(f"no policy '{name}' in vhost '{vhost}'")
    return policy_json(policy)


def set_policy(
    broker: Broker, vhost: str, name: str, body: Mapping[str, Any], operator: bool = False
) -> dict[str, Any]:
    """Create or replace a policy from an HTTP-API-shaped body (``pattern``, ``definition``,
    optional ``priority`` (0) and ``apply-to`` ("all")), applied at once.

    Raises:
        PolicyError: RabbitMQ's validation text (nothing changed).
        PolicyNotFound: ``vhost`` does not exist.
    """
    state = copy.deepcopy(broker.access.state)
    if vhost not in state.vhosts:
        raise PolicyNotFound(f"no such vhost: '{vhost}'")
    if "pattern" not in body or "definition" not in body:
        missing = "pattern" if "pattern" not in body else "definition"
        raise PolicyError(f'Validation failed\n\nKey "{missing}" not found in reference\n')
    policy = validate(
        vhost,
        name,
        body["pattern"],
        body["definition"],
        body.get("priority", 0),
        body.get("apply-to", "all"),
        operator,
    )
    _table(state, operator)[(vhost, name)] = policy
    broker.replace_access(state)
    return policy_json(policy)


def clear_policy(broker: Broker, vhost: str, name: str, operator: bool = False) -> None:
    """Delete a policy; what it set on queues and exchanges reverts at once.

    Raises:
        PolicyNotFound: no such policy (RabbitMQ: "Parameter does not exist").
    """
    state = copy.deepcopy(broker.access.state)
    if _table(state, operator).pop((vhost, name), None) is None:
        raise PolicyNotFound("Parameter does not exist")
    broker.replace_access(state)
