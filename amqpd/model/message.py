"""The message record and its per-queue entry."""

from __future__ import annotations

import math

from pamqp.common import FieldTable

from amqpd.wire.content_header import decode_headers_table


class Message:
    """One published message, shared by every queue it was routed to.

    The content header is kept as the raw payload the publisher sent and forwarded unchanged;
    ``exchange_raw``/``routing_key_raw`` are the wire shortstrs (length byte included).
    """

    __slots__ = (
        "_headers",
        "body",
        "body_size",
        "exchange",
        "exchange_raw",
        "expiration",
        "header",
        "headers_raw",
        "persistent",
        "priority",
        "refs",
        "routing_key",
        "routing_key_raw",
    )

    def __init__(
        self,
        exchange: str,
        routing_key: str,
        exchange_raw: bytes,
        routing_key_raw: bytes,
        header: bytes,
        body: bytes | None,
        persistent: bool,
        priority: int | None = None,
        expiration: str | None = None,
        headers_raw: bytes | None = None,
    ) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.exchange_raw = exchange_raw
        self.routing_key_raw = routing_key_raw
        self.header = header
        # None while paged out to the store (long durable queues); see model/paging.py
        self.body = body
        self.body_size = len(body) if body is not None else 0
        self.refs = 0  # queues holding it; only a message held by one queue is paged out
        self.persistent = persistent
        self.priority = priority
        self.expiration = expiration
        self.headers_raw = headers_raw
        self._headers: FieldTable | None = None

    @property
    def payload(self) -> bytes:
        """The body; only valid while it is in memory (queues page it in before delivery)."""
        body = self.body
        assert body is not None, "message body is paged out"
        return body

    def reset_headers(self) -> None:
        """Forget the decoded headers after ``headers_raw`` changed."""
        self._headers = None

    @property
    def headers(self) -> FieldTable | None:
        """The decoded ``headers`` property (decoded on first use only)."""
        if self._headers is None and self.headers_raw is not None:
            self._headers = decode_headers_table(self.headers_raw)
        return self._headers


class QueueEntry:
    """A message's place in one queue: its position (for requeue order) and flags.

    ``stored`` is True when the entry was journaled (persistent message in a durable queue):
    every later change of it (delivered, acked, dropped) is journaled too. ``hold`` is the
    storage batch a promised entry (its publisher waits for a confirm or tx.commit-ok) waits
    for before it may be delivered, 0 if none (amqpd/model/held.py).
    """

    __slots__ = ("delivery_count", "expires_at", "hold", "message", "redelivered", "seq", "stored")

    def __init__(self, message: Message, seq: int) -> None:
        self.message = message
        self.seq = seq
        self.redelivered = False
        self.stored = False
        self.hold = 0
        self.delivery_count = 0
        self.expires_at: float | None = None  # unix time (message TTL), persisted


class Clock:
    """The broker's notion of now (unix seconds), set by the I/O shell before it hands the
    core any input; the core itself never reads a clock.

    ``wake_at`` is the core's next deadline: the earliest time a timer (a queue head's
    message TTL, x-expires, a heartbeat, a handshake or close timeout) wants the shell to
    run the core's ``tick``. The core lowers it with `wake` whenever it learns of an earlier
    deadline; the shell reads it after each input, sleeps until then (at most its tick
    interval) and resets it to infinity just before ticking, and the tick announces every
    deadline still pending. One float, no per-message timers.
    """

    __slots__ = ("now", "wake_at")

    def __init__(self, now: float = 0.0) -> None:
        self.now = now
        self.wake_at = math.inf

    def wake(self, when: float) -> None:
        """Ask for a tick at ``when`` (earlier requests win)."""
        if when < self.wake_at:
            self.wake_at = when
