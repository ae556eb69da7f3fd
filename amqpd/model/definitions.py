"""RabbitMQ's definitions format (JSON): users, vhosts, permissions, exchanges, queues, bindings.

Pure: the shell reads / writes the file; `import_definitions` applies a parsed document to the
broker core and `export_definitions` builds one. The format is the one ``rabbitmqctl
export_definitions`` writes and ``load_definitions`` reads, so a file moves between RabbitMQ
and amqpd both ways:

* users: ``name``, ``password_hash`` + ``hashing_algorithm`` (RabbitMQ's salted hashes; a
  hand-written file may give ``password`` instead, which is hashed on import and never
  stored), ``tags`` (a list or RabbitMQ 3.x's comma-separated string), ``limits``
  (model/user_limits.py);
* vhosts: ``name``, ``description``, ``tags``; the max-connections limit is the
  ``vhost-limits`` runtime parameter (``parameters`` section), as RabbitMQ exports it;
* permissions: ``user``, ``vhost``, ``configure``, ``write``, ``read``;
* exchanges, queues, bindings: as declared by a client (``arguments`` are a field table).

* policies: RabbitMQ's policy objects (model/policies.py), applied at once to existing
  queues and exchanges;
* operator policies: RabbitMQ's ``operator_policy`` parameters (read and written as
  RabbitMQ does, model/definitions_rabbit.py; amqpd's older ``operator_policies`` section
  is still read);
* global_parameters: name / value pairs, kept and exported again;
* parameters: ``vhost-limits`` (max-connections, max-queues; other limits are reported
  as not applied), ``shovel`` (model/shovels.py, validated; a shovel starts once imported),
  ``federation-upstream`` and ``federation-upstream-set`` (model/federation.py, validated).

Importing adds or updates, it never deletes (like RabbitMQ). What cannot be applied - an
invalid policy, a queue the vhost refuses, an invalid runtime parameter or one of a plugin
amqpd does not have, topic permissions - is skipped and reported in the list of
problems, which the ``amqpd definitions import`` command prints before exiting with
status 1. Export lists every non-exclusive queue, durable or not, as RabbitMQ does.
"""

from __future__ import annotations

import datetime
import decimal
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import amqpd
from amqpd.model.auth import (
    DEFAULT_HASHING,
    AccessState,
    Permission,
    User,
    VhostInfo,
    hash_password,
    validate_hash,
    validate_regex,
)
from amqpd.model.definitions_rabbit import (
    OPERATOR_POLICY,
    VHOST_LIMITS,
    as_policy_item,
    operator_policy_parameter,
    parse_vhost_limits,
    unsupported_vhost_limits,
    vhost_limits,
)
from amqpd.model.exchange import Exchange
from amqpd.model.parameters import (
    ParameterError,
    check_parameter,
    parameter_json,
    sorted_keys,
)
from amqpd.model.policies import PolicyError, policy_json, validate
from amqpd.model.queue import Queue
from amqpd.model.user_limits import UserLimitError, check_limits
from amqpd.wire.errors import AMQPError
from persistence.records import BindingDef, ExchangeDef, QueueDef

if TYPE_CHECKING:
    from amqpd.model.broker import Broker

log = logging.getLogger(__name__)


class DefinitionsError(ValueError):
    """The document is not a valid definitions file (nothing was applied)."""


def _items(data: Mapping[str, Any], section: str) -> list[Mapping[str, Any]]:
    items = data.get(section) or []
    if not isinstance(items, list) or not all(isinstance(item, Mapping) for item in items):
        raise DefinitionsError(f"'{section}' must be a list of objects")
    return items


def _text(item: Mapping[str, Any], key: str, section: str, default: str | None = None) -> str:
    value = item.get(key, default)
    if not isinstance(value, str):
        raise DefinitionsError(f"{section}: '{key}' must be a string in {dict(item)!r}")
    return value


