"""Vhost-scoped runtime parameters (``rabbitmqctl set_parameter``, ``/api/parameters``),
set, cleared and listed on a `Broker` (sans-IO).

The one implementation behind ``amqpd ctl set-parameter …`` (model/admin_commands.py),
the management API's ``/api/parameters`` and definitions import. Components: ``shovel``
(model/shovels.py validates it), ``federation-upstream`` and ``federation-upstream-set``
(model/federation.py); ``vhost-limits`` lives in the vhost records (the
``/api/vhost-limits`` resource) and any other component is refused as RabbitMQ refuses a
component whose plugin is not enabled. Each change works on a copy of the definitions and
hands it to ``Broker.replace_access``; the caller persists it and the shell's link
supervisor reacts to what changed (amqpd/shell/links/).
"""

from __future__ import annotations

import copy
from typing import Any, Final

from amqpd.model.broker import Broker
from amqpd.model.definitions_rabbit import (
    OPERATOR_POLICY,
    VHOST_LIMITS,
    operator_policy_parameter,
    vhost_limits,
)
from amqpd.model.federation import UPSTREAM, UPSTREAM_SET, validate_upstream, validate_upstream_set
from amqpd.model.shovels import validate as validate_shovel

__all__ = [
    "COMPONENTS",
    "ParameterError",
    "ParameterNotFound",
    "check_parameter",
    "clear_parameter",
    "get_parameter",
    "list_parameters",
    "parameter_json",
    "set_parameter",
    "sorted_keys",
]

COMPONENTS: Final = ("shovel", UPSTREAM, UPSTREAM_SET)
_VALIDATORS: Final = {
    "shovel": validate_shovel,
    UPSTREAM: validate_upstream,
    UPSTREAM_SET: validate_upstream_set,
}


class ParameterError(ValueError):
    """A parameter RabbitMQ would refuse; ``str()`` is its text (HTTP 400 ``reason``)."""


class ParameterNotFound(LookupError):
    """No such vhost or parameter (HTTP 404)."""


def parameter_json(component: str, vhost: str, name: str, value: Any) -> dict[str, Any]:
    """A parameter as RabbitMQ's API and definitions show it."""
    return {"value": value, "vhost": vhost, "component": component, "name": name}


def sorted_keys(value: Any) -> Any:
    """A copy of a JSON value with every object's keys sorted: RabbitMQ keeps parameter
    values as Erlang maps, so they come back sorted by key."""
    if isinstance(value, dict):
        return {key: sorted_keys(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [sorted_keys(item) for item in value]
    return value


def check_parameter(component: str, name: str, value: Any) -> None:
    """Validate a parameter's value.

    Raises:
        ParameterError: RabbitMQ's "Validation failed" text.
    """
    if component not in COMPONENTS:
        raise ParameterError(f"Validation failed\n\ncomponent {component} not found\n")
    errors = _VALIDATORS[component](name, value)
    if errors:
        raise ParameterError("Validation failed\n\n" + "".join(f"{e}\n" for e in errors))


def list_parameters(
    broker: Broker, component: str | None = None, vhost: str | None = None
) -> list[dict[str, Any]]:
    """The parameters (of one component, of one vhost), sorted.

    Raises:
        ParameterNotFound: ``vhost`` does not exist.
    """
    state = broker.access.state
    if vhost is not None and vhost not in state.vhosts:
        raise ParameterNotFound(f"no such vhost: '{vhost}'")
    return [
        parameter_json(c, v, n, value)
        for (c, v, n), value in sorted(_with_derived(broker).items())
        if (component is None or c == component) and (vhost is None or v == vhost)
    ]


def get_parameter(broker: Broker, component: str, vhost: str, name: str) -> dict[str, Any]:
    """One parameter.

    Raises:
        ParameterNotFound: no such parameter.
    """
    key = (component, vhost, name)
    parameters = _with_derived(broker)
    if key not in parameters:
        raise ParameterNotFound("Parameter does not exist")
    return parameter_json(component, vhost, name, parameters[key])


def _with_derived(broker: Broker) -> dict[tuple[str, str, str], Any]:
    """The runtime parameters, and what RabbitMQ also keeps as runtime parameters and lists
    with them (``vhost-limits``, ``operator_policy``; amqpd keeps those in their own tables)."""
    state = broker.access.state
    out = dict(state.parameters)
    for info in state.vhosts.values():
        limits = vhost_limits(info)
        if limits:
            out[(VHOST_LIMITS, info.name, "limits")] = limits
    for policy in state.operator_policies.values():
        out[(OPERATOR_POLICY, policy.vhost, policy.name)] = operator_policy_parameter(policy)[
            "value"
        ]
    return out


def set_parameter(broker: Broker, component: str, vhost: str, name: str, value: Any) -> bool:
    """Create or replace a parameter; True if it was new.

    Raises:
        ParameterError: refused (nothing changed).
        ParameterNotFound: ``vhost`` does not exist.
    """
    state = copy.deepcopy(broker.access.state)
    if vhost not in state.vhosts:
        raise ParameterNotFound(f"no such vhost: '{vhost}'")
    check_parameter(component, name, value)
    created = (component, vhost, name) not in state.parameters
    state.parameters[(component, vhost, name)] = sorted_keys(value)
    broker.replace_access(state)
    return created


def clear_parameter(broker: Broker, component: str, vhost: str, name: str) -> None:
    """Delete a parameter (a shovel stops).

    Raises:
        ParameterNotFound: "Parameter does not exist" (RabbitMQ's text).
    """
    state = copy.deepcopy(broker.access.state)
    if state.parameters.pop((component, vhost, name), None) is None:
        raise ParameterNotFound("Parameter does not exist")
    broker.replace_access(state)
