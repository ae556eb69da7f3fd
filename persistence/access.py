"""Access-control records and their SQL (schema 2): users, vhosts, permissions; policies,
operator policies and global parameters (schema 3); vhost-scoped runtime parameters
(schema 6); user limits (RabbitMQ's ``limits`` of a user: max-connections, max-channels),
kept in the parameters table under the reserved component `USER_LIMITS_COMPONENT` with an
empty vhost, and a vhost's max-queues limit under `MAX_QUEUES_COMPONENT`, so no schema
change was needed (in memory they are `AccessState.user_limits`,
never a runtime parameter).

Pure: the statements and row conversions live here; :class:`persistence.store.Store` runs
them (``load_access`` / ``save_access``). The tables are small and are rewritten whole in
one transaction whenever they change (at startup for a definitions import, or by the
``amqpd users|vhosts`` commands, through the group committer on a running broker).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "FULL_ACCESS",
    "LOAD_SQL",
    "MAX_QUEUES_COMPONENT",
    "USER_LIMITS_COMPONENT",
    "AccessState",
    "Permission",
    "PolicyRecord",
    "User",
    "VhostInfo",
    "rows_to_state",
    "state_to_statements",
]

FULL_ACCESS: Final = ".*"
USER_LIMITS_COMPONENT: Final = "amqpd-user-limits"  # parameters rows: ('', user) -> limits
MAX_QUEUES_COMPONENT: Final = "amqpd-max-queues"  # parameters rows: (vhost, '') -> limit


@dataclass(slots=True)
class User:
    """A user: name, password hash (empty: no password login) and RabbitMQ tags."""

    name: str
    password_hash: str
    hashing_algorithm: str = "rabbit_password_hashing_sha256"
    tags: tuple[str, ...] = ()


@dataclass(slots=True, frozen=True)
class Permission:
    """A user's rights in one vhost: three regular expressions over resource names."""

    configure: str = FULL_ACCESS
    write: str = FULL_ACCESS
    read: str = FULL_ACCESS


@dataclass(slots=True)
class VhostInfo:
    """A vhost's definition: description, tags and the max-connections limit."""

    name: str
    description: str = ""
    tags: tuple[str, ...] = ()
    max_connections: int | None = None  # None or negative: unlimited; 0: no connections
    max_queues: int | None = None  # the same for queues (kept in the parameters table)


@dataclass(slots=True, frozen=True)
class PolicyRecord:
    """A policy or operator policy as RabbitMQ defines it (``definition`` is JSON-able)."""

    vhost: str
    name: str
    pattern: str
    apply_to: str = "all"
    priority: int = 0
    definition: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class AccessState:
    """Everything the small definition tables hold: what the store loads and saves."""

    users: dict[str, User] = field(default_factory=dict)
    vhosts: dict[str, VhostInfo] = field(default_factory=dict)
    permissions: dict[tuple[str, str], Permission] = field(default_factory=dict)
    policies: dict[tuple[str, str], PolicyRecord] = field(default_factory=dict)  # (vhost, name)
    operator_policies: dict[tuple[str, str], PolicyRecord] = field(default_factory=dict)
    global_parameters: dict[str, Any] = field(default_factory=dict)  # name -> JSON value
    # runtime parameters: (component, vhost, name) -> JSON value (e.g. a shovel's definition)
    parameters: dict[tuple[str, str, str], Any] = field(default_factory=dict)
    # user limits: user -> {"max-connections": N, "max-channels": N} (RabbitMQ's names)
    user_limits: dict[str, dict[str, int]] = field(default_factory=dict)


LOAD_SQL: Final = {
    "users": "SELECT name, password_hash, hashing_algorithm, tags FROM users ORDER BY name",
    "vhosts": "SELECT name, description, tags, max_connections FROM vhosts ORDER BY name",
    "permissions": "SELECT user, vhost, configure, write, read FROM permissions"
    " ORDER BY user, vhost",
    "policies": "SELECT kind, vhost, name, pattern, apply_to, priority, definition FROM policies"
    " ORDER BY kind, vhost, name",
    "global_parameters": "SELECT name, value FROM global_parameters ORDER BY name",
    "parameters": "SELECT component, vhost, name, value FROM parameters"
    " ORDER BY component, vhost, name",
}
_POLICY_KINDS: Final = ("policy", "operator")


