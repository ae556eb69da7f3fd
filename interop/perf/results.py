"""Records shared by the workers and the coordinator: the run window and the counters.

All times are nanoseconds of one clock (`time.monotonic_ns`, or `time.time_ns` with
--wall-clock); the monotonic clock is system-wide on Linux, so every process on the host
agrees on it. Counts and latencies only cover the measured window: from ``warm_ns`` (start
plus warm-up) to the end of the run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from interop.perf.stats import Histogram


def clock_for(wall_clock: bool) -> Callable[[], int]:
    """The nanosecond clock messages are stamped with."""
    return time.time_ns if wall_clock else time.monotonic_ns


@dataclass(frozen=True, slots=True)
class RunWindow:
    """When work starts, when measuring starts, and when (if by time) the run ends."""

    start_ns: int
    warm_ns: int
    end_ns: int | None
    wall_clock: bool = False

    def now(self) -> int:
        """The current time on the run's clock."""
        return clock_for(self.wall_clock)()


@dataclass(slots=True)
class ProducerStats:
    """What the producers of one process did inside the window."""

    published: int = 0
    confirmed: int = 0  # acked (confirm mode) or committed (tx mode)
    nacked: int = 0
    returned: int = 0
    confirm_frames: int = 0  # basic.ack/nack frames received (coalescing shows here)
    sent_total: int = 0  # including the warm-up
    confirm_latency: Histogram = field(default_factory=Histogram)
    finished_ns: int = 0

    def merge(self, other: ProducerStats) -> None:
        """Add ``other``'s counts (the latest finish wins)."""
        self.published += other.published
        self.confirmed += other.confirmed
        self.nacked += other.nacked
        self.returned += other.returned
        self.confirm_frames += other.confirm_frames
        self.sent_total += other.sent_total
        self.confirm_latency.merge(other.confirm_latency)
        self.finished_ns = max(self.finished_ns, other.finished_ns)


@dataclass(slots=True)
class ConsumerStats:
    """What the consumers of one process received inside the window."""

    consumed: int = 0
    received_total: int = 0  # including the warm-up
    latency: Histogram = field(default_factory=Histogram)
    finished_ns: int = 0

    def merge(self, other: ConsumerStats) -> None:
        """Add ``other``'s counts (the latest finish wins)."""
        self.consumed += other.consumed
        self.received_total += other.received_total
        self.latency.merge(other.latency)
        self.finished_ns = max(self.finished_ns, other.finished_ns)


@dataclass(slots=True)
class WorkerResult:
    """The outcome of one worker process."""

    worker: int
    role: str  # "producer" or "consumer"
    tasks: int
    cpu_s: float  # the process's own CPU over the window
    wall_s: float  # the window as this process saw it
    producers: ProducerStats = field(default_factory=ProducerStats)
    consumers: ConsumerStats = field(default_factory=ConsumerStats)
