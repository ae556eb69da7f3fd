"""Federation configuration, as RabbitMQ 3.10's federation plugin has it (pure).

Theory of operation
-------------------
Federation is configured with three things, all vhost-scoped:

* ``federation-upstream`` runtime parameters: where to connect (``uri``, a URI or a list
  of them) and how (``prefetch-count``, ``reconnect-delay``, ``ack-mode``,
  ``trust-user-id``; exchange side ``exchange``, ``max-hops``, ``expires``,
  ``message-ttl``, ``queue-type``, ``resource-cleanup-mode``; queue side ``queue``,
  ``consumer-tag``; ``bind-nowait``, ``channel-use-mode``, ``ha-policy``);
* ``federation-upstream-set`` runtime parameters: a list of ``{"upstream": NAME, ...}``
  entries, each naming an upstream and overriding any of its keys but ``uri``;
* a policy key that makes an exchange or queue federated: ``federation-upstream-set``
  (a set's name, or ``all`` for every upstream of the vhost), ``federation-upstream``
  (one upstream) or ``federation-upstream-pattern`` (a regular expression over upstream
  names); at most one of them.

`validate_upstream` and `validate_upstream_set` return RabbitMQ's refusals
(``rabbit_federation_parameters`` with ``rabbit_parameter_validation``'s texts); the policy
keys are checked with the other policy keys (model/policies.py).
`resolve` turns a policy definition into the `Upstream` specs the links run, as
``rabbit_federation_upstream:for/1`` does: set entries naming no stored upstream are
skipped, set keys win over the upstream's. Nothing here connects anywhere: the shell's
links (amqpd/shell/links/) do that, exchange side and queue side.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from amqpd.model.policies import FEDERATION_KEYS, erlang_term
from amqpd.model.shovels import boolean_error, number_error, redact_uri, uri_error

__all__ = [
    "POLICY_KEYS",
    "UPSTREAM",
    "UPSTREAM_SET",
    "Upstream",
    "federation_policy_key",
    "redact_uri",
    "resolve",
    "validate_upstream",
    "validate_upstream_set",
]

UPSTREAM: Final = "federation-upstream"
UPSTREAM_SET: Final = "federation-upstream-set"
UPSTREAM_PATTERN: Final = "federation-upstream-pattern"
POLICY_KEYS: Final = FEDERATION_KEYS  # (set, upstream, pattern)
ACK_MODES: Final = ("no-ack", "on-publish", "on-confirm")

DEFAULT_PREFETCH: Final = 1000
DEFAULT_RECONNECT_DELAY: Final = 5.0
DEFAULT_MAX_HOPS: Final = 1

_Check = Callable[[str, Any], "str | None"]
Parameters = Mapping[tuple[str, str, str], Any]  # (component, vhost, name) -> value


@dataclass(slots=True, frozen=True)
class Upstream:
    """One upstream of a federated exchange or queue, resolved (set overrides applied).

    ``exchange`` / ``queue`` are None when the upstream names none: the link then uses
    the downstream's own name (`upstream_exchange`, `upstream_queue`).
    """

    vhost: str
    name: str  # the federation-upstream parameter's name
    uris: tuple[str, ...]
    prefetch_count: int = DEFAULT_PREFETCH
    reconnect_delay: float = DEFAULT_RECONNECT_DELAY
    ack_mode: str = "on-confirm"
    trust_user_id: bool = False
    exchange: str | None = None
    queue: str | None = None
    consumer_tag: str | None = None
    max_hops: int = DEFAULT_MAX_HOPS
    expires: int | None = None  # ms, the upstream queue's x-expires
    message_ttl: int | None = None  # ms, the upstream queue's x-message-ttl
    queue_type: str = "classic"
    bind_nowait: bool = False
    resource_cleanup_mode: str = "default"
    channel_use_mode: str = "multiple"

    def upstream_exchange(self, downstream: str) -> str:
        """The exchange to federate from, for the downstream exchange ``downstream``."""
        return downstream if self.exchange is None else self.exchange

    def upstream_queue(self, downstream: str) -> str:
        """The queue to federate from, for the downstream queue ``downstream``."""
        return downstream if self.queue is None else self.queue


# -- validation (rabbit_parameter_validation's texts) -------------------------------------


def _binary(key: str, value: Any) -> str | None:
    if isinstance(value, str):
        return None
    return f"{key} should be binary, actually was {erlang_term(value)}"


def _enum(options: tuple[str, ...]) -> _Check:
    shown = erlang_term(list(options))

    def check(key: str, value: Any) -> str | None:
        if not isinstance(value, str):
            return f"{key} should be binary, actually was {erlang_term(value)}"
        if value in options:
            return None
        return f"{key} should be one of {shown}, actually was {erlang_term(value)}"

    return check


def _uri(key: str, value: Any) -> str | None:
    """validate_uri: a URI, or a list of them (each checked; an empty list passes)."""
    if isinstance(value, str):
        return uri_error(value)
    if not isinstance(value, list):
        return f"{key} should be list, actually was {erlang_term(value)}"
    for item in value:
        refused = _uri(key, item)
        if refused is not None:
            return refused
    return None


# The shared keys, in rabbit_federation_parameters:shared_validation/0's order.
_SHARED: Final[tuple[tuple[str, _Check], ...]] = (
    ("exchange", _binary),
    ("queue", _binary),
    ("consumer-tag", _binary),
    ("prefetch-count", number_error),
    ("reconnect-delay", number_error),
    ("max-hops", number_error),
    ("expires", number_error),
    ("message-ttl", number_error),
    ("trust-user-id", boolean_error),
    ("ack-mode", _enum(ACK_MODES)),
    ("resource-cleanup-mode", _enum(("default", "never"))),
    ("queue-type", _enum(("classic", "quorum"))),
    ("ha-policy", _binary),
    ("bind-nowait", boolean_error),
    ("channel-use-mode", _enum(("multiple", "single"))),
)


def _proplist(name: str, value: Any, checks: tuple[tuple[str, _Check, bool], ...]) -> list[str]:
    """rabbit_parameter_validation:proplist: every known key checked, missing mandatory
    keys named, the rest "Unrecognised"; RabbitMQ's fold lists the results reversed."""
    if isinstance(value, list):  # a JSON array: nothing in it is a key
        remainder: dict[str, Any] = {}
        unknown_items: list[Any] = value
    elif isinstance(value, dict):
        remainder, unknown_items = dict(value), []
    else:
        return [f"{name} not a list {erlang_term(value)}"]
    results: list[str] = []
    for key, check, mandatory in checks:
        if key in remainder:
            refused = check(key, remainder.pop(key))
            if refused is not None:
                results.append(refused)
        elif mandatory:
            results.append(f'Key "{key}" not found in {name}')
    results.reverse()
    if remainder or unknown_items:
        shown = erlang_term(unknown_items) if unknown_items else erlang_term(remainder)
        results.insert(0, f"Unrecognised terms {shown} in {name}")
    return results


