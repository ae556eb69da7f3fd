"""Resource alarms: the memory high-watermark and the free-disk low-watermark (sans-IO).

Theory of operation
-------------------
The shell measures (its own RSS several times a second, the data directory's free space
once a second, after every `DISK_CHECK_BYTES` the store wrote and after a failed write) and
passes the numbers in; nothing here reads a clock or the system. The disk alarm is on while
the free space is below the limit, as in RabbitMQ, and also from a failed storage batch
(`store_failed`: a full disk the last measurement did not see yet, an I/O error) until a
batch commits again (`store_written`; while the store is failing the shell offers it an
empty batch every second). So one alarm episode - one connection.blocked "low on disk" per
publishing connection, one connection.unblocked - covers a disk that filled up, however many
batches failed meanwhile; it clears when the free space is back above the limit *and* the
store writes again.

The memory alarm has hysteresis: it goes on at the first reading above the watermark, but
goes off only after `CLEAR_READINGS` consecutive readings below `CLEAR_FRACTION` of it.
Without that, a publisher blocked at the watermark lets the RSS dip just below it (the
shell trims the heap while the alarm is on), is unblocked, pushes it above again, and so
on: publishers saw five blocked/unblocked cycles in three seconds. With it they see one
pair per real crossing - the alarm clears once consumers have really made room (RabbitMQ
also shows one pair, thanks to its slower, smoothed memory readings).

While any alarm is on, a connection that publishes is blocked (``rabbit_reader``'s throttle):
after the chunk holding the publish it is sent ``connection.blocked`` (reason "low on
memory", "low on disk" or "low on memory & disk", if the client announced the capability)
and the shell stops reading from it, so its data waits in the kernel and in the client. A
connection that does not publish (a consumer, which must be able to ack) is never blocked.
When the last alarm clears, blocked connections are read again and get
``connection.unblocked``. While a connection is blocked its heartbeat timeout is suspended,
since it is the broker that does not read.
"""

from __future__ import annotations

import logging
from typing import Final

log = logging.getLogger(__name__)

MEMORY: Final = "memory"
DISK: Final = "disk"
DISK_CHECK_BYTES: Final = 1024 * 1024  # the shell measures free space after this many written
CLEAR_FRACTION: Final = 0.9  # the memory alarm clears below 90 % of the watermark ...
CLEAR_READINGS: Final = 5  # ... on this many consecutive readings (0.5 s in the shell)


class ResourceAlarms:
    """Which resource alarms are on, from the measurements the shell passes in."""

    __slots__ = (
        "_below",
        "_disk_low",
        "active",
        "disk_free_limit",
        "memory_limit",
        "store_failing",
    )

    def __init__(self, memory_limit: int | None, disk_free_limit: int | None) -> None:
        self.memory_limit = memory_limit
        self.disk_free_limit = disk_free_limit
        self.active: dict[str, None] = {}  # insertion-ordered set
        self._below = 0  # consecutive memory readings under the clearing level
        self._disk_low = False  # the last free-space reading was below the limit
        self.store_failing = False  # a storage batch failed and none committed since

    @property
    def reason(self) -> str:
        """The connection.blocked reason, RabbitMQ's wording."""
        return "low on " + " & ".join(self.active)

    def memory_used(self, used: int) -> bool:
        """Record the broker's memory use (bytes); True if the memory alarm changed."""
        limit = self.memory_limit
        if limit is None:
            return False
        if MEMORY not in self.active:
            self._below = 0
            return self._set(MEMORY, used > limit, "used", used, limit)
        self._below = self._below + 1 if used < limit * CLEAR_FRACTION else 0
        if self._below < CLEAR_READINGS:
            return False
        return self._set(MEMORY, False, "used", used, limit)

    def disk_free(self, free: int) -> bool:
        """Record the data directory's free space (bytes); True if the disk alarm changed."""
        limit = self.disk_free_limit
        if limit is None:
            return False
        self._disk_low = free < limit
        return self._set(DISK, self._disk_low or self.store_failing, "free", free, limit)

    def store_failed(self, error: str) -> bool:
        """A storage batch failed; True if the disk alarm went on (a new episode)."""
        if self.store_failing:
            return False
        self.store_failing = True
        if DISK in self.active:
            return False
        self.active[DISK] = None
        log.warning(
            "disk resource limit alarm set (the store cannot write: %s); publishers are blocked",
            error,
        )
        return True

    def store_written(self) -> bool:
        """A storage batch committed; True if that cleared the disk alarm."""
        if not self.store_failing:
            return False
        self.store_failing = False
        if DISK not in self.active:
            return False
        if self._disk_low:
            log.info("the store writes again; the disk alarm waits for free space")
            return False
        del self.active[DISK]
        log.warning("disk resource limit alarm cleared (the store writes again)")
        return True

    def _set(self, resource: str, on: bool, what: str, value: int, limit: int) -> bool:
        if on == (resource in self.active):
            return False
        if on:
            self.active[resource] = None
            log.warning(
                "%s resource limit alarm set (%d bytes %s, limit %d); publishers are blocked",
                resource,
                value,
                what,
                limit,
            )
        else:
            del self.active[resource]
            log.warning(
                "%s resource limit alarm cleared (%d bytes %s, limit %d)",
                resource,
                value,
                what,
                limit,
            )
        return True
