"""ActiveMQ's failover URL and its reconnect schedule (pure: no I/O, no clock).

``failover:(amqp://a:5672,amqp://b:5672)?randomize=false&maxReconnectAttempts=10`` lists the
brokers a connection may use and, in the query, ActiveMQ's failover transport options (times
in milliseconds) and any ``jms.*`` connection keys (read by ``ConnectionFactory.from_url``).
`parse_failover` reads it into a `FailoverPolicy`; `FailoverPolicy.order` gives the order
in which one reconnect pass tries the brokers and `FailoverPolicy.delays` the pauses between
passes. The state machine that uses them is `interop.jms.reconnect`.
"""

from __future__ import annotations

import difflib
import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import unquote_plus

from interop.jms.errors import ConfigurationError

__all__ = ["FailoverPolicy", "is_failover", "parse_failover"]

UNLIMITED: Final = -1


@dataclass(frozen=True, slots=True)
class FailoverPolicy:
    """ActiveMQ's failover transport options (seconds here, milliseconds in the URL).

    Attributes:
        uris: The brokers (``amqp[s]://`` URLs), in the order given.
        randomize: Shuffle the brokers before each reconnect pass (ActiveMQ default true).
        initial_reconnect_delay: Pause after the first failed pass (10 ms).
        max_reconnect_delay: Cap of the pause (30 s).
        use_exponential_backoff: Multiply the pause by ``reconnect_delay_exponent`` after
            each failed pass (true).
        reconnect_delay_exponent: The multiplier (2.0).
        max_reconnect_attempts: Passes after a connection was lost before giving up; -1
            forever (the default), 0 one pass only.
        startup_max_reconnect_attempts: The same for the first connection; -1 forever.
        timeout: Seconds a send waits for a reconnection before failing; None waits for as
            long as reconnecting goes on (ActiveMQ's -1).
        priority_backup: The first broker is the primary: while connected to another one,
            keep checking it and move back as soon as it is reachable (ignores randomize).
    """

    uris: tuple[str, ...]
    randomize: bool = True
    initial_reconnect_delay: float = 0.01
    max_reconnect_delay: float = 30.0
    use_exponential_backoff: bool = True
    reconnect_delay_exponent: float = 2.0
    max_reconnect_attempts: int = UNLIMITED
    startup_max_reconnect_attempts: int = UNLIMITED
    timeout: float | None = None
    priority_backup: bool = False

    def __post_init__(self) -> None:
        if not self.uris:
            raise ConfigurationError("a failover URL needs at least one broker URL")
        if self.initial_reconnect_delay < 0 or self.max_reconnect_delay < 0:
            raise ConfigurationError("reconnect delays must be >= 0 ms")
        if self.reconnect_delay_exponent < 1:
            raise ConfigurationError("reconnectDelayExponent must be >= 1")
        for name in ("max_reconnect_attempts", "startup_max_reconnect_attempts"):
            if getattr(self, name) < UNLIMITED:
                raise ConfigurationError(f"{name} must be -1 (forever) or >= 0")

    def passes(self, startup: bool) -> int | None:
        """How many passes over the brokers before giving up (None: no limit).

        As in ActiveMQ, 0 still makes one attempt; the startup limit applies until the
        connection has been established once.
        """
        limit = self.startup_max_reconnect_attempts if startup else self.max_reconnect_attempts
        return None if limit == UNLIMITED else max(1, limit)

    def delays(self) -> Iterator[float]:
        """Pauses after the 1st, 2nd, … failed pass."""
        delay = self.initial_reconnect_delay
        while True:
            yield min(delay, self.max_reconnect_delay)
            if self.use_exponential_backoff:
                delay = min(delay * self.reconnect_delay_exponent, self.max_reconnect_delay)

    def order(
        self, failed: int | None, shuffle: Callable[[list[int]], None] = random.shuffle
    ) -> list[int]:
        """Indexes of ``uris`` in the order one pass tries them.

        ``failed`` (the broker just lost, if any) goes last, so a pass tries the others
        first, except with ``priority_backup``, where the primary always comes first.
        """
        indexes = list(range(len(self.uris)))
        if self.priority_backup:
            return indexes
        if self.randomize:
            shuffle(indexes)
        if failed is not None and len(indexes) > 1:
            indexes.remove(failed)
            indexes.append(failed)
        return indexes


