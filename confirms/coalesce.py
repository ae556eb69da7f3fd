"""Turning settled publisher-confirm sequence numbers into ``basic.ack``/``basic.nack`` frames.

A client in confirm mode keeps the set of delivery tags it has published but not yet
seen confirmed. A frame with ``multiple=False`` settles one tag; a frame with
``multiple=True`` and tag ``T`` settles every tag ``<= T`` the client still has
outstanding. :func:`coalesce` chooses frames for one flush.

Rules it follows (compare ``coalesce_and_send`` in RabbitMQ's ``rabbit_channel.erl``):

* Below the smallest still-unconfirmed number (the *cutoff*) everything the client
  still has outstanding is settled now, so each maximal run of same-kind numbers
  (in ascending order) is covered by one frame carrying the run's last number. A run
  is ``multiple=True`` unless it holds a single number.
* At or above the cutoff a ``multiple`` frame would also settle the unconfirmed
  number, so each settled number there gets its own ``multiple=False`` frame.
* Frames are returned in ascending tag order, runs first, then the single frames.

Why runs and not fewer frames: for acked ``{1, 3}`` and nacked ``{2}`` the pair
``nack(2)``, ``ack(3, multiple)`` is valid for a client that keeps a set of tags (Java,
pika), but ``amqp091-go`` resequences confirms and relabels every tag from its next
expected one up to ``T`` with the kind of the ``multiple`` frame. It would report 2
as acked. A ``multiple`` frame therefore never reaches back over a tag of the other
kind. Under that rule the result is minimal: one frame per run below the cutoff and
one per settled number above it.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["ConfirmFrame", "coalesce"]


@dataclass(frozen=True, slots=True)
class ConfirmFrame:
    """One publisher-confirm frame to send to the client.

    Attributes:
        ack: ``True`` for ``basic.ack``, ``False`` for ``basic.nack``.
        delivery_tag: The publish sequence number the frame refers to.
        multiple: Whether the frame also settles every lower tag the client still
            has outstanding.
    """

    ack: bool
    delivery_tag: int
    multiple: bool


def coalesce(
    acked: Iterable[int],
    nacked: Iterable[int],
    smallest_unconfirmed: int | None,
) -> list[ConfirmFrame]:
    """Return the frames that report one flush of settled sequence numbers.

    Args:
        acked: Sequence numbers that became acked since the previous flush. The
            order does not matter; a repeated number counts once.
        nacked: Sequence numbers that became nacked since the previous flush.
            Must not share a number with ``acked``.
        smallest_unconfirmed: The lowest sequence number still unsettled after
            this flush, or ``None`` if nothing is unsettled.

    Returns:
        Frames in ascending ``delivery_tag`` order. A client applying them in order
        ends with exactly ``acked`` acked and ``nacked`` nacked, and no unsettled
        number touched. ``multiple`` frames never reach over a number of the other
        kind (see the module docstring). Empty if nothing was settled.

    Raises:
        ValueError: If a number is both acked and nacked, or equals
            ``smallest_unconfirmed``.
    """
    acks = acked if isinstance(acked, list) else list(acked)
    nacks = nacked if isinstance(nacked, list) else list(nacked)
    cutoff = smallest_unconfirmed
    if not nacks:
        # The common case: acks only, so everything below the cutoff is one run.
        if not acks:
            return []
        if cutoff is None:
            low, high = acks, []
        else:
            low = [s for s in acks if s < cutoff]
            high = [s for s in acks if s > cutoff]
            if len(low) + len(high) != len(acks):
                raise ValueError(f"sequence number {cutoff} is both settled and unconfirmed")
        frames: list[ConfirmFrame] = []
        if low:
            top = max(low)
            frames.append(ConfirmFrame(True, top, min(low) != top))
        if high:
            frames.extend(ConfirmFrame(True, s, False) for s in sorted(set(high)))
        return frames
    return _coalesce_mixed(set(acks), set(nacks), cutoff)


def _coalesce_mixed(
    ack_set: set[int], nack_set: set[int], cutoff: int | None
) -> list[ConfirmFrame]:
    """General case of :func:`coalesce`, for flushes that contain nacks."""
    if not ack_set.isdisjoint(nack_set):
        both = min(ack_set & nack_set)
        raise ValueError(f"sequence number {both} is both acked and nacked")
    if cutoff is not None and (cutoff in ack_set or cutoff in nack_set):
        raise ValueError(f"sequence number {cutoff} is both settled and unconfirmed")
    tags = sorted(ack_set | nack_set)
    split = len(tags) if cutoff is None else bisect_left(tags, cutoff)
    frames: list[ConfirmFrame] = []
    run_ack = False
    run_last = 0
    run_len = 0
    for tag in tags[:split]:
        is_ack = tag in ack_set
        if run_len and is_ack is not run_ack:
            frames.append(ConfirmFrame(run_ack, run_last, run_len > 1))
            run_len = 0
        run_ack = is_ack
        run_last = tag
        run_len += 1
    if run_len:
        frames.append(ConfirmFrame(run_ack, run_last, run_len > 1))
    frames.extend(ConfirmFrame(tag in ack_set, tag, False) for tag in tags[split:])
    return frames
