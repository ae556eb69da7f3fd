"""The statistics' sample history: what RabbitMQ's ``lengths_age`` / ``msg_rates_age`` /
``data_rates_age`` ranges answer from (sans-IO: times are passed in, in milliseconds).

Theory of operation
-------------------
After every rate sample (amqpd/engine/rates.py, every 5 s) the engine records, for each
queue, exchange and connection and for the node, one tuple of plain numbers (queue lengths,
cumulative counters) under the object itself (`SampleHistory.record`, between `begin` and
`end`). A `Series` stores an entry only when its values changed since its previous entry,
so an idle object costs one entry, and it forgets entries older than `RETAIN_MS` except
the one still valid at the window's start. The history is therefore bounded by the window
(at most ``RETAIN_MS / interval + 2`` entries per object: ten minutes at 5 s, the first
tier of RabbitMQ's default ``basic`` retention) whatever age a request asks for. An object
not recorded in a pass (deleted) loses its series at `end`.

A query (`SampleHistory.points`) answers a range as RabbitMQ's exometer slides do: the
points ``last, last - incr, ... >= first``, newest first, each with the values of the
latest entry at or before it; a point before the object's first entry has zeros (it did
not exist yet); points before the history's own start (the broker's first sample, or the
retention window) are left out, so the answer never invents a past it did not see.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Final, final

RETAIN_MS: Final = 600_000  # how far back samples are kept (RabbitMQ: 605 s at 5 s)

Values = tuple[int, ...]


@final
class Series:
    """One object's entries: ``times[i]`` (ms) is when ``values[i]`` started to hold."""

    __slots__ = ("times", "values")

    def __init__(self) -> None:
        self.times: list[int] = []
        self.values: list[Values] = []

    def add(self, now_ms: int, values: Values, horizon_ms: int) -> None:
        """Record ``values`` at ``now_ms`` (only if they changed) and forget what is older
        than ``horizon_ms`` except the entry valid at the horizon."""
        if not self.values or self.values[-1] != values:
            self.times.append(now_ms)
            self.values.append(values)
        times = self.times
        drop = 0
        while drop + 1 < len(times) and times[drop + 1] <= horizon_ms:
            drop += 1
        if drop:
            del times[:drop]
            del self.values[:drop]

    def value_at(self, point_ms: int) -> Values | None:
        """The values valid at ``point_ms`` (None: before the first entry)."""
        index = bisect_right(self.times, point_ms) - 1
        return self.values[index] if index >= 0 else None


@final
class SampleHistory:
    """Every object's `Series` plus the node's, and the span the history covers."""

    __slots__ = ("_next", "_series", "latest", "node", "started")

    def __init__(self) -> None:
        self._series: dict[object, Series] = {}
        self._next: dict[object, Series] = {}
        self.node = Series()  # the node's totals
        self.started: int | None = None  # the first pass (ms)
        self.latest = 0  # the pass being recorded, or the last one (ms)

    def begin(self, now_ms: int) -> None:
        """Start a pass at ``now_ms``."""
        if self.started is None:
            self.started = now_ms
        self.latest = now_ms
        self._next = {}

    def record(self, key: object, values: Values) -> None:
        """Record ``key``'s values in this pass."""
        series = self._series.get(key)
        if series is None:
            series = Series()
        series.add(self.latest, values, self.latest - RETAIN_MS)
        self._next[key] = series

    def record_node(self, values: Values) -> None:
        """Record the node's totals in this pass."""
        self.node.add(self.latest, values, self.latest - RETAIN_MS)

    def end(self) -> None:
        """Finish the pass: objects not recorded in it are forgotten."""
        self._series = self._next
        self._next = {}

    def series(self, key: object) -> Series | None:
        """``key``'s series (None until its first pass)."""
        return self._series.get(key)

    def start(self) -> int | None:
        """The oldest time (ms) the history can answer for (None before the first pass)."""
        if self.started is None:
            return None
        return max(self.started, self.latest - RETAIN_MS)

    def points(
        self, series: Series | None, first_ms: int, last_ms: int, incr_ms: int, width: int
    ) -> list[tuple[int, Values]]:
        """``(timestamp, values)`` at ``last_ms, last_ms - incr_ms, ...`` down to
        ``first_ms``, newest first (see the module's docstring); [] for no series."""
        start = self.start()
        if series is None or start is None or incr_ms <= 0:
            return []
        zeros: Values = (0,) * width
        out: list[tuple[int, Values]] = []
        point = last_ms
        oldest = max(first_ms, start, last_ms - RETAIN_MS)  # never more than the window
        while point >= oldest:
            found = series.value_at(point)
            out.append((point, found if found is not None else zeros))
            point -= incr_ms
        return out
