"""The delay before a failed link connects again (shovels and federation links).

`Backoff` starts at the configured delay (an upstream's ``reconnect-delay``), doubles it
after each run that failed within `STABLE_AFTER` seconds, never goes beyond `MAX_BACKOFF`
(nor under the configured delay), and starts over after a run that lasted.
"""

from __future__ import annotations

import time
from typing import Final

__all__ = ["MAX_BACKOFF", "STABLE_AFTER", "Backoff"]

MAX_BACKOFF: Final = 30.0  # seconds between reconnection attempts, at most
STABLE_AFTER: Final = 10.0  # a run this long resets the back-off


class Backoff:
    """Reconnection delays for one link (see the module's docstring)."""

    def __init__(self, base: float) -> None:
        self.base = base
        self._delay = base
        self._started = time.monotonic()

    def started(self) -> None:
        """A run (connection attempt) starts now."""
        self._started = time.monotonic()

    def next_delay(self) -> float:
        """The delay before the next attempt, after the run that just ended."""
        if time.monotonic() - self._started >= STABLE_AFTER:
            self._delay = self.base
        delay = self._delay
        self._delay = max(min(delay * 2, MAX_BACKOFF), self.base)
        return delay
