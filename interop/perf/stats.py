"""Latency histograms and their summaries.

A `Histogram` counts microsecond values in log-linear buckets (HdrHistogram's idea: every
power of two is split into 64 sub-buckets, so a value is kept to within 1/64 ≈ 1.6 %).
Recording is one dict update and can carry a weight: messages stamped in the same batch
and received in the same chunk share one latency, so they are recorded once. Histograms
from several processes merge by adding counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

SUB_BITS: Final = 6
SUB_COUNT: Final = 1 << SUB_BITS
PERCENTILES: Final = (50.0, 75.0, 95.0, 99.0, 99.9)


def bucket_of(value: int) -> int:
    """The bucket key of a non-negative integer value (monotonic in ``value``)."""
    if value < SUB_COUNT:
        return value
    shift = value.bit_length() - SUB_BITS
    return (shift << SUB_BITS) + (value >> shift)


def bucket_bounds(key: int) -> tuple[int, int]:
    """The smallest and largest value that fall in bucket ``key``."""
    if key < SUB_COUNT:
        return key, key
    shift = key >> SUB_BITS
    low = (key - (shift << SUB_BITS)) << shift
    return low, low + (1 << shift) - 1


@dataclass(slots=True)
class Histogram:
    """Counts of microsecond values, with exact count, sum, min and max."""

    buckets: dict[int, int] = field(default_factory=dict)
    count: int = 0
    total: int = 0
    low: int = 0
    high: int = 0

    def record(self, value: int, weight: int = 1) -> None:
        """Count ``value`` (µs; negatives count as 0) ``weight`` times."""
        if value < 0:
            value = 0
        key = bucket_of(value)
        self.buckets[key] = self.buckets.get(key, 0) + weight
        if self.count == 0 or value < self.low:
            self.low = value
        if value > self.high:
            self.high = value
        self.count += weight
        self.total += value * weight

    def merge(self, other: Histogram) -> None:
        """Add the counts of ``other`` to this histogram."""
        if other.count == 0:
            return
        for key, n in other.buckets.items():
            self.buckets[key] = self.buckets.get(key, 0) + n
        self.low = other.low if self.count == 0 else min(self.low, other.low)
        self.high = max(self.high, other.high)
        self.count += other.count
        self.total += other.total

    def percentile(self, pct: float) -> int:
        """The value at percentile ``pct`` (0-100): the upper bound of its bucket, clamped to
        the exact maximum (so p100 is the maximum). 0 for an empty histogram."""
        if self.count == 0:
            return 0
        rank = max(1, -(-self.count * pct // 100))  # ceil, at least the first value
        seen = 0
        for key in sorted(self.buckets):
            seen += self.buckets[key]
            if seen >= rank:
                return max(self.low, min(bucket_bounds(key)[1], self.high))
        return self.high

    def summary(self) -> LatencySummary:
        """Count, mean, min, max and the standard percentiles."""
        return LatencySummary(
            count=self.count,
            mean=self.total / self.count if self.count else 0.0,
            low=self.low,
            high=self.high,
            percentiles={pct: self.percentile(pct) for pct in PERCENTILES},
        )


@dataclass(frozen=True, slots=True)
class LatencySummary:
    """A histogram reduced to what a report prints (values in µs)."""

    count: int
    mean: float
    low: int
    high: int
    percentiles: dict[float, int]

    def as_dict(self) -> dict[str, float]:
        """JSON-friendly form: count, mean, min, p50 ... p99.9, max."""
        out: dict[str, float] = {"count": self.count, "mean": round(self.mean, 1)}
        out["min"] = self.low
        for pct, value in self.percentiles.items():
            out[f"p{pct:g}"] = value
        out["max"] = self.high
        return out
