"""Per-channel bookkeeping of unconfirmed publishes (RabbitMQ's ``rabbit_confirms``).

Theory of operation
-------------------
The channel numbers publishes 1, 2, 3, ... and calls :meth:`ConfirmTracker.track`
for each. A publish the broker is responsible for at once is acked at once; one that
still waits (for a storage batch: which one is recorded by the waiter, not here) is
kept in ``_pending``, the set of unconfirmed numbers, until :meth:`~ConfirmTracker.ack`
or :meth:`~ConfirmTracker.reject`.

Acking moves a number out of ``_pending`` into ``_acked``; rejecting moves it into
``_nacked``. Both lists only collect numbers until :meth:`~ConfirmTracker.take_frames`
hands them to :func:`~confirms.coalesce.coalesce` and starts new lists. A number
leaves ``_pending`` exactly once, so it is reported exactly once, as ack or nack.

Two watermarks keep everything amortized O(1) per publish:

* ``_low``: every number below it is settled. ``smallest_unconfirmed`` moves it
  up while the number under it is settled. It never moves down, so a number is
  stepped over once in total.
* ``_floor``: every number below it has been reported to the client. After a
  flush it equals the cutoff used for that flush.

Tags reported as single frames above the cutoff are *loose*: a client that
resequences confirms (``amqp091-go``) holds them until every lower tag arrives, and
a later ``multiple`` frame of the other kind reaching over them would relabel them.
Loose nacks are rare and are kept in a heap (``_loose_nacks``). When a flush has a
loose nack below its cutoff, or a nack of its own below it, the guarded path walks
``[_floor, cutoff)`` once. Every number there is either in this flush or loose, and
the walk splits the flush wherever a loose tag of the other kind would sit inside a
run. Each number is walked at most once in total, because ``_floor`` then moves
past the range. Flushes with only acks below the cutoff, the hot path, skip the walk.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from confirms.coalesce import ConfirmFrame, coalesce

__all__ = ["ConfirmTracker"]


class ConfirmTracker:
    """One per channel in confirm mode.

    Sequence numbers are assigned by the channel from 1 upward, in order. Not
    thread-safe; performs no I/O.
    """

    __slots__ = ("_acked", "_floor", "_loose_nacks", "_low", "_nacked", "_next", "_pending")

    def __init__(self) -> None:
        """Create an empty tracker; the first tracked number must be 1."""
        self._pending: set[int] = set()
        self._acked: list[int] = []
        self._nacked: list[int] = []
        self._next = 1
        self._low = 1
        self._floor = 1
        self._loose_nacks: list[int] = []

    def track(self, seq: int, waiting: bool = False) -> None:
        """Register a publish.

        Args:
            seq: The publish sequence number; must be one more than the previous
                one (1 for the first).
            waiting: The publish is unconfirmed until :meth:`ack` or :meth:`reject`
                (e.g. it waits for a storage batch). Otherwise it is acked at once,
                e.g. unroutable, or only delivered to transient queues.

        Raises:
            ValueError: If ``seq`` is not the next sequence number.
        """
        if seq != self._next:
            raise ValueError(f"expected sequence number {self._next}, got {seq}")
        self._next = seq + 1
        if waiting:
            self._pending.add(seq)
        else:
            self._acked.append(seq)

    def ack(self, seqs: Iterable[int]) -> None:
        """Ack each of ``seqs`` that is still unconfirmed.

        An unknown, already acked or rejected number is ignored.

        Args:
            seqs: The sequence numbers the broker took responsibility for, e.g. after
                a group commit.
        """
        pending = self._pending
        acked = self._acked
        for seq in seqs:
            if seq in pending:
                pending.remove(seq)
                acked.append(seq)

    def reject(self, seq: int) -> None:
        """Nack ``seq``: the broker cannot take responsibility for it.

        An unknown or already settled ``seq`` is ignored, so a publish is never both
        acked and nacked.

        Args:
            seq: The publish sequence number.
        """
        if seq in self._pending:
            self._pending.remove(seq)
            self._nacked.append(seq)

    def unconfirmed(self) -> int:
        """How many tracked publishes wait to be acked or nacked."""
        return len(self._pending)

    def smallest_unconfirmed(self) -> int | None:
        """Return the lowest unsettled sequence number, or ``None`` if there is none."""
        pending = self._pending
        if not pending:
            self._low = self._next
            return None
        low = self._low
        while low not in pending:
            low += 1
        self._low = low
        return low

    def take_frames(self) -> list[ConfirmFrame]:
        """Return frames for everything settled since the previous call.

        Every settled number is reported exactly once; afterwards it is forgotten.

        Returns:
            The frames to send, in order, as produced by
            :func:`~confirms.coalesce.coalesce`. Empty if nothing was settled.
        """
        acked = self._acked
        nacked = self._nacked
        if not acked and not nacked:
            return []
        self._acked = []
        self._nacked = []
        smallest = self.smallest_unconfirmed()
        cutoff = self._next if smallest is None else smallest
        loose = self._loose_nacks
        if (loose and loose[0] < cutoff) or any(s < cutoff for s in nacked):
            frames = self._guarded(acked, nacked, smallest, cutoff)
        else:
            frames = coalesce(acked, nacked, smallest)
        if nacked and smallest is not None:
            for frame in frames:
                if not frame.ack and frame.delivery_tag > smallest:
                    heapq.heappush(loose, frame.delivery_tag)
        self._floor = cutoff
        return frames

    def _guarded(
        self, acked: list[int], nacked: list[int], smallest: int | None, cutoff: int
    ) -> list[ConfirmFrame]:
        """Coalesce, splitting where a loose tag of the other kind sits inside a run."""
        loose = self._loose_nacks
        loose_here: set[int] = set()
        while loose and loose[0] < cutoff:
            loose_here.add(heapq.heappop(loose))
        ack_set = set(acked)
        nack_set = set(nacked)
        frames: list[ConfirmFrame] = []
        seg_acked: list[int] = []
        seg_nacked: list[int] = []
        last_ack: bool | None = None
        for tag in range(self._floor, cutoff):
            if tag in ack_set:
                seg_acked.append(tag)
                last_ack = True
            elif tag in nack_set:
                seg_nacked.append(tag)
                last_ack = False
            elif last_ack is not None and (tag not in loose_here) is not last_ack:
                # Reported earlier as the other kind: no multiple frame may span it.
                frames.extend(coalesce(seg_acked, seg_nacked, tag))
                seg_acked = []
                seg_nacked = []
                last_ack = None
        if smallest is not None:
            seg_acked.extend(s for s in acked if s > smallest)
            seg_nacked.extend(s for s in nacked if s > smallest)
        frames.extend(coalesce(seg_acked, seg_nacked, smallest))
        return frames