def _bool(key: str, raw: str) -> bool:
    lowered = raw.lower()
    if lowered not in ("true", "false"):
        raise ConfigurationError(f"{key}={raw!r}: expected true or false")
    return lowered == "true"


def _number(key: str, raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise ConfigurationError(f"{key}={raw!r}: expected a number") from None


def _ms(key: str, raw: str) -> float:
    value = _number(key, raw)
    if value < 0:
        raise ConfigurationError(f"{key}={raw!r}: milliseconds must be >= 0")
    return value / 1000


def _attempts(key: str, raw: str) -> int:
    value = _number(key, raw)
    if value != int(value):
        raise ConfigurationError(f"{key}={raw!r}: expected an integer")
    return int(value)


def _timeout(key: str, raw: str) -> float | None:
    value = _number(key, raw)
    return None if value < 0 else value / 1000


_Parser = Callable[[str, str], Any]
_KEYS: Final[Mapping[str, tuple[str, _Parser]]] = {
    "randomize": ("randomize", _bool),
    "initialReconnectDelay": ("initial_reconnect_delay", _ms),
    "maxReconnectDelay": ("max_reconnect_delay", _ms),
    "useExponentialBackOff": ("use_exponential_backoff", _bool),
    "reconnectDelayExponent": ("reconnect_delay_exponent", _number),
    "backOffMultiplier": ("reconnect_delay_exponent", _number),
    "maxReconnectAttempts": ("max_reconnect_attempts", _attempts),
    "startupMaxReconnectAttempts": ("startup_max_reconnect_attempts", _attempts),
    "timeout": ("timeout", _timeout),
    "priorityBackup": ("priority_backup", _bool),
}
_UNSUPPORTED: Final = (
    "backup",
    "backupPoolSize",
    "trackMessages",
    "trackTransactionProducers",
    "maxCacheSize",
    "updateURIsSupported",
    "updateURIsURL",
    "rebalanceUpdateURIs",
    "priorityURIs",
    "nested",
    "reconnectSupported",
    "warnAfterReconnectAttempts",
)


def is_failover(url: str) -> bool:
    """True for a ``failover:`` URL."""
    return url.lower().startswith("failover:")


def _split_uris(url: str) -> tuple[list[str], str]:
    body = url[len("failover:") :]
    if body.startswith("//"):
        body = body[2:]
    if not body.startswith("("):
        return [part.strip() for part in body.split(",") if part.strip()], ""
    close = body.find(")")
    if close < 0:
        raise ConfigurationError(f"unbalanced parentheses in failover URL {url!r}")
    rest = body[close + 1 :]
    if rest and not rest.startswith("?"):
        raise ConfigurationError(f"unexpected {rest!r} after the broker list in {url!r}")
    uris = [part.strip() for part in body[1:close].split(",") if part.strip()]
    return uris, rest[1:]


def parse_failover(url: str) -> tuple[FailoverPolicy, str]:
    """Read ``failover:(uri,…)?options``.

    Returns:
        The policy, and the query keys left for the connection (``jms.*``), joined by ``&``.

    Raises:
        ConfigurationError: a malformed URL, a broker URL that is not ``amqp[s]://``, an
            unknown, unsupported or repeated option, or a bad value.
    """
    uris, query = _split_uris(url)
    for uri in uris:
        scheme = uri.split(":", 1)[0].lower()
        if scheme not in ("amqp", "amqps"):
            raise ConfigurationError(
                f"failover broker {uri!r}: use amqp://host:5672/vhost (ActiveMQ transports "
                "such as tcp:// do not apply)"
            )
    values: dict[str, Any] = {}
    kept: list[str] = []
    for segment in query.split("&") if query else []:
        raw_key, _sep, raw_value = segment.partition("=")
        key = unquote_plus(raw_key)
        if key.startswith("jms."):
            kept.append(segment)
            continue
        if key in _KEYS:
            attribute, parse = _KEYS[key]
            if attribute in values:
                raise ConfigurationError(f"failover option {key} is given twice")
            values[attribute] = parse(key, unquote_plus(raw_value))
            continue
        if key.split(".", 1)[0] in _UNSUPPORTED:
            raise ConfigurationError(f"failover option {key} is not supported by interop.jms")
        close = difflib.get_close_matches(key, list(_KEYS), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ConfigurationError(f"unknown failover option {key}{hint}")
    return FailoverPolicy(uris=tuple(uris), **values), "&".join(kept)
