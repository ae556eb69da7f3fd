"""Per-channel bookkeeping of unconfirmed publishes (RabbitMQ's ``rabbit_confirms``).

Theory of operation
-------------------
The channel numbers publishes 1, 2, 3, ... and calls :meth:`ConfirmTracker.track`
with the tokens (usually queues) that must each take responsibility before the
publish may be acked. ``_pending`` maps each unsettled number to what it still
waits for: one bare token in the common one-queue case (no set is allocated), or a
``set`` of tokens. A ``set`` can never be a token because it is not hashable, so
the two are told apart by type.

Settling the last token moves the number out of ``_pending`` into ``_acked``;
:meth:`~ConfirmTracker.reject` moves it into ``_nacked`` at once. Both lists only
collect numbers until :meth:`~ConfirmTracker.take_frames` hands them to
:func:`~confirms.coalesce.coalesce` and starts new lists. A number leaves
``_pending`` exactly once, so it is reported exactly once, as ack or nack.

Two watermarks keep everything amortized O(1) per publish:

* ``_low``: every number below it is settled. ``smallest_unconfirmed`` moves it
  up while the number under it is settled. It never moves down, so a number is
  stepped over once in total. ``next(iter(dict))`` is not used because it degrades
  after many deletions at the front of a dict.
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
from collections.abc import Hashable, Iterable

from confirms.coalesce import ConfirmFrame, coalesce

__all__ = ["ConfirmTracker"]

_MISSING = object()


class ConfirmTracker:
    """One per channel in confirm mode.

    Sequence numbers are assigned by the channel from 1 upward, in order. Not
    thread-safe; performs no I/O.
    """

    __slots__ = ("_acked", "_floor", "_loose_nacks", "_low", "_nacked", "_next", "_pending")

    def __init__(self) -> None:
        """Create an empty tracker; the first tracked number must be 1."""
        self._pending: dict[int, object] = {}
        self._acked: list[int] = []
        self._nacked: list[int] = []
        self._next = 1
        self._low = 1
        self._floor = 1
        self._loose_nacks: list[int] = []

    def track(self, seq: int, waiting_for: Iterable[Hashable]) -> None:
        """Register a publish that is unconfirmed until every token has settled.

        Args:
            seq: The publish sequence number; must be one more than the previous
                one (1 for the first).
            waiting_for: Tokens (e.g. queues) that must each settle. Duplicates count
                once. Empty means settled at once (ack), e.g. unroutable, or only
                delivered to transient queues.

        Raises:
            ValueError: If ``seq`` is not the next sequence number.
        """
        if seq != self._next:
            raise ValueError(f"expected sequence number {self._next}, got {seq}")
        self._next = seq + 1
        tokens = set(waiting_for)
        if not tokens:
            self._acked.append(seq)
        elif len(tokens) == 1:
            self._pending[seq] = tokens.pop()
        else:
            self._pending[seq] = tokens

    def settle(self, seq: int, token: Hashable) -> None:
        """Record that ``token`` took responsibility for ``seq``.

        When the last token settles, ``seq`` becomes acked. An unknown, already
        settled or rejected ``seq``, or a token it is not waiting for, is ignored.

        Args:
            seq: The publish sequence number.
            token: The token that settled.
        """
        pending = self._pending
        waiting = pending.get(seq, _MISSING)
        if waiting is _MISSING:
            return
        if type(waiting) is set:
            waiting.discard(token)
            if waiting:
                return
        elif waiting != token:
            return
        del pending[seq]
        self._acked.append(seq)

    def settle_token(self, token: Hashable, seqs: Iterable[int]) -> None:
        """Settle ``token`` for each of ``seqs`` (bulk form of :meth:`settle`).

        Args:
            token: The token that settled, e.g. a queue after a group commit.
            seqs: The sequence numbers it took responsibility for.
        """
        pending = self._pending
        acked = self._acked
        for seq in seqs:
            waiting = pending.get(seq, _MISSING)
            if waiting is _MISSING:
                continue
            if type(waiting) is set:
                waiting.discard(token)
                if waiting:
                    continue
            elif waiting != token:
                continue
            del pending[seq]
            acked.append(seq)

    def remove_token(self, token: Hashable) -> None:
        """Settle ``token`` for every publish still waiting on it.

        This is RabbitMQ's ``remove_queue``: a queue that is deleted confirms (acks,
        not nacks) what it still held. Costs O(unconfirmed).

        Args:
            token: The token that went away.
        """
        pending = self._pending
        done: list[int] = []
        for seq, waiting in pending.items():
            if type(waiting) is set:
                waiting.discard(token)
                if not waiting:
                    done.append(seq)
            elif waiting == token:
                done.append(seq)
        for seq in done:
            del pending[seq]
        self._acked.extend(done)

    def reject(self, seq: int) -> None:
        """Nack ``seq``: the broker cannot take responsibility for it.

        Its remaining tokens are dropped and a later :meth:`settle` is ignored. An
        unknown or already settled ``seq`` is ignored, so a publish is never both
        acked and nacked.

        Args:
            seq: The publish sequence number.
        """
        if self._pending.pop(seq, _MISSING) is not _MISSING:
            self._nacked.append(seq)

    def nack_all(self) -> None:
        """Reject every unconfirmed publish (e.g. on a storage failure)."""
        pending = self._pending
        if pending:
            self._nacked.extend(pending)
            pending.clear()

    @property
    def unconfirmed(self) -> int:
        """Number of tracked publishes not yet settled."""
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
