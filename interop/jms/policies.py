"""Prefetch policy, redelivery policy and dead-letter strategies, with ActiveMQ's defaults.

Times are seconds here (Python convention); the URL parser converts ActiveMQ's milliseconds.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from interop.jms.constants import MAX_PREFETCH
from interop.jms.errors import ConfigurationError

__all__ = [
    "NO_MAXIMUM_REDELIVERIES",
    "DeadLetterStrategy",
    "IndividualDeadLetterStrategy",
    "PrefetchPolicy",
    "RedeliveryPolicy",
    "SharedDeadLetterStrategy",
]

log = logging.getLogger(__name__)

NO_MAXIMUM_REDELIVERIES: Final = -1
_PREFETCH_FIELDS: Final = (
    "queue_prefetch",
    "queue_browser_prefetch",
    "topic_prefetch",
    "durable_topic_prefetch",
    "optimize_durable_topic_prefetch",
)


def _prefetch(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(f"{name} must be an int, not {value!r}")
    if value < 0:
        raise ConfigurationError(f"{name} must be >= 0, not {value}")
    if value > MAX_PREFETCH:
        log.warning("%s %d is above the maximum; using %d", name, value, MAX_PREFETCH)
        return MAX_PREFETCH
    return value


@dataclass(slots=True)
class PrefetchPolicy:
    """How many messages the broker may push to a consumer ahead of the application.

    0 means pull: each ``receive`` fetches one message (``basic.get``); listeners are refused.
    Values above 32767 are clamped (with a logged warning), as ActiveMQ does.

    Attributes:
        queue_prefetch: Queue consumers (ActiveMQ default 1000).
        queue_browser_prefetch: Queue browsers (500; browsers are not implemented yet).
        topic_prefetch: Non-durable topic subscribers (32767).
        durable_topic_prefetch: Durable subscribers (100).
        optimize_durable_topic_prefetch: Durable subscribers in an AUTO_ACKNOWLEDGE session
            while the connection qualifies for optimized dispatch (1000).
    """

    queue_prefetch: int = 1000
    queue_browser_prefetch: int = 500
    topic_prefetch: int = MAX_PREFETCH
    durable_topic_prefetch: int = 100
    optimize_durable_topic_prefetch: int = 1000

    def __post_init__(self) -> None:
        for name in _PREFETCH_FIELDS:
            setattr(self, name, _prefetch(name, getattr(self, name)))

    def set_all(self, prefetch: int) -> None:
        """Set every prefetch value (ActiveMQ's ``prefetchPolicy.all``)."""
        value = _prefetch("prefetch", prefetch)
        for name in _PREFETCH_FIELDS:
            setattr(self, name, value)


@dataclass(slots=True)
class RedeliveryPolicy:
    """Client-side redelivery after rollback, recover or a failing listener.

    ``maximum_redeliveries`` 6 means 7 deliveries: a message is poisoned (sent to its
    dead-letter queue) when its redelivery counter *after* the increment exceeds the maximum.
    -1 means unlimited, 0 means the first failure poisons.

    Attributes:
        maximum_redeliveries: See above (default 6).
        initial_redelivery_delay: Delay before the first redelivery, seconds (1.0).
        redelivery_delay: Delay before later redeliveries, seconds (1.0).
        use_exponential_backoff: Multiply the previous delay by ``backoff_multiplier``.
        backoff_multiplier: Exponential factor (5.0).
        maximum_redelivery_delay: Cap for exponential delays, seconds; None = no cap.
        use_collision_avoidance: Add +/- ``collision_avoidance_percent`` jitter.
        collision_avoidance_percent: Jitter size in percent (15).
        non_blocking_redelivery: Let later messages overtake one waiting for its delay
            (ActiveMQ's ``nonBlockingRedelivery``); by default the consumer waits, keeping order.
        pre_dispatch_check: Transacted sessions poison a message that arrives with a counter
            already above the maximum, without handing it to the application.
    """

    maximum_redeliveries: int = 6
    initial_redelivery_delay: float = 1.0
    redelivery_delay: float = 1.0
    use_exponential_backoff: bool = False
    backoff_multiplier: float = 5.0
    maximum_redelivery_delay: float | None = None
    use_collision_avoidance: bool = False
    collision_avoidance_percent: float = 15.0
    non_blocking_redelivery: bool = False
    pre_dispatch_check: bool = True

    def __post_init__(self) -> None:
        if self.maximum_redeliveries < NO_MAXIMUM_REDELIVERIES:
            raise ConfigurationError(
                f"maximum_redeliveries must be >= -1, not {self.maximum_redeliveries}"
            )
        for name in ("initial_redelivery_delay", "redelivery_delay"):
            if getattr(self, name) < 0:
                raise ConfigurationError(f"{name} must be >= 0 seconds")
        if self.maximum_redelivery_delay is not None and self.maximum_redelivery_delay < 0:
            self.maximum_redelivery_delay = None  # ActiveMQ's -1 = no cap
        if not 0 <= self.collision_avoidance_percent <= 100:
            raise ConfigurationError("collision_avoidance_percent must be within 0..100")

    def exceeded(self, counter: int) -> bool:
        """Whether a message with this redelivery counter must go to the dead-letter queue."""
        maximum = self.maximum_redeliveries
        return maximum != NO_MAXIMUM_REDELIVERIES and counter > maximum

    def _next_delay(self, previous: float) -> float:
        delay = float(self.redelivery_delay)
        if previous > 0 and self.use_exponential_backoff and self.backoff_multiplier > 1:
            delay = previous * self.backoff_multiplier
            cap = self.maximum_redelivery_delay
            if cap is not None and delay > cap:
                delay = max(cap, self.redelivery_delay)
        return delay

    def delay(self, counter: int, rand: Callable[[], float] = random.random) -> float:
        """The wait before redelivery number ``counter`` (1 = first redelivery), seconds.

        Computed from the counter (as ActiveMQ does since AMQ-8617), so a message that was
        redelivered elsewhere before gets the delay its count calls for.
        """
        if counter <= 0:
            return 0.0
        delay = float(self.initial_redelivery_delay)
        for _ in range(2, counter + 1):
            delay = self._next_delay(delay)
        if self.use_collision_avoidance and delay > 0:
            spread = self.collision_avoidance_percent / 100
            delay += delay * spread * (2 * rand() - 1)
        return delay


class DeadLetterStrategy(Protocol):
    """Chooses the dead-letter queue of a destination (declared by the client)."""

    @property
    def process_non_persistent(self) -> bool:
        """Dead-letter poisoned non-persistent messages too (ActiveMQ default: drop them)."""
        ...

    @property
    def process_expired(self) -> bool:
        """Dead-letter messages found expired in the client (ActiveMQ default: yes)."""
        ...

    def queue_name(self, destination_name: str, is_topic: bool) -> str:
        """The dead-letter queue for messages of ``destination_name``."""
        ...

    def is_dead_letter_queue(self, queue_name: str) -> bool:
        """Whether ``queue_name`` is one of this strategy's dead-letter queues."""
        ...


@dataclass(frozen=True, slots=True)
class SharedDeadLetterStrategy:
    """One dead-letter queue for everything (ActiveMQ's default ``ActiveMQ.DLQ``)."""

    queue: str = "ActiveMQ.DLQ"
    process_non_persistent: bool = False
    process_expired: bool = True

    def queue_name(self, destination_name: str, is_topic: bool) -> str:
        """The shared queue, whatever the destination."""
        return self.queue

    def is_dead_letter_queue(self, queue_name: str) -> bool:
        """True for the shared queue."""
        return queue_name == self.queue


@dataclass(frozen=True, slots=True)
class IndividualDeadLetterStrategy:
    """One dead-letter queue per destination (``ActiveMQ.DLQ.Queue.<name>`` by default)."""

    queue_prefix: str = "ActiveMQ.DLQ.Queue."
    topic_prefix: str = "ActiveMQ.DLQ.Topic."
    process_non_persistent: bool = False
    process_expired: bool = True

    def queue_name(self, destination_name: str, is_topic: bool) -> str:
        """Prefix + destination name."""
        return (self.topic_prefix if is_topic else self.queue_prefix) + destination_name

    def is_dead_letter_queue(self, queue_name: str) -> bool:
        """True for names carrying one of the prefixes."""
        return queue_name.startswith((self.queue_prefix, self.topic_prefix))
