"""Confirms that wait for other workers (issue 26 stage 2: docs/multicore.md "Confirms").

Theory of operation
-------------------
With a vhost's queues on several workers, a publish may have copies on the publishing
worker (settled by its own storage batch) and on other workers (settled when that worker's
`SETTLED` record covers the publish id it was forwarded under, amqpd/wire/forwarding.py).
RabbitMQ's rule holds per copy: the publisher's confirm is an ack once *every* copy is
settled, and a nack as soon as *one* copy is refused (reject-publish, a failed commit, a
worker lost), after which the other copies' answers are ignored: a publish is reported
exactly once.

`ShardConfirms` does that join for one worker. `expect(key, parts)` opens a publish that
waits for ``parts`` answers; ``key`` is whatever the caller uses to find the publish again
(the worker keys by (channel, sequence number) and hands the verdicts to that channel's
`ConfirmTracker`). `forwarded(link, publish_id, key)` records that one of the parts is the
copy sent over ``link`` under ``publish_id`` (with ``sole=True`` and no `expect`: the only
copy, the common case of a queue on one other worker, which skips the count);
`local_done(key, ok)` answers the local part.
`settled(link, through, refused)` answers every part sent over ``link`` up to ``through``
at once: ids on a link are ascending, so its waits are a FIFO and a batch costs one pop
per publish. `lost(link)` refuses every part still waiting on a link (the worker at its
other end died: RabbitMQ nacks what a crashed queue had not confirmed).

Every call returns the publishes it decided, as (key, ack) pairs, in the order decided.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable

__all__ = ["ShardConfirms"]


class ShardConfirms:
    """The publishes of one worker that wait for more than their own storage batch."""

    __slots__ = ("_links", "_open")

    def __init__(self) -> None:
        self._open: dict[Hashable, int] = {}  # key -> answers still to come
        # per link, FIFO: (publish id, key, whether that copy is the publish's only one)
        self._links: dict[int, deque[tuple[int, Hashable, bool]]] = {}

    def expect(self, key: Hashable, parts: int) -> None:
        """Open a publish that is settled once ``parts`` answers (all ok) arrived.

        Raises:
            ValueError: ``key`` is open already, or ``parts`` is not positive.
        """
        if parts < 1:
            raise ValueError(f"a publish waits for at least one answer, not {parts}")
        if key in self._open:
            raise ValueError(f"publish {key!r} is waiting already")
        self._open[key] = parts

    def forwarded(self, link: int, publish_id: int, key: Hashable, sole: bool = False) -> None:
        """One part of ``key`` is the copy sent over ``link`` as ``publish_id``; ``sole``:
        the only part (then ``key`` was not opened with `expect`).

        Raises:
            ValueError: ``publish_id`` is not above the link's previous one.
        """
        waits = self._links.get(link)
        if waits is None:
            waits = self._links[link] = deque()
        elif waits and waits[-1][0] >= publish_id:
            raise ValueError(f"publish id {publish_id} after {waits[-1][0]} on link {link}")
        waits.append((publish_id, key, sole))

    def local_done(self, key: Hashable, ok: bool) -> list[tuple[Hashable, bool]]:
        """The local copy of ``key`` is settled (``ok``) or refused."""
        decided: list[tuple[Hashable, bool]] = []
        self._answer(key, ok, decided)
        return decided

    def settled(
        self, link: int, through: int, refused: Iterable[int] = ()
    ) -> list[tuple[Hashable, bool]]:
        """Every copy sent over ``link`` up to ``through`` is settled, but ``refused``."""
        decided: list[tuple[Hashable, bool]] = []
        waits = self._links.get(link)
        if not waits:
            return decided
        no = set(refused)
        while waits and waits[0][0] <= through:
            publish_id, key, sole = waits.popleft()
            if sole:
                decided.append((key, publish_id not in no))
            else:
                self._answer(key, publish_id not in no, decided)
        return decided

    def lost(self, link: int) -> list[tuple[Hashable, bool]]:
        """The worker at the other end of ``link`` is gone: refuse what waits on it."""
        decided: list[tuple[Hashable, bool]] = []
        for _publish_id, key, sole in self._links.pop(link, ()):
            if sole:
                decided.append((key, False))
            else:
                self._answer(key, False, decided)
        return decided

    def waiting(self) -> int:
        """How many publishes are still undecided."""
        sole = sum([1 for waits in self._links.values() for _id, _key, only in waits if only])
        return len(self._open) + sole

    def _answer(self, key: Hashable, ok: bool, decided: list[tuple[Hashable, bool]]) -> None:
        left = self._open.get(key)
        if left is None:
            return  # decided already (refused by another part): reported once
        if not ok:
            del self._open[key]
            decided.append((key, False))
        elif left == 1:
            del self._open[key]
            decided.append((key, True))
        else:
            self._open[key] = left - 1
