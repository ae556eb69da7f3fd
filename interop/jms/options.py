"""Connection options: keyword arguments (snake_case, seconds) and ActiveMQ URL keys (ms).

``amqp://guest:guest@host:5672/%2F?jms.optimizeAcknowledge=true&jms.prefetchPolicy.all=10``
keeps ActiveMQ's ``jms.*`` names and milliseconds; the other query keys go to pika
(``heartbeat``, ``connection_attempts``, …). An unknown ``jms.*`` key is an error, as in
ActiveMQ ("jms options that couldn't be set"), and so is an unknown pika key.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import unquote_plus, urlsplit, urlunsplit

import pika

from interop.jms.errors import ConfigurationError
from interop.jms.policies import (
    DeadLetterStrategy,
    IndividualDeadLetterStrategy,
    PrefetchPolicy,
    RedeliveryPolicy,
    SharedDeadLetterStrategy,
)

__all__ = ["ConnectionOptions", "parse_url", "pika_parameters", "split_jms_query"]

DEFAULT_URL: Final = "amqp://guest:guest@localhost:5672/%2F"
_SCHEMES: Final = ("amqp", "amqps")


def _bool(key: str, raw: str) -> bool:
    lowered = raw.lower()
    if lowered not in ("true", "false"):
        raise ConfigurationError(f"{key}={raw!r}: expected true or false")
    return lowered == "true"


def _int(key: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise ConfigurationError(f"{key}={raw!r}: expected an integer") from None


def _float(key: str, raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise ConfigurationError(f"{key}={raw!r}: expected a number") from None


def _ms(key: str, raw: str) -> float:
    value = _float(key, raw)
    if value < 0:
        raise ConfigurationError(f"{key}={raw!r}: milliseconds must be >= 0")
    return value / 1000


def _ms_or_unlimited(key: str, raw: str) -> float | None:
    value = _float(key, raw)
    return None if value < 0 else value / 1000


def _str(_key: str, raw: str) -> str:
    return raw


def _strategy(key: str, raw: str) -> DeadLetterStrategy | None:
    choice = raw.lower()
    if choice == "shared":
        return SharedDeadLetterStrategy()
    if choice == "individual":
        return IndividualDeadLetterStrategy()
    if choice == "none":
        return None
    raise ConfigurationError(f"{key}={raw!r}: expected shared, individual or none")


_Parser = Callable[[str, str], Any]
_FACTORY_KEYS: Final[Mapping[str, tuple[str, _Parser]]] = {
    "clientID": ("client_id", _str),
    "optimizeAcknowledge": ("optimize_acknowledge", _bool),
    "optimizeAcknowledgeTimeOut": ("optimize_acknowledge_timeout", _ms),
    "optimizedAckScheduledAckInterval": ("optimized_ack_scheduled_ack_interval", _ms),
    "topicExchange": ("topic_exchange", _str),
    "deadLetterStrategy": ("dead_letter_strategy", _strategy),
    "useAsyncSend": ("use_async_send", _bool),
    "producerWindowSize": ("producer_window_size", _int),
    "sendAcksAsync": ("send_acks_async", _bool),
}
_PREFETCH_KEYS: Final[Mapping[str, str]] = {
    "queuePrefetch": "queue_prefetch",
    "queueBrowserPrefetch": "queue_browser_prefetch",
    "topicPrefetch": "topic_prefetch",
    "durableTopicPrefetch": "durable_topic_prefetch",
    "optimizeDurableTopicPrefetch": "optimize_durable_topic_prefetch",
}
_REDELIVERY_KEYS: Final[Mapping[str, tuple[str, _Parser]]] = {
    "maximumRedeliveries": ("maximum_redeliveries", _int),
    "initialRedeliveryDelay": ("initial_redelivery_delay", _ms),
    "redeliveryDelay": ("redelivery_delay", _ms),
    "useExponentialBackOff": ("use_exponential_backoff", _bool),
    "backOffMultiplier": ("backoff_multiplier", _float),
    "maximumRedeliveryDelay": ("maximum_redelivery_delay", _ms_or_unlimited),
    "useCollisionAvoidance": ("use_collision_avoidance", _bool),
    "collisionAvoidancePercent": ("collision_avoidance_percent", _float),
    "preDispatchCheck": ("pre_dispatch_check", _bool),
}
_ALL_KEYS: Final = (
    [f"jms.{key}" for key in _FACTORY_KEYS]
    + ["jms.nonBlockingRedelivery", "jms.prefetchPolicy.all"]
    + [f"jms.prefetchPolicy.{key}" for key in _PREFETCH_KEYS]
    + [f"jms.redeliveryPolicy.{key}" for key in _REDELIVERY_KEYS]
)


@dataclass(slots=True)
class ConnectionOptions:
    """Everything a `ConnectionFactory` hands to its connections (seconds, snake_case).

    Attributes:
        client_id: JMS client id (required for durable subscribers).
        prefetch_policy: Prefetch per consumer kind.
        redelivery_policy: Client-side redelivery and poison rule.
        optimize_acknowledge: AUTO_ACKNOWLEDGE acks cumulatively at 65 % of the prefetch.
        optimize_acknowledge_timeout: With optimize_acknowledge, the first message consumed
            this long after the last ack releases the batch (checked at consume time only).
        optimized_ack_scheduled_ack_interval: Periodic flush of optimized acks (0 = off).
        dead_letter_strategy: Names the dead-letter queue of each destination; None leaves
            queues without dead-letter arguments (a broker policy decides).
        topic_exchange: The AMQP topic exchange JMS topics live on.
        use_async_send: Persistent sends outside a transaction do not wait for the
            publisher confirm (ActiveMQ's useAsyncSend).
        producer_window_size: Bytes a producer may have sent asynchronously without a
            confirm before ``send`` blocks (0 = no limit; ActiveMQ's producerWindowSize).
        send_acks_async: True: an acknowledgement call returns once the ack is written to
            the socket; False: once the broker has processed it (a round trip per call;
            ActiveMQ's sendAcksAsync).
    """

    client_id: str | None = None
    prefetch_policy: PrefetchPolicy = field(default_factory=PrefetchPolicy)
    redelivery_policy: RedeliveryPolicy = field(default_factory=RedeliveryPolicy)
    optimize_acknowledge: bool = False
    optimize_acknowledge_timeout: float = 0.3
    optimized_ack_scheduled_ack_interval: float = 0.0
    dead_letter_strategy: DeadLetterStrategy | None = field(
        default_factory=SharedDeadLetterStrategy
    )
    topic_exchange: str = "amq.topic"
    use_async_send: bool = False
    producer_window_size: int = 0
    send_acks_async: bool = True

    def __post_init__(self) -> None:
        if self.producer_window_size < 0:
            raise ConfigurationError("producer_window_size must be >= 0 bytes")
        if self.optimize_acknowledge_timeout < 0:
            raise ConfigurationError("optimize_acknowledge_timeout must be >= 0 seconds")
        if self.optimized_ack_scheduled_ack_interval < 0:
            raise ConfigurationError("optimized_ack_scheduled_ack_interval must be >= 0 seconds")
        if self.client_id is not None and not self.client_id:
            raise ConfigurationError("client_id must not be empty")


def _check_scheme(url: str) -> None:
    scheme = url.split(":", 1)[0].lower()
    if scheme in _SCHEMES:
        return
    hint = ""
    if scheme in ("tcp", "nio", "ssl", "auto", "vm"):
        hint = " (ActiveMQ transport URLs do not apply: use amqp://host:5672/vhost)"
    elif scheme == "failover":
        hint = " (failover URLs go to ConnectionFactory, not here)"
    raise ConfigurationError(f"unsupported URL scheme {scheme!r}{hint}")


def _unknown_keys_error(unknown: list[str]) -> ConfigurationError:
    hints = []
    for key in unknown:
        close = difflib.get_close_matches(key, _ALL_KEYS, n=1)
        hints.append(f"{key} (did you mean {close[0]}?)" if close else key)
    return ConfigurationError(
        f"there are {len(unknown)} jms options that couldn't be set on the ConnectionFactory; "
        f"check the options are spelled correctly. Unknown parameters: {', '.join(hints)}"
    )


def parse_url(url: str) -> tuple[str, dict[str, Any]]:
    """Split an ActiveMQ-style URL into the pika URL and keyword options.

    Args:
        url: ``amqp[s]://…?jms.key=value&pika_key=value``.

    Returns:
        ``(pika_url, options)``: the URL without ``jms.*`` keys, and the keyword arguments
        (snake_case, seconds) the ``jms.*`` keys stand for; ``prefetch_policy`` and
        ``redelivery_policy`` are complete policy objects when any of their keys is given.

    Raises:
        ConfigurationError: an unknown or repeated ``jms.*`` key or a bad value.
    """
    _check_scheme(url)
    parts = urlsplit(url)
    query, options = split_jms_query(parts.query)
    pika_url = urlunsplit(parts._replace(query=query))
    return pika_url, options


def split_jms_query(query: str) -> tuple[str, dict[str, Any]]:
    """Take the ``jms.*`` keys out of a URL query.

    Returns:
        ``(rest, options)``: the query without ``jms.*`` keys, and the keyword arguments
        they stand for (see `parse_url`).

    Raises:
        ConfigurationError: an unknown or repeated ``jms.*`` key or a bad value.
    """
    kept: list[str] = []
    seen: dict[str, str] = {}
    for segment in query.split("&") if query else []:
        raw_key, _sep, raw_value = segment.partition("=")
        key = unquote_plus(raw_key)
        if not key.startswith("jms."):
            kept.append(segment)
            continue
        if key in seen:
            raise ConfigurationError(f"{key} is given twice in the URL")
        seen[key] = unquote_plus(raw_value)
    options: dict[str, Any] = {}
    prefetch: dict[str, int] = {}
    prefetch_all: int | None = None
    redelivery: dict[str, Any] = {}
    unknown: list[str] = []
    for key, raw in seen.items():
        name = key[len("jms.") :]
        if name in _FACTORY_KEYS:
            attribute, parse = _FACTORY_KEYS[name]
            options[attribute] = parse(key, raw)
        elif name == "nonBlockingRedelivery":
            redelivery["non_blocking_redelivery"] = _bool(key, raw)
        elif name == "prefetchPolicy.all":
            prefetch_all = _int(key, raw)
        elif name.startswith("prefetchPolicy.") and name[15:] in _PREFETCH_KEYS:
            prefetch[_PREFETCH_KEYS[name[15:]]] = _int(key, raw)
        elif name.startswith("redeliveryPolicy.") and name[17:] in _REDELIVERY_KEYS:
            attribute, parse = _REDELIVERY_KEYS[name[17:]]
            redelivery[attribute] = parse(key, raw)
        else:
            unknown.append(key)
    if unknown:
        raise _unknown_keys_error(unknown)
    if prefetch_all is not None or prefetch:
        policy = PrefetchPolicy()
        if prefetch_all is not None:
            policy.set_all(prefetch_all)
        for attribute, value in prefetch.items():
            setattr(policy, attribute, value)
        options["prefetch_policy"] = PrefetchPolicy(
            **{name: getattr(policy, name) for name in policy.__slots__}
        )
    if redelivery:
        options["redelivery_policy"] = RedeliveryPolicy(**redelivery)
    return "&".join(kept), options


def pika_parameters(url: str) -> Any:
    """``pika.URLParameters`` for a URL without ``jms.*`` keys.

    Raises:
        ConfigurationError: pika refuses the URL (e.g. an unknown query key).
    """
    _check_scheme(url)
    try:
        return pika.URLParameters(url)
    except ValueError as exc:
        raise ConfigurationError(f"bad connection URL: {exc}") from None
