"""An insertion-ordered, reference-counted set of destinations.

Used wherever several bindings can lead to the same destination through the
same routing pattern (same key, different arguments; or any key for fanout).
A destination stays in the set while at least one such binding exists, and
keeps the position it got when it first entered.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from exchanges.base import Destination

__all__ = ["DestinationSet"]

# Global, monotonically increasing admission stamps. Sets inside one router use
# them to merge their members in first-bound order (see TopicTrie).
_STAMPS = itertools.count()


class DestinationSet:
    """Ordered set of destinations with a reference count per destination.

    :meth:`snapshot` returns a cached list that is rebuilt (never mutated) after
    a membership change, so lists handed out earlier stay valid.
    """

    __slots__ = ("_entries", "_snapshot")

    def __init__(self) -> None:
        """Create an empty set."""
        # destination -> [admission stamp, reference count]
        self._entries: dict[Destination, list[int]] = {}
        self._snapshot: list[Destination] | None = None

    def add(self, destination: Destination) -> bool:
        """Take a reference on ``destination``.

        Args:
            destination: The destination.

        Returns:
            True if the destination was not a member before.
        """
        entry = self._entries.get(destination)
        if entry is not None:
            entry[1] += 1
            return False
        self._entries[destination] = [next(_STAMPS), 1]
        self._snapshot = None
        return True

    def release(self, destination: Destination) -> bool:
        """Drop a reference on ``destination``.

        Args:
            destination: The destination.

        Returns:
            True if the destination left the set (last reference dropped).
        """
        entry = self._entries.get(destination)
        if entry is None:
            return False
        if entry[1] > 1:
            entry[1] -= 1
            return False
        del self._entries[destination]
        self._snapshot = None
        return True

    def snapshot(self) -> list[Destination]:
        """Return the members in admission order.

        Returns:
            A shared list; callers must not mutate it.
        """
        snapshot = self._snapshot
        if snapshot is None:
            snapshot = self._snapshot = list(self._entries)
        return snapshot

    def stamped(self) -> Iterator[tuple[int, Destination]]:
        """Iterate over ``(admission stamp, destination)`` pairs.

        Yields:
            One pair per member; stamps are unique across all sets.
        """
        for destination, entry in self._entries.items():
            yield entry[0], destination

    def __len__(self) -> int:
        """Return the number of distinct members."""
        return len(self._entries)

    def __bool__(self) -> bool:
        """Return True if the set has members."""
        return bool(self._entries)
