"""Classic queue mirroring keys in policies (``ha-mode``, ``ha-params``, ``ha-sync-mode``,
``ha-sync-batch-size``, ``ha-promote-on-shutdown``, ``ha-promote-on-failure``) and
``queue-master-locator`` (pure).

Most RabbitMQ 3.x setups carry such a policy. amqpd is a single node without mirroring, so
these keys have nothing to act on: a policy that has them is accepted, the keys are kept
(listed and exported again, so a definitions file goes back to RabbitMQ unchanged) and
ignored with a warning in the log, and the policy's other keys apply. They are still checked
as RabbitMQ 3.10 checks them (``rabbit_mirror_queue_misc:validate_policy``, the same texts),
so a policy RabbitMQ would refuse is refused here too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["HA_KEYS", "check_ha", "ignored_keys"]

HA_KEYS: Final = (
    "ha-mode",
    "ha-params",
    "ha-sync-mode",
    "ha-sync-batch-size",
    "ha-promote-on-shutdown",
    "ha-promote-on-failure",
    "queue-master-locator",
)
_PROMOTE: Final = ("always", "when-synced")
_LOCATORS: Final = ("min-masters", "client-local", "random")


def _term(value: Any) -> str:
    if isinstance(value, str):
        return f'<<"{value}">>'
    return json.dumps(value)


def ignored_keys(definition: Mapping[str, Any]) -> list[str]:
    """The keys of ``definition`` that amqpd accepts and ignores."""
    return [key for key in definition if key in HA_KEYS]


def check_ha(definition: Mapping[str, Any]) -> str | None:
    """RabbitMQ's refusal of the mirroring keys of ``definition``, or None."""
    mode = definition.get("ha-mode")
    params = definition.get("ha-params")
    if mode is None:
        if any(key in definition for key in HA_KEYS[1:6]):
            return (
                "ha-mode must be specified to specify ha-params, ha-sync-mode or "
                "ha-promote-on-shutdown"
            )
    elif mode == "all":
        if params is not None:
            return 'ha-mode="all" does not take parameters'
    elif mode == "exactly":
        if params is None:
            return 'ha-mode="exactly" takes an integer, none given'
        if isinstance(params, bool) or not isinstance(params, int) or params < 1:
            return f'ha-mode="exactly" takes an integer, {_term(params)} given'
    elif mode == "nodes":
        if params is None:
            return 'ha-mode="nodes" takes a list, none given'
        if not isinstance(params, list):
            return f'ha-mode="nodes" takes a list, {_term(params)} given'
    else:
        return f"{_term(mode)} is not a valid ha-mode value"
    return _check_others(definition)


def _check_others(definition: Mapping[str, Any]) -> str | None:
    sync = definition.get("ha-sync-mode")
    if sync is not None and sync not in ("manual", "automatic"):
        return f'ha-sync-mode must be "manual" or "automatic", got {_term(sync)}'
    batch = definition.get("ha-sync-batch-size")
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
        return f"ha-sync-batch-size takes an integer greater than 0, {_term(batch)} given"
    for key in ("ha-promote-on-shutdown", "ha-promote-on-failure"):
        value = definition.get(key)
        if value is not None and value not in _PROMOTE:
            return f'{key} must be "always" or "when-synced", got {_term(value)}'
    locator = definition.get("queue-master-locator")
    if locator is not None and locator not in _LOCATORS:
        return f"{_term(locator)} invalid queue-master-locator value"
    return None
