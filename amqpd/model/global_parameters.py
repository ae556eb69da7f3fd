"""Global runtime parameters (``rabbitmqctl set_global_parameter``, ``/api/global-parameters``)
and the cluster's permanent id (pure).

RabbitMQ keeps ``cluster_name`` and ``internal_cluster_id`` (made once, at the first boot:
``rabbitmq-cluster-id-`` and 22 URL-safe base64 characters) among the global parameters;
amqpd does the same (`ensure_cluster_id`, called when the access state is loaded), so
``/api/global-parameters`` and ``rabbitmq_identity_info``'s ``rabbitmq_cluster_permanent_id``
show it. Other global parameters are kept and exported as given.
"""

from __future__ import annotations

import base64
import copy
import secrets
from typing import TYPE_CHECKING, Any, Final

from persistence.access import AccessState

if TYPE_CHECKING:
    from amqpd.model.broker import Broker

__all__ = ["CLUSTER_ID", "clear_global", "ensure_cluster_id", "global_json", "set_global"]

CLUSTER_ID: Final = "internal_cluster_id"


def new_cluster_id() -> str:
    """A new permanent cluster id, as RabbitMQ makes one."""
    token = base64.urlsafe_b64encode(secrets.token_bytes(16)).decode("ascii").rstrip("=")
    return f"rabbitmq-cluster-id-{token}"


def ensure_cluster_id(state: AccessState) -> bool:
    """Give ``state`` an ``internal_cluster_id`` if it has none; True if it was added."""
    if isinstance(state.global_parameters.get(CLUSTER_ID), str):
        return False
    state.global_parameters[CLUSTER_ID] = new_cluster_id()
    return True


def global_json(state: AccessState) -> list[dict[str, Any]]:
    """``/api/global-parameters`` items, by name."""
    return [
        {"name": name, "value": value} for name, value in sorted(state.global_parameters.items())
    ]


def set_global(broker: Broker, name: str, value: Any) -> bool:
    """Set a global parameter; True if it is new."""
    state = copy.deepcopy(broker.access.state)
    created = name not in state.global_parameters
    state.global_parameters[name] = value
    broker.replace_access(state)
    return created


def clear_global(broker: Broker, name: str) -> bool:
    """Remove a global parameter; False if there was none."""
    state = copy.deepcopy(broker.access.state)
    if state.global_parameters.pop(name, None) is None:
        return False
    broker.replace_access(state)
    return True
