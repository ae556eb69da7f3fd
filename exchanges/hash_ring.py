"""A weighted consistent-hash ring: which member owns a 64-bit key hash.

Theory of operation
-------------------
Every member appears on a ring of 64-bit positions at ``weight * POINTS_PER_WEIGHT``
points; a key belongs to the member owning the first point at or after the key's hash
(wrapping round). A point's position is the hash of the member's *label* and the point's
number, so it depends on nothing else: the same members give the same ring in every
process and after every restart, whatever the order they were added in. Adding a member
only takes the arcs its new points cut out of the others; removing one hands only its own
arcs to their successors: every other key keeps its member (the property the
x-consistent-hash exchange promises). With 256 points per unit of weight a member's share
is within a few per cent of its weight's share (a relative spread of about 1/sqrt(points)).

RabbitMQ's plugin numbers buckets 0..N-1 and picks one with jump consistent hashing; its
removal renumbers the buckets after the removed ones, which moves keys between the
remaining queues too. LavinMQ's ring hashes ``name.i`` for i < weight. This ring is the
latter with more points per unit, so that weight-1 bindings get even shares.

Positions are kept in one sorted list (``bisect`` finds the owner) with a parallel list of
owners; both are rebuilt (a merge of sorted runs) when a member joins or leaves, never on
the routing path.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Hashable
from hashlib import blake2b
from typing import Final
from zlib import crc32

__all__ = ["MAX_WEIGHT", "POINTS_PER_WEIGHT", "HashRing", "key_hash"]

POINTS_PER_WEIGHT: Final = 256
MAX_WEIGHT: Final = 1000
"""Weights above this count as this much on the ring (bounds memory: 256,000 points)."""
_SALT: Final = 0x9E3779B9
_MASK: Final = (1 << 64) - 1


def key_hash(key: bytes) -> int:
    """The 64-bit ring position of a message's key, computed on every routed message.

    CRC-32 of the key, spread over 64 bits by CPython's hash of an int tuple (an xxHash
    round): two C calls, about a third of the cost of BLAKE2b, and as even on the ring
    (tests/unit/test_hash_exchanges.py). Neither is salted per process (only str and bytes
    hashes are), so a key reaches the same queue in every process and after a restart.
    """
    return hash((crc32(key), _SALT)) & _MASK


def _point_hash(data: bytes) -> int:
    """The ring position of a member's point (BLAKE2b: computed only when binding)."""
    return int.from_bytes(blake2b(data, digest_size=8).digest(), "big")


class HashRing:
    """Members with weights on a hash ring (see the module comment)."""

    __slots__ = ("_members", "_owners", "_positions")

    def __init__(self) -> None:
        """Create an empty ring."""
        # member -> its sorted positions
        self._members: dict[Hashable, list[int]] = {}
        self._positions: list[int] = []
        self._owners: list[Hashable] = []

    def add(self, member: Hashable, label: str, weight: int) -> None:
        """Put ``member`` on the ring (replacing it if present).

        Args:
            member: The owner returned by `owner`.
            label: A stable name of the member; its points are derived from it.
            weight: Relative share (1 or more; capped at `MAX_WEIGHT`).
        """
        if member in self._members:
            self.remove(member)
        count = min(max(weight, 1), MAX_WEIGHT) * POINTS_PER_WEIGHT
        prefix = label.encode() + b"\x00"
        points = sorted(_point_hash(prefix + str(i).encode()) for i in range(count))
        self._members[member] = points
        self._rebuild()

    def remove(self, member: Hashable) -> bool:
        """Take ``member`` off the ring; False if it was not on it."""
        if self._members.pop(member, None) is None:
            return False
        self._rebuild()
        return True

    def __contains__(self, member: object) -> bool:
        """True if ``member`` is on the ring."""
        return member in self._members

    def __len__(self) -> int:
        """The number of members."""
        return len(self._members)

    @property
    def positions(self) -> list[int]:
        """Every point's position, ascending (a shared list: do not mutate)."""
        return self._positions

    @property
    def owners(self) -> list[Hashable]:
        """The member owning each point of `positions` (a shared list: do not mutate)."""
        return self._owners

    def owner(self, position: int) -> Hashable | None:
        """The member owning ``position`` (a `key_hash`), or None on an empty ring."""
        positions = self._positions
        if not positions:
            return None
        index = bisect_left(positions, position)
        if index == len(positions):
            index = 0
        return self._owners[index]

    def _rebuild(self) -> None:
        # Sort (position, tie-break by label order of insertion) pairs; Timsort merges the
        # already-sorted runs of each member in linear-ish time.
        pairs = sorted(
            (position, order, member)
            for order, (member, points) in enumerate(self._members.items())
            for position in points
        )
        self._positions = [pair[0] for pair in pairs]
        self._owners = [pair[2] for pair in pairs]
