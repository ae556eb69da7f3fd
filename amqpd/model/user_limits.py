"""Per-user limits, as RabbitMQ 3.10 has them (``rabbitmqctl set_user_limits``,
``/api/user-limits``, the ``limits`` of a user in a definitions file): ``max-connections``
(connections the user may have open at once) and ``max-channels`` (channels over all of the
user's connections). A negative value means no limit (RabbitMQ keeps it and shows it), 0
refuses every connection / channel.

Pure: `check_limits` validates a value with RabbitMQ's texts; `set_limit` / `clear_limit`
change a copy of the access state and hand it to ``Broker.replace_access`` (the caller
persists it); `connection_refused` / `channel_refused` are the checks the connection engine
makes at connection.open and channel.open, with RabbitMQ's 530 NOT_ALLOWED texts::

    connection refused for user 'alice': user connection limit (1) is reached
    number of channels opened for user 'alice' has reached the maximum allowed user limit of (2)

The limits live in `AccessState.user_limits` (persistence/access.py stores them).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from amqpd.model.broker import Broker

__all__ = [
    "LIMIT_KEYS",
    "NoSuchUser",
    "UserLimitError",
    "channel_refused",
    "check_limits",
    "clear_limit",
    "connection_refused",
    "has_channel_limit",
    "limits_json",
    "set_limit",
]

MAX_CONNECTIONS: Final = "max-connections"
MAX_CHANNELS: Final = "max-channels"
LIMIT_KEYS: Final = (MAX_CONNECTIONS, MAX_CHANNELS)


class UserLimitError(ValueError):
    """A limit RabbitMQ would refuse; ``str()`` is RabbitMQ's text (the API's 400 reason)."""


class NoSuchUser(LookupError):
    """The user does not exist (RabbitMQ's API: 400 ``["no_such_user", name]``)."""


def _erlang(value: Any) -> str:
    if isinstance(value, str):
        return f'<<"{value}">>'
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)


def check_limits(value: Any) -> dict[str, int]:
    """A user's limits object, checked (RabbitMQ's ``rabbit_auth_backend_internal``
    validation): only the known keys, integers.

    Raises:
        UserLimitError: RabbitMQ's text.
    """
    if not isinstance(value, Mapping):
        raise UserLimitError(f"user limits should be a JSON object, actually was {value!r}")
    unknown = [(key, item) for key, item in value.items() if key not in LIMIT_KEYS]
    if unknown:
        terms = ",".join(f"{{{_erlang(key)},{_erlang(item)}}}" for key, item in unknown)
        raise UserLimitError(f"Unrecognised terms [{terms}] in user-limits")
    checked: dict[str, int] = {}
    for key, item in value.items():
        if isinstance(item, bool) or not isinstance(item, int):
            raise UserLimitError(f"{key} should be a number, actually was {_erlang(item)}")
        checked[key] = item
    return checked


def limits_json(limits: Mapping[str, Mapping[str, int]], user: str | None = None) -> list[Any]:
    """``/api/user-limits`` items: ``{"user", "value"}`` of each user with limits."""
    return [
        {"user": name, "value": dict(sorted(value.items()))}
        for name, value in sorted(limits.items())
        if value and (user is None or name == user)
    ]


def set_limit(broker: Broker, user: str, name: str, value: Any) -> None:
    """Set one limit of ``user`` (PUT /api/user-limits/{user}/{name}).

    Raises:
        NoSuchUser: no such user.
        UserLimitError: RabbitMQ's validation text.
    """
    state = copy.deepcopy(broker.access.state)
    if user not in state.users:
        raise NoSuchUser(user)
    checked = check_limits({name: value})
    state.user_limits.setdefault(user, {}).update(checked)
    broker.replace_access(state)


def clear_limit(broker: Broker, user: str, name: str) -> None:
    """Remove one limit of ``user`` (DELETE; nothing to remove is fine, as in RabbitMQ).

    Raises:
        NoSuchUser: no such user.
    """
    state = copy.deepcopy(broker.access.state)
    if user not in state.users:
        raise NoSuchUser(user)
    limits = state.user_limits.get(user, {})
    limits.pop(name, None)
    if not limits:
        state.user_limits.pop(user, None)
    broker.replace_access(state)


def _limit(broker: Broker, user: str, key: str) -> int | None:
    limits = broker.access.state.user_limits.get(user)
    if not limits:
        return None
    limit = limits.get(key)
    return limit if limit is not None and limit >= 0 else None


def connection_refused(broker: Broker, user: str, open_users: Iterable[str]) -> str | None:
    """Why one more connection of ``user`` is refused (``open_users``: the user of each
    open connection), or None."""
    limit = _limit(broker, user, MAX_CONNECTIONS)
    if limit is None:
        return None
    if sum(1 for name in open_users if name == user) >= limit:
        return f"connection refused for user '{user}': user connection limit ({limit}) is reached"
    return None


def channel_refused(broker: Broker, user: str, open_channels: int) -> str | None:
    """Why one more channel of ``user`` (who has ``open_channels`` over all connections)
    is refused, or None."""
    limit = _limit(broker, user, MAX_CHANNELS)
    if limit is None or open_channels < limit:
        return None
    return (
        f"number of channels opened for user '{user}' has reached the maximum allowed "
        f"user limit of ({limit})"
    )


def has_channel_limit(broker: Broker, user: str) -> bool:
    """Whether ``user`` has a max-channels limit (so channels must be counted)."""
    return _limit(broker, user, MAX_CHANNELS) is not None