_UPSTREAM_CHECKS: Final = (("uri", _uri, True), *((k, c, False) for k, c in _SHARED))
_SET_ENTRY_CHECKS: Final = (("upstream", _binary, True), *((k, c, False) for k, c in _SHARED))


def validate_upstream(name: str, value: Any) -> list[str]:
    """RabbitMQ's refusals of a ``federation-upstream`` value (empty: valid)."""
    return _proplist(name, value, _UPSTREAM_CHECKS)


def validate_upstream_set(name: str, value: Any) -> list[str]:
    """RabbitMQ's refusals of a ``federation-upstream-set`` value (empty: valid). RabbitMQ
    crashes on a value that is not a list of objects; amqpd refuses it with a text."""
    if not isinstance(value, list):
        return [f"{name} not a list {erlang_term(value)}"]
    errors: list[str] = []
    for entry in value:
        if not isinstance(entry, dict):
            errors.append(f"{name} not a list {erlang_term(entry)}")
            continue
        errors += _proplist(name, entry, _SET_ENTRY_CHECKS)
    return errors


# -- resolution (rabbit_federation_upstream:for/1) ----------------------------------------


def federation_policy_key(definition: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """The federation key of an effective policy definition and its value, or None: the
    object is not federated."""
    if not definition:
        return None
    for key in POLICY_KEYS:
        value = definition.get(key)
        if isinstance(value, str):
            return key, value
    return None


def _set_entries(parameters: Parameters, vhost: str, key: str, value: str) -> list[Any]:
    if key == UPSTREAM:
        return [{"upstream": value}]
    if key == UPSTREAM_PATTERN:
        try:
            pattern = re.compile(value)
        except re.error:
            return []
        return [
            {"upstream": name}
            for (component, where, name) in sorted(parameters)
            if component == UPSTREAM and where == vhost and pattern.search(name)
        ]
    if value == "all":
        return [
            {"upstream": name}
            for (component, where, name) in sorted(parameters)
            if component == UPSTREAM and where == vhost
        ]
    entries = parameters.get((UPSTREAM_SET, vhost, value))
    return entries if isinstance(entries, list) else []


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)
    return None


