"""Pure acknowledgement logic: batching thresholds, the safe cumulative-ack rule, the window.

Theory of operation
-------------------
Nothing here does I/O or reads a clock; callers pass ``now`` and get back the delivery tags
to acknowledge, so every rule is unit-tested without a broker.

*Thresholds.* ActiveMQ compares ``counter >= fraction * prefetch`` in floating point. Here
the fraction is an integer percentage and the comparison ``counter * 100 >= percent *
prefetch`` is exact, so prefetch 10 at 65 % acks at the 7th message, 100 at the 65th and
1000 at the 650th (``0.65 * 100`` is 65.00000000000001 in floating point, which would
wrongly give 66).

*AckBatcher* (optimizeAcknowledge in AUTO_ACKNOWLEDGE, DUPS_OK_ACKNOWLEDGE on a topic).
State: the tags consumed but not yet acked, and the time of the last ack (initially the
consumer's creation). ``consumed(tag, now)`` appends the tag; when the count reaches the
threshold, or when a timeout is set and ``now >= last_ack + timeout``, it returns the whole
batch and restarts the clock. The timeout is only evaluated here, when a message is
consumed: it is not a timer (ActiveMQ's rule). ``take_all()`` empties the batch (consumer
close, periodic flush, listener failure, recover).

*Safe cumulative ack* (``plan_acks``). ``basic.ack(tag, multiple=true)`` settles every
outstanding delivery on the channel with a smaller tag, whichever consumer it belongs to and
whether or not the application has seen it. So a multiple ack may only reach up to the
longest prefix of the channel's outstanding tags (in tag order) that lies entirely inside
the set being acked; everything after that prefix is acked one tag at a time.

*WindowTracker* (CLIENT, INDIVIDUAL and transacted sessions). AMQP counts consumed but
unacked messages against ``basic.qos``; ActiveMQ does not (its DELIVERED acks extend the
window), so "read more than the prefetch, then acknowledge once" would stall. The tracker
counts the messages of the *current* AMQP consumer tag that the application consumed and
has not acked; when they reach ceil(50 % of the prefetch) the consumer is re-subscribed
under a new tag (the old tag's deliveries stay unacked on the channel and stop counting),
which gives the broker a fresh window of ``prefetch`` messages: the window grows in steps
of half the prefetch, as in ActiveMQ.
"""

from __future__ import annotations

from collections.abc import Iterable

from interop.jms.constants import (
    DUPS_OK_BATCH_PERCENT,
    OPTIMIZE_ACK_PERCENT,
    WINDOW_STEP_PERCENT,
    AckMode,
)

__all__ = ["AckBatcher", "WindowTracker", "consumer_helpers", "plan_acks", "threshold"]


