"""Synchronous reads of committed message bodies from PostgreSQL, for paging.

The core reads bodies inline through its ``BodyLoader`` port (docs/architecture.md,
"Persistence"): a delivery frame cannot be built before its body is there. SQLite answers
from a local file; here a page of bodies is one query to the database server. This reader
owns one asyncpg connection on a private thread with its own event loop, and
:meth:`PgBodyReader.read_bodies` blocks the calling (event loop) thread for that one round
trip, as SQLite's reader blocks for its file read. One driver for the whole backend, and a
page of 1024 bodies per query keeps the cost per message small.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from persistence.errors import StoreError
from persistence.postgres import election
from persistence.records import QueueKey

__all__ = ["PgBodyReader"]

T = TypeVar("T")

_READ_BODIES = (
    "SELECT seq, body FROM messages WHERE queue_id ="
    " (SELECT id FROM queues WHERE vhost = $1 AND name = $2) AND seq > $3 ORDER BY seq LIMIT $4"
)
_READ_MESSAGES = (
    "SELECT seq, exchange, routing_key, header, body FROM messages WHERE queue_id ="
    " (SELECT id FROM queues WHERE vhost = $1 AND name = $2) AND seq > $3 ORDER BY seq LIMIT $4"
)
_TIMEOUT = 5.0  # the event loop waits this long at most (a page takes milliseconds)


class PgBodyReader:
    """Read-only, synchronous access to committed bodies (a page at a time)."""

    def __init__(self, url: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="amqpd-pg-bodies", daemon=True
        )
        self._thread.start()
        self._url = url
        self._conn: Any = None
        try:
            self._conn = self._call(election.connect(url, timeout=_TIMEOUT - 1))
        except BaseException as exc:
            self.close()
            if isinstance(exc, TimeoutError):
                raise StoreError(f"cannot connect the body reader to PostgreSQL: {exc}") from exc
            raise

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(_TIMEOUT)

    def read_bodies(self, queue: QueueKey, after_seq: int, limit: int) -> list[tuple[int, bytes]]:
        """``(seq, body)`` of up to ``limit`` committed messages with ``seq > after_seq``.

        Raises:
            StoreError: The query failed (the connection is re-opened on the next call).
        """
        rows = self._fetch(_READ_BODIES, queue, after_seq, limit)
        return [(row[0], row[1]) for row in rows]

    def read_messages(
        self, queue: QueueKey, after_seq: int, limit: int
    ) -> list[tuple[int, str, str, bytes, bytes]]:
        """``(seq, exchange, routing_key, header, body)`` of up to ``limit`` committed
        messages with ``seq > after_seq``.

        Raises:
            StoreError: The query failed (the connection is re-opened on the next call).
        """
        rows = self._fetch(_READ_MESSAGES, queue, after_seq, limit)
        return [(row[0], row[1], row[2], row[3], row[4]) for row in rows]

    def _fetch(self, sql: str, queue: QueueKey, after_seq: int, limit: int) -> list[Any]:
        try:
            if self._conn is None or self._conn.is_closed():
                self._conn = None
                self._conn = self._call(election.connect(self._url, timeout=5))
            rows: list[Any] = self._call(
                self._conn.fetch(sql, queue[0], queue[1], after_seq, limit)
            )
        except StoreError:
            raise
        except Exception as exc:  # the driver's errors, a timeout: the next call reconnects
            self._drop()
            raise StoreError(f"cannot read message bodies of {queue}: {exc}") from exc
        return rows

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._loop.call_soon_threadsafe(conn.terminate)

    def close(self) -> None:
        """Close the connection and stop the thread. Idempotent."""
        if self._conn is not None:
            conn, self._conn = self._conn, None
            try:
                self._call(conn.close(timeout=5))
            except Exception:
                conn.terminate()
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
        if not self._loop.is_running() and not self._loop.is_closed():
            self._loop.close()