def _upstream(vhost: str, name: str, base: Mapping[str, Any], entry: Mapping[str, Any]) -> Upstream:
    def get(key: str, default: Any) -> Any:
        return entry[key] if key in entry else base.get(key, default)

    uri = base.get("uri")
    uris = tuple(uri) if isinstance(uri, list) else (uri,) if isinstance(uri, str) else ()
    max_hops = _int_or_none(get("max-hops", DEFAULT_MAX_HOPS))
    return Upstream(
        vhost=vhost,
        name=name,
        uris=uris,
        prefetch_count=max(0, int(get("prefetch-count", DEFAULT_PREFETCH))),
        reconnect_delay=float(get("reconnect-delay", DEFAULT_RECONNECT_DELAY)),
        ack_mode=str(get("ack-mode", "on-confirm")),
        trust_user_id=bool(get("trust-user-id", False)),
        exchange=get("exchange", None),
        queue=get("queue", None),
        consumer_tag=get("consumer-tag", None),
        max_hops=DEFAULT_MAX_HOPS if max_hops is None else max_hops,
        expires=_int_or_none(get("expires", None)),
        message_ttl=_int_or_none(get("message-ttl", None)),
        queue_type=str(get("queue-type", "classic")),
        bind_nowait=bool(get("bind-nowait", False)),
        resource_cleanup_mode=str(get("resource-cleanup-mode", "default")),
        channel_use_mode=str(get("channel-use-mode", "multiple")),
    )


def resolve(
    parameters: Parameters, vhost: str, definition: Mapping[str, Any] | None
) -> list[Upstream]:
    """The upstreams of an exchange or queue of ``vhost`` whose effective policy
    definition is ``definition`` (empty: not federated). ``parameters``: the stored
    runtime parameters (``AccessState.parameters``). An entry naming no stored upstream,
    or one whose stored value is invalid, is left out, as RabbitMQ does."""
    found = federation_policy_key(definition)
    if found is None:
        return []
    upstreams: list[Upstream] = []
    for entry in _set_entries(parameters, vhost, *found):
        if not isinstance(entry, dict) or not isinstance(entry.get("upstream"), str):
            continue
        name = entry["upstream"]
        base = parameters.get((UPSTREAM, vhost, name))
        if not isinstance(base, dict) or validate_upstream(name, base):
            continue
        if validate_upstream_set(name, [entry]):
            continue
        upstreams.append(_upstream(vhost, name, base, entry))
    return upstreams
