"""Options of the ``amqp`` sink, parsed and checked on the driver before any task runs.

Spark hands options to Python data sources in a ``CaseInsensitiveDict`` that stores the keys
lower-cased, so ``maxInFlight`` arrives as ``maxinflight``: every lookup here is by the
lower-cased name, and an unknown name is an error (with a suggestion) rather than silently
ignored.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import pika

from interop.spark.errors import ConfigError, redact_url, scrub

__all__ = ["MessageIdMode", "OptionParser", "SinkOptions", "parse_options"]

MessageIdMode = Literal["column", "deterministic", "hash", "uuid"]
MESSAGE_ID_MODES: tuple[MessageIdMode, ...] = ("column", "deterministic", "hash", "uuid")

# Canonical spelling of every option, keyed by its lower-cased form.
OPTION_NAMES = {
    name.lower(): name
    for name in (
        "url",
        "exchange",
        "routingKey",
        "mandatory",
        "deliveryMode",
        "maxInFlight",
        "confirmTimeoutMs",
        "connectTimeoutMs",
        "deliveryTimeoutMs",
        "connectionIdleTimeoutMs",
        "messageIdMode",
        "checkExchange",
        "ignoreUnknownColumns",
        "connectionName",
    )
}
# Options Spark itself adds to a streaming sink's options; accepted and ignored.
STREAMING_PASSTHROUGH = frozenset({"checkpointlocation", "path", "queryname"})


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """The parsed options of one write (picklable: it travels to every task).

    Attributes:
        url: ``amqp[s]://user:pass@host:port/vhost?…`` URL of the broker.
        exchange: Overrides the ``exchange`` column when set.
        routing_key: Overrides the ``routing_key`` column when set.
        mandatory: Publish with ``mandatory``; a ``basic.return`` fails the task.
        delivery_mode: 2 (persistent) or 1; the ``delivery_mode`` column wins per row.
        max_in_flight: Unconfirmed messages allowed per task.
        confirm_timeout_ms: No confirm progress for this long drops the connection (the task
            reconnects and republishes); also pika's ``blocked_connection_timeout``.
        connect_timeout_ms: Bound on TCP connect, AMQP handshake and ``confirm.select``.
        delivery_timeout_ms: How long a task keeps reconnecting after its connection was lost
            (from the loss until a confirm arrives on a new connection); 0 fails at once.
        connection_idle_timeout_ms: How long a connection stays open in the Python worker
            for the next task after it fell idle; 0 closes it at the end of each task.
        message_id_mode: ``column``, ``deterministic``, ``hash`` or ``uuid``.
        check_exchange: Passive-declare ``exchange`` in ``writer()`` to fail fast on a 404.
        ignore_unknown_columns: Skip unknown columns instead of rejecting them.
        connection_name: ``connection_name`` client property prefix (default
            ``spark-{app name}``); tasks add ``:{stage}.{partition}.{attempt}``.
    """

    url: str
    exchange: str | None = None
    routing_key: str | None = None
    mandatory: bool = True
    delivery_mode: int = 2
    max_in_flight: int = 1000
    confirm_timeout_ms: int = 30_000
    connect_timeout_ms: int = 5_000
    delivery_timeout_ms: int = 120_000
    connection_idle_timeout_ms: int = 60_000
    message_id_mode: MessageIdMode = "column"
    check_exchange: bool = True
    ignore_unknown_columns: bool = False
    connection_name: str | None = None

    @property
    def redacted_url(self) -> str:
        """The URL with its password replaced by ``***`` (for messages and logs)."""
        return redact_url(self.url)


def parse_options(options: Mapping[str, str], *, streaming: bool = False) -> SinkOptions:
    """Parse the options given to ``df.write.format("amqp").option(...)``.

    Args:
        options: Option names (any case) to string values, as Spark passes them.
        streaming: True for ``writeStream``; Spark's own streaming options
            (``checkpointLocation``…) are then accepted and ignored.

    Returns:
        The validated options.

    Raises:
        ConfigError: An option is unknown, missing or has a bad value. Every problem is
            listed in one message.
    """
    lowered: dict[str, str] = {}
    problems: list[str] = []
    for key, value in options.items():
        low = key.lower()
        if low in lowered:
            problems.append(f"option {key!r} given twice (names ignore case)")
        lowered[low] = value
    for key in lowered:
        if key in OPTION_NAMES or (streaming and key in STREAMING_PASSTHROUGH):
            continue
        problems.append(_unknown(key))
    parser = OptionParser(lowered, problems)
    url = parser.url()
    parsed = SinkOptions(
        url=url,
        exchange=lowered.get("exchange"),
        routing_key=lowered.get("routingkey"),
        mandatory=parser.boolean("mandatory", True),
        delivery_mode=parser.integer("deliveryMode", 2, 1, 2),
        max_in_flight=parser.integer("maxInFlight", 1000, 1, 1_000_000),
        confirm_timeout_ms=parser.integer("confirmTimeoutMs", 30_000, 1, 86_400_000),
        connect_timeout_ms=parser.integer("connectTimeoutMs", 5_000, 1, 86_400_000),
        delivery_timeout_ms=parser.integer("deliveryTimeoutMs", 120_000, 0, 86_400_000),
        connection_idle_timeout_ms=parser.integer("connectionIdleTimeoutMs", 60_000, 0, 86_400_000),
        message_id_mode=parser.message_id_mode(),
        check_exchange=parser.boolean("checkExchange", True),
        ignore_unknown_columns=parser.boolean("ignoreUnknownColumns", False),
        connection_name=lowered.get("connectionname") or None,
    )
    if problems:
        raise ConfigError("amqp sink: " + "; ".join(problems))
    return parsed


def _unknown(key: str) -> str:
    close = difflib.get_close_matches(key, list(OPTION_NAMES), n=1, cutoff=0.6)
    hint = f" (did you mean {OPTION_NAMES[close[0]]!r}?)" if close else ""
    known = ", ".join(sorted(OPTION_NAMES.values(), key=str.lower))
    return f"unknown option {key!r}{hint}; known options: {known}"


class OptionParser:
    """Reads typed values from the lower-cased options, collecting problems (shared by the
    ``amqp`` sink and the ``amqp-stream`` source)."""

    def __init__(self, options: dict[str, str], problems: list[str]) -> None:
        self._options = options
        self._problems = problems

    def url(self) -> str:
        url = self._options.get("url")
        if not url:
            self._problems.append('option "url" is required (amqp://user:pass@host:5672/vhost)')
            return ""
        if not url.lower().startswith(("amqp://", "amqps://")):
            self._problems.append(f"option url {redact_url(url)!r} must start with amqp://")
            return url
        try:
            pika.URLParameters(url)
        except Exception as exc:  # pika raises ValueError, TypeError, KeyError…
            self._problems.append(f"option url {redact_url(url)!r}: {scrub(str(exc), url)}")
        return url

    def boolean(self, name: str, default: bool) -> bool:
        raw = self._options.get(name.lower())
        if raw is None:
            return default
        value = raw.strip().lower()
        if value in ("true", "false"):
            return value == "true"
        self._problems.append(f"option {name} must be true or false, not {raw!r}")
        return default

    def integer(self, name: str, default: int, low: int, high: int) -> int:
        raw = self._options.get(name.lower())
        if raw is None:
            return default
        try:
            value = int(raw.strip())
        except ValueError:
            value = low - 1
        if low <= value <= high:
            return value
        self._problems.append(f"option {name} must be an integer in {low}..{high}, not {raw!r}")
        return default

    def message_id_mode(self) -> MessageIdMode:
        raw = self._options.get("messageidmode")
        if raw is None:
            return "column"
        for mode in MESSAGE_ID_MODES:
            if raw.strip().lower() == mode:
                return mode
        self._problems.append(
            f"option messageIdMode must be one of {', '.join(MESSAGE_ID_MODES)}, not {raw!r}"
        )
        return "column"
