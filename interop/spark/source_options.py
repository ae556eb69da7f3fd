"""Options of the ``amqp-stream`` source (streams read into Spark), parsed on the driver.

Names ignore case (Spark lower-cases them); an unknown name is an error with a suggestion, as
for the ``amqp`` sink, whose URL and typed-value checks this module reuses.

Offsets are a stream's message offsets (the ``x-stream-offset`` header of each delivery). A
position is the *next* offset to read, so ``{"s1": 42}`` starts with offset 42, as in Spark's
Kafka source. In ``startingOffsets`` / ``endingOffsets`` JSON, ``-2`` means earliest and
``-1`` latest (Kafka's spelling).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass

from interop.spark.errors import ConfigError, redact_url
from interop.spark.options import OptionParser

__all__ = ["EARLIEST", "LATEST", "SourceOptions", "parse_source_options"]

EARLIEST = -2
LATEST = -1
PREFIX = "amqp-stream source: "

OPTION_NAMES = {
    name.lower(): name
    for name in (
        "url",
        "streams",
        "startingOffsets",
        "endingOffsets",
        "maxMessagesPerTrigger",
        "failOnDataLoss",
        "minPartitions",
        "prefetch",
        "connectTimeoutMs",
        "readTimeoutMs",
        "emptyProbeMs",
    )
}
# Options Spark adds itself (a streaming query's path / checkpoint); accepted and ignored.
PASSTHROUGH = frozenset({"path", "checkpointlocation", "queryname"})


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """The parsed options of one read (picklable: each task gets a copy).

    Attributes:
        url: ``amqp[s]://user:pass@host:port/vhost`` of the broker.
        streams: The streams to read, in the order given.
        starting: Per stream: an offset, ``EARLIEST`` or ``LATEST`` (new queries only).
        ending: Per stream, for batch reads only (default ``LATEST``).
        max_messages_per_trigger: Cap on the offsets one micro-batch covers (all streams
            together), or None.
        fail_on_data_loss: Fail when retention removed offsets the query still needed.
        min_partitions: Split a micro-batch into at least this many partitions (ranges of
            one stream), or None: one partition per stream.
        prefetch: Per-consumer prefetch (``basic.qos``, global=false) of each reading task.
        connect_timeout_ms: Bound on TCP connect, AMQP handshake and channel open.
        read_timeout_ms: A task fails when no delivery arrives for this long while offsets
            of its range are still missing (a stream deleted or a broker frozen).
        empty_probe_ms: How long the driver waits for a delivery from ``last`` before it
            takes a stream whose queue.declare-ok says 0 messages as empty.
    """

    url: str
    streams: tuple[str, ...]
    starting: Mapping[str, int]
    ending: Mapping[str, int]
    max_messages_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    prefetch: int = 2000
    connect_timeout_ms: int = 10_000
    read_timeout_ms: int = 60_000
    empty_probe_ms: int = 300

    @property
    def redacted_url(self) -> str:
        """The URL with its password replaced by ``***``."""
        return redact_url(self.url)


def parse_source_options(options: Mapping[str, str], *, batch: bool) -> SourceOptions:
    """Parse the options of ``spark.readStream`` (``batch=False``) or ``spark.read``.

    Raises:
        ConfigError: Every problem found, in one line.
    """
    lowered: dict[str, str] = {}
    problems: list[str] = []
    for key, value in options.items():
        low = key.lower()
        if low in lowered:
            problems.append(f"option {key!r} given twice (names ignore case)")
        lowered[low] = value
    for key in lowered:
        if key not in OPTION_NAMES and key not in PASSTHROUGH:
            problems.append(_unknown(key))
    parser = OptionParser(lowered, problems)
    url = parser.url()
    streams = _streams(lowered.get("streams"), problems)
    starting = _offsets("startingOffsets", lowered.get("startingoffsets"), streams, problems)
    ending = _offsets("endingOffsets", lowered.get("endingoffsets"), streams, problems)
    if batch:
        if starting and any(value == LATEST for value in starting.values()):
            problems.append("startingOffsets latest (-1) is not allowed for a batch read")
        if ending and any(value == EARLIEST for value in ending.values()):
            problems.append("endingOffsets earliest (-2) is not allowed for a batch read")
    else:
        if "endingoffsets" in lowered:
            problems.append("endingOffsets is for batch reads (spark.read) only")
    if batch and "maxmessagespertrigger" in lowered:
        problems.append("maxMessagesPerTrigger is for streaming reads (spark.readStream) only")
    max_per_trigger = None
    if "maxmessagespertrigger" in lowered:
        max_per_trigger = parser.integer("maxMessagesPerTrigger", 0, 1, 2**31 - 1)
    min_partitions = None
    if "minpartitions" in lowered:
        min_partitions = parser.integer("minPartitions", 1, 1, 10_000)
    parsed = SourceOptions(
        url=url,
        streams=streams,
        starting=starting or dict.fromkeys(streams, EARLIEST if batch else LATEST),
        ending=ending or dict.fromkeys(streams, LATEST),
        max_messages_per_trigger=max_per_trigger,
        fail_on_data_loss=parser.boolean("failOnDataLoss", True),
        min_partitions=min_partitions,
        prefetch=parser.integer("prefetch", 2000, 1, 65_535),
        connect_timeout_ms=parser.integer("connectTimeoutMs", 10_000, 1, 86_400_000),
        read_timeout_ms=parser.integer("readTimeoutMs", 60_000, 1, 86_400_000),
        empty_probe_ms=parser.integer("emptyProbeMs", 300, 0, 60_000),
    )
    if problems:
        raise ConfigError(PREFIX + "; ".join(problems))
    return parsed


def _unknown(key: str) -> str:
    close = difflib.get_close_matches(key, list(OPTION_NAMES), n=1, cutoff=0.6)
    hint = f" (did you mean {OPTION_NAMES[close[0]]!r}?)" if close else ""
    known = ", ".join(sorted(OPTION_NAMES.values(), key=str.lower))
    return f"unknown option {key!r}{hint}; known options: {known}"


def _streams(raw: str | None, problems: list[str]) -> tuple[str, ...]:
    if raw is None or not raw.strip():
        problems.append('option "streams" is required (a comma-separated list of stream names)')
        return ()
    names = tuple(name.strip() for name in raw.split(","))
    if any(not name for name in names):
        problems.append(f"option streams {raw!r} has an empty name")
    if len(set(names)) != len(names):
        problems.append(f"option streams {raw!r} names a stream twice")
    return tuple(name for name in names if name)


def _offsets(
    name: str, raw: str | None, streams: tuple[str, ...], problems: list[str]
) -> dict[str, int]:
    """``earliest``, ``latest`` or a JSON object stream → offset (-2 earliest, -1 latest)."""
    if raw is None:
        return {}
    word = raw.strip().lower()
    if word in ("earliest", "latest"):
        return dict.fromkeys(streams, EARLIEST if word == "earliest" else LATEST)
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        problems.append(
            f'option {name} must be earliest, latest or a JSON object such as {{"s1": 42}} '
            f"(-2 = earliest, -1 = latest), not {raw!r}"
        )
        return {}
    result: dict[str, int] = {}
    for stream, offset in value.items():
        if stream not in streams:
            problems.append(f"option {name} names {stream!r}, which is not in streams")
        elif type(offset) is not int or offset < -2:
            problems.append(f"option {name}: offset of {stream!r} must be an integer >= -2")
        else:
            result[stream] = offset
    missing = [stream for stream in streams if stream not in value]
    if missing:
        problems.append(f"option {name} gives no offset for {', '.join(map(repr, missing))}")
    return result