def threshold(prefetch: int, percent: int) -> int:
    """The smallest count with ``count >= percent % of prefetch`` (at least 1).

    Args:
        prefetch: The consumer's prefetch.
        percent: 65 for optimizeAcknowledge, 50 for DUPS_OK batches and window steps.
    """
    return max(1, (prefetch * percent + 99) // 100)


def plan_acks(tags: Iterable[int], outstanding: Iterable[int]) -> list[tuple[int, bool]]:
    """The fewest ``(delivery_tag, multiple)`` acks that settle exactly ``tags``.

    Args:
        tags: Delivery tags to acknowledge (any order; all must be outstanding).
        outstanding: Every delivery tag still unacked on the channel, ascending.

    Returns:
        At most one ``multiple=True`` ack (for the longest acked prefix of ``outstanding``,
        when it holds two or more tags) followed by single acks, ascending.
    """
    wanted = sorted(set(tags))
    if not wanted:
        return []
    members = set(wanted)
    prefix_end = 0
    prefix_len = 0
    for tag in outstanding:
        if tag not in members:
            break
        prefix_end = tag
        prefix_len += 1
    plan: list[tuple[int, bool]] = []
    if prefix_len >= 2:
        plan.append((prefix_end, True))
        rest = [tag for tag in wanted if tag > prefix_end]
    else:
        rest = wanted
    plan.extend((tag, False) for tag in rest)
    return plan


class AckBatcher:
    """Consumed-but-unacked tags of one consumer, released in batches (see module doc)."""

    __slots__ = ("_last_ack", "_pending", "limit", "timeout")

    def __init__(self, limit: int, timeout: float, now: float) -> None:
        """Start a batcher.

        Args:
            limit: Batch size that triggers an ack (use `threshold`).
            timeout: Seconds after the last ack at which the next consumed message releases
                the batch; 0 disables the time rule.
            now: The consumer's creation time (the clock starts there).
        """
        self.limit = limit
        self.timeout = timeout
        self._pending: list[int] = []
        self._last_ack = now

    @property
    def pending(self) -> list[int]:
        """Tags consumed and not yet released (oldest first)."""
        return list(self._pending)

    def consumed(self, tag: int, now: float) -> list[int]:
        """Record a consumed message; return the batch to ack now (often empty)."""
        self._pending.append(tag)
        due = len(self._pending) >= self.limit or (
            self.timeout > 0 and now >= self._last_ack + self.timeout
        )
        if not due:
            return []
        self._last_ack = now
        return self.take_all()

    def take_all(self) -> list[int]:
        """Empty the batch and return it."""
        batch, self._pending = self._pending, []
        return batch

    def discard(self, tag: int) -> None:
        """Forget a tag that was settled another way."""
        if tag in self._pending:
            self._pending.remove(tag)


class WindowTracker:
    """When to re-subscribe so consumed-but-unacked messages stop using the window."""

    __slots__ = ("_held", "current_tag", "rotating", "step")

    def __init__(self, step: int, consumer_tag: str) -> None:
        """Track the window of one consumer.

        Args:
            step: Consumed-unacked messages of the current tag that trigger a re-subscribe
                (ceil(50 % of the prefetch)).
            consumer_tag: The AMQP consumer tag in use.
        """
        self.step = step
        self.current_tag = consumer_tag
        self.rotating = False
        self._held: set[int] = set()

    def consumed(self, delivery_tag: int, consumer_tag: str) -> bool:
        """Record a message the application consumed without acking; True = re-subscribe."""
        if consumer_tag != self.current_tag:
            return False
        self._held.add(delivery_tag)
        return not self.rotating and len(self._held) >= self.step

    def settled(self, delivery_tag: int) -> None:
        """A delivery was acked or rejected."""
        self._held.discard(delivery_tag)

    def start_rotation(self, new_tag: str) -> str:
        """Switch to ``new_tag``; returns the old tag to cancel."""
        old = self.current_tag
        self.current_tag = new_tag
        self._held = set()
        self.rotating = True
        return old

    def rotation_done(self) -> None:
        """The new subscription is active."""
        self.rotating = False


def consumer_helpers(
    ack_mode: AckMode,
    *,
    prefetch: int,
    is_topic: bool,
    optimize_acknowledge: bool,
    optimize_acknowledge_timeout: float,
    single_active_consumer: bool,
    consumer_tag: str,
    now: float,
) -> tuple[AckBatcher | None, WindowTracker | None]:
    """The batcher and window tracker a new consumer needs (None when it needs none).

    - AUTO (and DUPS_OK on a queue, which is AUTO) with optimizeAcknowledge: batches of
      ceil(65 % of the prefetch), with the timeout.
    - DUPS_OK on a topic: batches of ceil(50 % of the prefetch); on a queue none (per message).
    - CLIENT, INDIVIDUAL, transacted: a window tracker stepping at ceil(50 % of the prefetch),
      except on single-active-consumer queues, where re-subscribing would hand the queue to a
      standby consumer (the prefetch stays a hard cap there).
    - Prefetch 0 (pull): nothing (each message is acked on its own, as in ActiveMQ).
    """
    if prefetch <= 0:
        return None, None
    as_auto = ack_mode is AckMode.AUTO_ACKNOWLEDGE or (
        ack_mode is AckMode.DUPS_OK_ACKNOWLEDGE and not is_topic
    )
    if as_auto and optimize_acknowledge:
        limit = threshold(prefetch, OPTIMIZE_ACK_PERCENT)
        return AckBatcher(limit, optimize_acknowledge_timeout, now), None
    if ack_mode is AckMode.DUPS_OK_ACKNOWLEDGE and is_topic:
        return AckBatcher(threshold(prefetch, DUPS_OK_BATCH_PERCENT), 0.0, now), None
    holding = ack_mode in (
        AckMode.CLIENT_ACKNOWLEDGE,
        AckMode.INDIVIDUAL_ACKNOWLEDGE,
        AckMode.SESSION_TRANSACTED,
    )
    if holding and not single_active_consumer:
        return None, WindowTracker(threshold(prefetch, WINDOW_STEP_PERCENT), consumer_tag)
    return None, None