def _tags(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(tag.strip() for tag in value.split(",") if tag.strip())
    if isinstance(value, list):
        return tuple(str(tag) for tag in value)
    return ()


def _arguments(item: Mapping[str, Any], section: str) -> dict[str, Any]:
    value = item.get("arguments") or {}
    if not isinstance(value, Mapping):
        raise DefinitionsError(f"{section}: 'arguments' must be an object in {dict(item)!r}")
    return dict(value)


def parse_access(data: Mapping[str, Any], into: AccessState) -> AccessState:
    """The access state ``into`` updated with the document's users, vhosts, permissions and
    vhost limits (a new object; ``into`` is not changed).

    Raises:
        DefinitionsError: a malformed entry.
    """
    if not isinstance(data, Mapping):
        raise DefinitionsError("a definitions file is a JSON object")
    state = AccessState(
        dict(into.users),
        dict(into.vhosts),
        dict(into.permissions),
        dict(into.policies),
        dict(into.operator_policies),
        dict(into.global_parameters),
        dict(into.parameters),
        dict(into.user_limits),
    )
    for item in _items(data, "vhosts"):
        name = _text(item, "name", "vhosts")
        old = state.vhosts.get(name)
        raw_metadata = item.get("metadata")
        metadata: Mapping[str, Any] = raw_metadata if isinstance(raw_metadata, Mapping) else {}
        description = item.get("description", metadata.get("description", ""))
        state.vhosts[name] = VhostInfo(
            name,
            str(description or ""),
            _tags(item.get("tags", metadata.get("tags"))),
            None if old is None else old.max_connections,
        )
    for item in _items(data, "users"):
        name = _text(item, "name", "users")
        algorithm = _text(item, "hashing_algorithm", "users", DEFAULT_HASHING)
        if "password_hash" in item:
            password_hash = _text(item, "password_hash", "users")
            try:
                validate_hash(password_hash, algorithm)
            except ValueError as exc:
                raise DefinitionsError(f"users: user '{name}': {exc}") from exc
        elif "password" in item:
            password_hash = hash_password(_text(item, "password", "users"))
            algorithm = DEFAULT_HASHING
        else:
            password_hash = ""  # no password login (EXTERNAL only)
        state.users[name] = User(name, password_hash, algorithm, _tags(item.get("tags")))
        if "limits" in item:  # RabbitMQ exports {} for none
            try:
                limits = check_limits(item["limits"] or {})
            except UserLimitError as exc:
                raise DefinitionsError(f"users: limits of user '{name}': {exc}") from exc
            if limits:
                state.user_limits[name] = limits
            else:
                state.user_limits.pop(name, None)
    for item in _items(data, "permissions"):
        user = _text(item, "user", "permissions")
        vhost = _text(item, "vhost", "permissions")
        if user not in state.users:
            raise DefinitionsError(f"permissions: no user '{user}'")
        if vhost not in state.vhosts:
            raise DefinitionsError(f"permissions: no vhost '{vhost}'")
        regexes = [_text(item, key, "permissions", "") for key in ("configure", "write", "read")]
        for regex in regexes:
            try:
                validate_regex(regex)
            except ValueError as exc:
                raise DefinitionsError(f"permissions of '{user}' in '{vhost}': {exc}") from exc
        state.permissions[(user, vhost)] = Permission(*regexes)
    for item in _items(data, "parameters"):
        if item.get("component") != VHOST_LIMITS:
            continue  # reported by import_definitions
        vhost = _text(item, "vhost", "parameters")
        info = state.vhosts.get(vhost)
        if info is None:
            raise DefinitionsError(f"parameters: no vhost '{vhost}'")
        try:
            info.max_connections, info.max_queues = parse_vhost_limits(item.get("value"))
        except ValueError as exc:
            raise DefinitionsError(f"vhost-limits of '{vhost}': {exc}") from exc
    for item in _items(data, "global_parameters"):
        state.global_parameters[_text(item, "name", "global_parameters")] = item.get("value")
    return state


def _parse_policies(
    data: Mapping[str, Any], state: AccessState, problems: list[str]
) -> dict[str, int]:
    """Add the document's policies and operator policies to ``state``; invalid ones (or of
    a vhost that does not exist) are reported in ``problems`` and skipped."""
    counts = {}
    operator_parameters = [
        as_policy_item(item)
        for item in _items(data, "parameters")
        if item.get("component") == OPERATOR_POLICY
    ]
    for section, operator in (("policies", False), ("operator_policies", True)):
        table = state.operator_policies if operator else state.policies
        counts[section] = 0
        items = _items(data, section) + (operator_parameters if operator else [])
        for item in items:
            vhost, name = str(item.get("vhost", "/")), item.get("name")
            what = f"{section[:-3]}y {name!r} in vhost {vhost!r}"
            if vhost not in state.vhosts:
                problems.append(f"{what}: no vhost {vhost!r}")
                continue
            try:
                policy = validate(
                    vhost,
                    name,
                    item.get("pattern"),
                    item.get("definition"),
                    item.get("priority", 0),
                    item.get("apply-to", "all"),
                    operator,
                )
            except PolicyError as exc:
                problems.append(f"{what}: {' '.join(str(exc).split())}")
                continue
            table[(vhost, policy.name)] = policy
            counts[section] += 1
    return counts


def _parse_parameters(data: Mapping[str, Any], state: AccessState, problems: list[str]) -> int:
    """Add the document's runtime parameters (other than vhost-limits) to ``state``; refused
    ones are reported in ``problems``."""
    count = 0
    for item in _items(data, "parameters"):
        component, vhost, name = item.get("component"), item.get("vhost", "/"), item.get("name")
        if component == OPERATOR_POLICY:
            continue  # _parse_policies
        if component == VHOST_LIMITS:  # applied by parse_access
            unsupported = unsupported_vhost_limits(item)
            problems.extend(unsupported)
            count += not unsupported
            continue
        what = f"parameter {name!r} of component {component!r} in vhost {vhost!r}"
        if not isinstance(name, str) or not isinstance(vhost, str):
            problems.append(f"{what}: name and vhost must be strings")
            continue
        if vhost not in state.vhosts:
            problems.append(f"{what}: no vhost {vhost!r}")
            continue
        try:
            check_parameter(str(component), name, item.get("value"))
        except ParameterError as exc:
            problems.append(f"{what}: {' '.join(str(exc).split())}")
            continue
        state.parameters[(str(component), vhost, name)] = sorted_keys(item.get("value"))
        count += 1
    return count


def import_definitions(
    broker: Broker, data: Mapping[str, Any], problems: list[str] | None = None
) -> dict[str, int]:
    """Apply a definitions document to the broker: access control first (all or nothing),
    then policies (applied to existing queues at once), exchanges, queues and bindings.
    Durable entities are journaled as if a client had declared them. The caller persists
    ``broker.access.state`` when it has a store.

    What cannot be applied (an invalid policy, an entry the broker refuses such as an
    inequivalent redeclaration, an unsupported runtime parameter, topic permissions) is
    skipped and described in ``problems``.

    Returns:
        How many entries of each section were applied.

    Raises:
        DefinitionsError: malformed access definitions (nothing was applied).
    """
    problems = [] if problems is None else problems
    state = parse_access(data, broker.access.state)
    for section in ("exchanges", "queues", "bindings", "policies", "operator_policies"):
        _items(data, section)  # validate the shape before changing anything
    parameter_count = _parse_parameters(data, state, problems)
    for item in _items(data, "topic_permissions"):
        problems.append(
            f"topic permissions of user {item.get('user')!r} in vhost {item.get('vhost')!r}: "
            "not supported by amqpd"
        )
    policy_counts = _parse_policies(data, state, problems)
    broker.replace_access(state)  # creates the new vhosts; permissions and policies apply
    counts = {
        "users": len(_items(data, "users")),
        "vhosts": len(_items(data, "vhosts")),
        "permissions": len(_items(data, "permissions")),
        **policy_counts,
        "global_parameters": len(_items(data, "global_parameters")),
        "parameters": parameter_count,
        "exchanges": 0,
        "queues": 0,
        "bindings": 0,
    }
    for item in _items(data, "exchanges"):
        counts["exchanges"] += _apply(broker, "exchange", item, _declare_exchange, problems)
    for item in _items(data, "queues"):
        counts["queues"] += _apply(broker, "queue", item, _declare_queue, problems)
    for item in _items(data, "bindings"):
        counts["bindings"] += _apply(broker, "binding", item, _bind, problems)
    for problem in problems:
        log.warning("definitions: not applied: %s", problem)
    return counts


def _apply(
    broker: Broker, what: str, item: Mapping[str, Any], action: Any, problems: list[str]
) -> int:
    vhost = broker.vhosts.get(str(item.get("vhost", "/")))
    label = (
        item.get("name")
        if what != "binding"
        else f"{item.get('source')}->{item.get('destination')}"
    )
    if vhost is None:
        problems.append(f"{what} {label!r}: no vhost {item.get('vhost')!r}")
        return 0
    try:
        action(vhost, item)
    except (AMQPError, DefinitionsError, ValueError, TypeError) as exc:
        text = exc.reply_text if isinstance(exc, AMQPError) else str(exc)
        problems.append(f"{what} {label!r} in vhost {vhost.name!r}: {text}")
        return 0
    return 1


def _declare_exchange(vhost: Any, item: Mapping[str, Any]) -> None:
    vhost.declare_exchange(
        _text(item, "name", "exchanges"),
        _text(item, "type", "exchanges", "direct"),
        False,
        bool(item.get("durable", True)),
        bool(item.get("auto_delete", False)),
        bool(item.get("internal", False)),
        _arguments(item, "exchanges"),
    )


def _declare_queue(vhost: Any, item: Mapping[str, Any]) -> None:
    name = _text(item, "name", "queues")
    if not name:
        raise DefinitionsError("a queue needs a name")
    # Never exclusive, so there is no owning connection.
    vhost.declare_queue(
        name,
        False,
        bool(item.get("durable", True)),
        False,
        bool(item.get("auto_delete", False)),
        _arguments(item, "queues"),
        None,
    )


def _bind(vhost: Any, item: Mapping[str, Any]) -> None:
    source = vhost.get_exchange(_text(item, "source", "bindings"))
    kind = _text(item, "destination_type", "bindings", "queue")
    name = _text(item, "destination", "bindings")
    if kind == "queue":
        destination = vhost.get_queue(name)
    elif kind == "exchange":
        destination = vhost.get_exchange(name)
    else:
        raise DefinitionsError(f"unknown destination_type {kind!r}")
    vhost.bind(
        source,
        destination,
        _text(item, "routing_key", "bindings", ""),
        _arguments(item, "bindings"),
    )


def _json_value(value: Any) -> Any:
    """A field-table value as JSON can hold it."""
    if isinstance(value, Mapping):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    return value


def topology(
    broker: Broker,
) -> tuple[list[tuple[ExchangeDef, bool]], list[tuple[QueueDef, bool]], list[BindingDef]]:
    """What a definitions export lists of the live topology, as RabbitMQ's does: every
    exchange but the default and ``amq.*`` ones, every non-exclusive queue (durable or not),
    every binding between them."""
    exchanges: list[tuple[ExchangeDef, bool]] = []
    queues: list[tuple[QueueDef, bool]] = []
    bindings: list[BindingDef] = []
    for vhost in broker.vhosts.values():
        for ex in vhost.exchanges.values():
            if ex.name and not ex.name.startswith("amq."):
                exchange = ExchangeDef(
                    vhost.name, ex.name, ex.type_name, ex.auto_delete, ex.internal, ex.arguments
                )
                exchanges.append((exchange, ex.durable))
        for queue in vhost.queues.values():
            if queue.exclusive_owner is None:
                definition = QueueDef(vhost.name, queue.name, queue.auto_delete, queue.arguments)
                queues.append((definition, queue.durable))
        for ex in vhost.exchanges.values():
            if not ex.name:
                continue  # the default exchange's bindings are implicit
            for destination, key, arguments in ex.router.bindings():
                if isinstance(destination, Exchange):
                    binding = BindingDef(
                        vhost.name, ex.name, "exchange", destination.name, key, arguments
                    )
                elif isinstance(destination, Queue) and destination.exclusive_owner is None:
                    binding = BindingDef(
                        vhost.name, ex.name, "queue", destination.name, key, arguments
                    )
                else:
                    continue
                bindings.append(binding)
    return exchanges, queues, bindings


def export_definitions(
    access: AccessState,
    exchanges: Iterable[tuple[ExchangeDef, bool]] = (),
    queues: Iterable[tuple[QueueDef, bool]] = (),
    bindings: Iterable[BindingDef] = (),
) -> dict[str, Any]:
    """A definitions document (RabbitMQ's layout) of the definitions tables and the
    topology (`topology`)."""
    return {
        "rabbit_version": amqpd.RABBITMQ_VERSION,
        "rabbitmq_version": amqpd.RABBITMQ_VERSION,
        "product_name": "amqpd",
        "product_version": amqpd.__version__,
        "users": [
            {
                "name": user.name,
                "password_hash": user.password_hash,
                "hashing_algorithm": user.hashing_algorithm,
                "tags": list(user.tags),
                "limits": dict(access.user_limits.get(user.name, {})),
            }
            for user in access.users.values()
        ],
        "vhosts": [
            {
                "name": info.name,
                "description": info.description,
                "tags": list(info.tags),
                "metadata": {"description": info.description, "tags": list(info.tags)},
            }
            for info in access.vhosts.values()
        ],
        "permissions": [
            {
                "user": user,
                "vhost": vhost,
                "configure": p.configure,
                "write": p.write,
                "read": p.read,
            }
            for (user, vhost), p in access.permissions.items()
        ],
        "topic_permissions": [],
        "parameters": [
            {
                "vhost": info.name,
                "component": "vhost-limits",
                "name": "limits",
                "value": vhost_limits(info),
            }
            for info in access.vhosts.values()
            if vhost_limits(info)
        ]
        + [
            parameter_json(component, vhost, name, value)
            for (component, vhost, name), value in access.parameters.items()
        ]
        + [operator_policy_parameter(p) for p in access.operator_policies.values()],
        "global_parameters": [
            {"name": name, "value": value} for name, value in access.global_parameters.items()
        ],
        "policies": [policy_json(p) for p in access.policies.values()],
        "queues": [
            {
                "name": q.name,
                "vhost": q.vhost,
                "durable": durable,
                "auto_delete": q.auto_delete,
                "arguments": _json_value(q.arguments),
            }
            for q, durable in queues
        ],
        "exchanges": [
            {
                "name": x.name,
                "vhost": x.vhost,
                "type": x.type_name,
                "durable": durable,
                "auto_delete": x.auto_delete,
                "internal": x.internal,
                "arguments": _json_value(x.arguments),
            }
            for x, durable in exchanges
        ],
        "bindings": [
            {
                "source": b.source,
                "vhost": b.vhost,
                "destination": b.destination,
                "destination_type": b.destination_kind,
                "routing_key": b.routing_key,
                "arguments": _json_value(b.arguments),
            }
            for b in bindings
        ],
    }
