"""Queues, topics and temporary queues, with ActiveMQ's destination options.

``Queue("orders?consumer.prefetchSize=10")`` keeps the name ``orders`` and the option; the
options are checked when a consumer is created (ActiveMQ fails consumer creation on an
unknown ``consumer.`` key, so do we). Topic names use ActiveMQ's wildcards (``.`` separates
words, ``*`` one word, ``>`` the rest), translated to AMQP topic-exchange patterns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final
from urllib.parse import parse_qsl

from interop.jms.errors import ConfigurationError, InvalidDestinationException

__all__ = [
    "ConsumerOptions",
    "Destination",
    "Queue",
    "TemporaryQueue",
    "Topic",
    "binding_key",
    "destination_from_address",
    "is_wildcard",
]

_CONSUMER_PREFIX: Final = "consumer."


def _split(spec: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    name, sep, query = spec.partition("?")
    if not name:
        raise InvalidDestinationException(f"destination name is empty in {spec!r}")
    if not sep:
        return name, ()
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True)
    except ValueError as exc:
        raise ConfigurationError(f"bad destination options in {spec!r}: {exc}") from None
    return name, tuple(pairs)


@dataclass(frozen=True, slots=True, init=False)
class Destination:
    """A named destination plus the options given after ``?`` in its name.

    Attributes:
        name: The destination name without options.
        options: ``(key, value)`` pairs from the query part, e.g. ``consumer.prefetchSize``.
    """

    name: str
    options: tuple[tuple[str, str], ...] = field(compare=False)

    kind: ClassVar[str] = "destination"

    def __init__(self, spec: str) -> None:
        name, options = _split(spec)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "options", options)

    @property
    def is_topic(self) -> bool:
        """True for topics."""
        return False

    def address(self) -> str:
        """The destination as a string that `destination_from_address` reads back."""
        return f"{self.kind}://{self.name}"

    def __str__(self) -> str:
        return self.address()


class Queue(Destination):
    """A point-to-point queue (AMQP: a durable queue, published via the default exchange)."""

    __slots__ = ()
    kind: ClassVar[str] = "queue"

    def address(self) -> str:
        """Plain queue name, as AMQP request/reply peers expect in ``reply_to``."""
        return self.name


class TemporaryQueue(Queue):
    """A server-named queue that lives as long as the connection that created it."""

    __slots__ = ()
    kind: ClassVar[str] = "temp-queue"


class Topic(Destination):
    """A publish/subscribe topic (AMQP: a routing key on the topic exchange)."""

    __slots__ = ()
    kind: ClassVar[str] = "topic"

    @property
    def is_topic(self) -> bool:
        """True for topics."""
        return True


def destination_from_address(address: str) -> Destination:
    """Read ``reply_to`` back: ``topic://x`` is a topic, a server-named ``amq.*`` queue is
    temporary (never declared by a sender), anything else names a queue."""
    if address.startswith("amq."):
        return TemporaryQueue(address)
    if address.startswith("topic://"):
        return Topic(address[len("topic://") :])
    if address.startswith("temp-queue://"):
        return TemporaryQueue(address[len("temp-queue://") :])
    if address.startswith("queue://"):
        return Queue(address[len("queue://") :])
    return Queue(address)


def is_wildcard(topic_name: str) -> bool:
    """Whether an ActiveMQ topic name contains a wildcard word (``*`` or ``>``)."""
    return any(word in ("*", ">") for word in topic_name.split("."))


def binding_key(topic_name: str) -> str:
    """The AMQP topic-exchange binding key for an ActiveMQ topic pattern (``>`` -> ``#``).

    Raises:
        InvalidDestinationException: the name uses ``#`` as a word (AMQP's wildcard, which
            ActiveMQ does not have; write ``>``).
    """
    words = topic_name.split(".")
    if "#" in words:
        raise InvalidDestinationException(
            f"topic {topic_name!r}: '#' is not an ActiveMQ wildcard, use '>'"
        )
    return ".".join("#" if word == ">" else word for word in words)


def _bool(key: str, value: str) -> bool:
    lowered = value.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ConfigurationError(f"consumer option {key}={value!r}: expected true or false")


def _int(key: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ConfigurationError(f"consumer option {key}={value!r}: expected an integer") from None


def _str(_key: str, value: str) -> str:
    return value


_PARSERS: Final[Mapping[str, tuple[str, Callable[[str, str], Any]]]] = {
    "prefetchSize": ("prefetch_size", _int),
    "dispatchAsync": ("dispatch_async", _bool),
    "exclusive": ("exclusive", _bool),
    "maximumPendingMessageLimit": ("maximum_pending_message_limit", _int),
    "noLocal": ("no_local", _bool),
    "priority": ("priority", _int),
    "retroactive": ("retroactive", _bool),
    "selector": ("selector", _str),
}


@dataclass(frozen=True, slots=True)
class ConsumerOptions:
    """The ``consumer.*`` options of a destination.

    Attributes:
        prefetch_size: Overrides the prefetch policy for this consumer.
        dispatch_async: Accepted for compatibility; dispatch is always asynchronous here.
        exclusive: Only one consumer of the queue receives messages, the others stand by
            (AMQP queue argument ``x-single-active-consumer``).
        maximum_pending_message_limit: Accepted for compatibility (a broker-side limit in
            ActiveMQ); has no effect.
        no_local: Do not receive messages published on this connection (topics).
        priority: Consumer priority (AMQP consumer argument ``x-priority``).
        retroactive: Not supported; only ``false`` is accepted.
        selector: A message selector (topics only).
    """

    prefetch_size: int | None = None
    dispatch_async: bool = True
    exclusive: bool = False
    maximum_pending_message_limit: int = 0
    no_local: bool = False
    priority: int | None = None
    retroactive: bool = False
    selector: str | None = None

    @classmethod
    def parse(cls, destination: Destination) -> ConsumerOptions:
        """Read the ``consumer.*`` options of ``destination``.

        Raises:
            ConfigurationError: an unknown key, a key without the ``consumer.`` prefix, a bad
                value, or ``retroactive=true``.
        """
        values: dict[str, Any] = {}
        unknown = []
        for key, value in destination.options:
            short = key[len(_CONSUMER_PREFIX) :] if key.startswith(_CONSUMER_PREFIX) else None
            parser = _PARSERS.get(short) if short is not None else None
            if parser is None:
                unknown.append(key)
                continue
            attribute, convert = parser
            values[attribute] = convert(key, value)
        if unknown:
            known = ", ".join(_CONSUMER_PREFIX + key for key in _PARSERS)
            raise ConfigurationError(
                f"unknown destination option(s) {', '.join(unknown)} on {destination.name!r} "
                f"(known: {known})"
            )
        prefetch = values.get("prefetch_size")
        if prefetch is not None and prefetch < 0:
            raise ConfigurationError(f"consumer.prefetchSize must be >= 0, not {prefetch}")
        if values.get("retroactive"):
            raise ConfigurationError("consumer.retroactive=true is not supported over AMQP")
        return cls(**values)
