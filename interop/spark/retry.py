"""Which publishing failures a task rides out by reconnecting, and how long it waits between
attempts (pure: no sockets, no clock; time and randomness are passed in).

A failure is *retryable* when a new connection can succeed where the old one failed: the
connection was lost (socket closed or reset, broker shutdown 320, heartbeat or blocked-connection
timeout), the broker is not listening yet, or confirms stopped coming (a frozen broker). Anything
the broker refused on purpose (bad credentials 403, unknown vhost 530, a channel error such as
404 NOT_FOUND, a nack, a return) or a bad row fails the task at once: a retry would fail the same
way.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

import pika.exceptions

__all__ = ["Backoff", "is_retryable_close", "is_retryable_open_error"]

# Reply codes of connection.close after which reconnecting makes sense: 320 CONNECTION_FORCED
# (broker shutting down or restarting) and 541 INTERNAL_ERROR.
RETRYABLE_CONNECTION_CODES = frozenset({320, 541})


def is_retryable_open_error(error: BaseException) -> bool:
    """True when opening a connection failed for a reason a later attempt may not meet.

    Refused or reset TCP connections and aborted handshakes are retryable; authentication
    (403), vhost access (530) and protocol-version failures are not.
    """
    if isinstance(
        error,
        (
            pika.exceptions.AuthenticationError,
            pika.exceptions.ProbableAuthenticationError,
            pika.exceptions.ProbableAccessDeniedError,
            pika.exceptions.IncompatibleProtocolError,
        ),
    ):
        return False
    if isinstance(error, pika.exceptions.ConnectionClosedByBroker):
        return error.reply_code in RETRYABLE_CONNECTION_CODES
    return True


def is_retryable_close(error: BaseException) -> bool:
    """True when an open connection closed for a reason a new connection may not meet."""
    if isinstance(error, pika.exceptions.ConnectionClosedByBroker):
        return error.reply_code in RETRYABLE_CONNECTION_CODES
    return not isinstance(error, pika.exceptions.ConnectionClosedByClient)


@dataclass(slots=True)
class Backoff:
    """Exponential backoff with jitter: ``initial``, doubling up to ``maximum``.

    Each delay is scaled by a random factor in [0.8, 1.2] so that many tasks that lost their
    connections at the same moment do not reconnect in lock step. ``reset()`` after a connection
    succeeds.

    Attributes:
        initial: First delay in seconds.
        maximum: Largest delay in seconds.
        jitter: Returns a float in [0, 1) (``random.random`` unless a test passes its own).
    """

    initial: float = 0.1
    maximum: float = 2.0
    jitter: Callable[[], float] = field(default=random.random)
    _next: float = 0.0

    def delay(self) -> float:
        """The next delay in seconds (and double the one after)."""
        base = self._next or self.initial
        self._next = min(self.maximum, base * 2)
        return base * (0.8 + 0.4 * self.jitter())

    def reset(self) -> None:
        """Start again from ``initial``."""
        self._next = 0.0