def _tags(text: str) -> tuple[str, ...]:
    return tuple(tag for tag in text.split(",") if tag)


def rows_to_state(rows: dict[str, list[Any]]) -> AccessState:
    """Build the state from the rows of the three `LOAD_SQL` queries."""
    state = AccessState()
    for name, password_hash, algorithm, tags in rows["users"]:
        state.users[name] = User(name, password_hash, algorithm, _tags(tags))
    for name, description, tags, max_connections in rows["vhosts"]:
        state.vhosts[name] = VhostInfo(name, description, _tags(tags), max_connections)
    for user, vhost, configure, write, read in rows["permissions"]:
        state.permissions[(user, vhost)] = Permission(configure, write, read)
    for kind, vhost, name, pattern, apply_to, priority, definition in rows["policies"]:
        table = state.policies if kind == "policy" else state.operator_policies
        table[(vhost, name)] = PolicyRecord(
            vhost, name, pattern, apply_to, priority, json.loads(definition)
        )
    for name, value in rows["global_parameters"]:
        state.global_parameters[name] = json.loads(value)
    for component, vhost, name, value in rows["parameters"]:
        if component == USER_LIMITS_COMPONENT:
            state.user_limits[name] = json.loads(value)
        elif component == MAX_QUEUES_COMPONENT:
            if vhost in state.vhosts:
                state.vhosts[vhost].max_queues = json.loads(value)
        else:
            state.parameters[(component, vhost, name)] = json.loads(value)
    return state


def state_to_statements(state: AccessState) -> list[tuple[str, list[tuple[Any, ...]]]]:
    """``(sql, rows)`` pairs that replace the stored access state with ``state``."""
    policy_rows = [
        (kind, p.vhost, p.name, p.pattern, p.apply_to, p.priority, json.dumps(p.definition))
        for kind, table in zip(
            _POLICY_KINDS, (state.policies, state.operator_policies), strict=True
        )
        for p in table.values()
    ]
    return [
        ("DELETE FROM policies", [()]),
        ("DELETE FROM global_parameters", [()]),
        ("DELETE FROM parameters", [()]),
        (
            "INSERT INTO parameters (component, vhost, name, value) VALUES (?, ?, ?, ?)",
            [
                (component, vhost, name, json.dumps(value))
                for (component, vhost, name), value in state.parameters.items()
            ]
            + [
                (USER_LIMITS_COMPONENT, "", user, json.dumps(limits))
                for user, limits in state.user_limits.items()
                if limits
            ]
            + [
                (MAX_QUEUES_COMPONENT, v.name, "", json.dumps(v.max_queues))
                for v in state.vhosts.values()
                if v.max_queues is not None
            ],
        ),
        (
            "INSERT INTO policies (kind, vhost, name, pattern, apply_to, priority, definition)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            policy_rows,
        ),
        (
            "INSERT INTO global_parameters (name, value) VALUES (?, ?)",
            [(name, json.dumps(value)) for name, value in state.global_parameters.items()],
        ),
        ("DELETE FROM permissions", [()]),
        ("DELETE FROM users", [()]),
        ("DELETE FROM vhosts", [()]),
        (
            "INSERT INTO vhosts (name, description, tags, max_connections) VALUES (?, ?, ?, ?)",
            [
                (v.name, v.description, ",".join(v.tags), v.max_connections)
                for v in state.vhosts.values()
            ],
        ),
        (
            "INSERT INTO users (name, password_hash, hashing_algorithm, tags) VALUES (?, ?, ?, ?)",
            [
                (u.name, u.password_hash, u.hashing_algorithm, ",".join(u.tags))
                for u in state.users.values()
            ],
        ),
        (
            "INSERT INTO permissions (user, vhost, configure, write, read) VALUES (?, ?, ?, ?, ?)",
            [
                (user, vhost, p.configure, p.write, p.read)
                for (user, vhost), p in state.permissions.items()
            ],
        ),
    ]
