"""The PostgreSQL store: the same promises as the SQLite store, on a shared database.

:class:`PgStore` runs everything on ONE asyncpg connection: the connection that won the
store's advisory lock (persistence/postgres/election.py). Batches, the access tables, the
startup load and the lock checks take turns on it (an anyio lock), so every commit happens
in the session that holds the lock (see the election module for why that fences a deposed
active). Each batch is one transaction (``executemany`` per statement, pipelined by
asyncpg); :meth:`PgStore.apply` returns only after PostgreSQL's COMMIT did, so a confirm or
tx.commit-ok sent after it is a promise the database keeps. A lost connection is not
re-opened: the lock went with it, and the shell stops serving.

Bodies paged out of memory are read back by :class:`persistence.postgres.bodies.PgBodyReader`
on a connection of its own.
"""

from __future__ import annotations

import functools
import gc
import itertools
import logging
import re
from typing import Any

import anyio
import asyncpg

from persistence import access, fieldcodec
from persistence.backend import BodyReaderPort, redact
from persistence.errors import StoreError
from persistence.postgres import election, schema
from persistence.postgres.bodies import PgBodyReader
from persistence.records import (
    Batch,
    BindingDef,
    ExchangeDef,
    MessageRecord,
    OpKind,
    QueueDef,
    QueueKey,
    RecoveredState,
)

__all__ = ["PgStore"]

log = logging.getLogger(__name__)

_QID = "(SELECT id FROM queues WHERE vhost = $1 AND name = $2)"

# The statements of each operation kind (rows as in OpKind, the same as SQLite's).
SQL: dict[OpKind, tuple[str, ...]] = {
    OpKind.DELETE_BINDING: (
        "DELETE FROM bindings WHERE vhost = $1 AND source = $2 AND destination_kind = $3"
        " AND destination = $4 AND routing_key = $5 AND arguments = $6",
    ),
    OpKind.DELETE_QUEUE: (
        f"DELETE FROM messages WHERE queue_id = {_QID}",
        f"DELETE FROM dedup_ids WHERE queue_id = {_QID}",
        "DELETE FROM bindings WHERE vhost = $1 AND destination_kind = 'queue' AND destination = $2",
        "DELETE FROM queues WHERE vhost = $1 AND name = $2",
    ),
    OpKind.DELETE_EXCHANGE: (
        "DELETE FROM bindings WHERE vhost = $1 AND source = $2",
        "DELETE FROM bindings WHERE vhost = $1 AND destination_kind = 'exchange'"
        " AND destination = $2",
        "DELETE FROM exchanges WHERE vhost = $1 AND name = $2",
    ),
    OpKind.PUT_EXCHANGE: (
        "INSERT INTO exchanges (vhost, name, type, auto_delete, internal, arguments)"
        " VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (vhost, name) DO UPDATE SET"
        " type = excluded.type, auto_delete = excluded.auto_delete,"
        " internal = excluded.internal, arguments = excluded.arguments",
    ),
    OpKind.PUT_QUEUE: (
        "INSERT INTO queues (vhost, name, auto_delete, arguments) VALUES ($1, $2, $3, $4)"
        " ON CONFLICT (vhost, name) DO UPDATE"
        " SET auto_delete = excluded.auto_delete, arguments = excluded.arguments",
    ),
    OpKind.PUT_BINDING: (
        "INSERT INTO bindings"
        " (vhost, source, destination_kind, destination, routing_key, arguments)"
        " VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
    ),
    OpKind.DELETE_MESSAGE: (f"DELETE FROM messages WHERE queue_id = {_QID} AND seq = $3",),
    OpKind.INSERT_MESSAGE: (
        # Unknown queue: queue_id NULL fails the batch (NOT NULL), as with SQLite.
        "INSERT INTO messages (queue_id, seq, exchange, routing_key, header, body,"
        f" redelivered, delivery_count, expires_at) VALUES ({_QID}, $3, $4, $5, $6, $7, $8,"
        " $9, $10) ON CONFLICT (queue_id, seq) DO UPDATE SET exchange = excluded.exchange,"
        " routing_key = excluded.routing_key, header = excluded.header, body = excluded.body,"
        " redelivered = excluded.redelivered, delivery_count = excluded.delivery_count,"
        " expires_at = excluded.expires_at",
    ),
    OpKind.MARK_DELIVERED: (
        "UPDATE messages SET redelivered = TRUE, delivery_count = $4"
        f" WHERE queue_id = {_QID} AND seq = $3",
    ),
    OpKind.FORGET_IDS: (f"DELETE FROM dedup_ids WHERE queue_id = {_QID} AND pos <= $3",),
    OpKind.REMEMBER_ID: (
        f"INSERT INTO dedup_ids (queue_id, pos, id) VALUES ({_QID}, $3, $4)"
        " ON CONFLICT (queue_id, pos) DO UPDATE SET id = excluded.id",
    ),
}


@functools.lru_cache(maxsize=64)
def _pg(sql: str) -> str:
    """SQLite's access-table SQL (persistence/access.py) in PostgreSQL's dialect: numbered
    parameters, and ``user`` quoted (a reserved word there). Translated rather than written
    twice, so a table added there needs only its migration here."""
    numbers = itertools.count(1)
    sql = re.sub(r"\?", lambda _: f"${next(numbers)}", sql)
    return re.sub(r"\buser\b", '"user"', sql)


_MESSAGES = (
    "SELECT queue_id, seq, exchange, routing_key, header, body, NULL::integer, redelivered,"
    " delivery_count, expires_at FROM messages WHERE queue_id <> ALL($1::bigint[])"
    " ORDER BY queue_id, seq"
)
_MESSAGES_WINDOWED = (
    "SELECT queue_id, seq, exchange, routing_key, header,"
    " CASE WHEN row_number() OVER (PARTITION BY queue_id ORDER BY seq) <= $2 THEN body END,"
    " octet_length(body), redelivered, delivery_count, expires_at"
    " FROM messages WHERE queue_id <> ALL($1::bigint[]) ORDER BY queue_id, seq"
)
_KEYS = "SELECT seq FROM messages WHERE queue_id = $1 ORDER BY seq"
_PREFETCH = 8192
_LOAD_ERRORS: tuple[type[BaseException], ...] = (*election.CONNECTION_ERRORS, ValueError)
_DEDUP_LIMIT = 65536


class PgStore:
    """The store in one PostgreSQL database. Open it with :meth:`open`."""

    def __init__(self, url: str, conn: Any, lock_key: int = election.LOCK_KEY) -> None:
        """Use :meth:`open` instead."""
        self._url = url
        self._conn = conn
        self._lock_key = lock_key
        self._turn = anyio.Lock()  # one statement sequence at a time on the connection
        self._closed = False
        self._applying = False
        self.created = False  # set by open(): the schema was created, not found

    @property
    def description(self) -> str:
        """The database URL without its password."""
        return redact(self._url)

    @classmethod
    async def open(cls, url: str, conn: Any, lock_key: int = election.LOCK_KEY) -> PgStore:
        """Create or migrate the schema and return the store.

        Args:
            url: The database URL (for logs and the body readers).
            conn: A connection whose session holds the store's lock (election.try_lock).
            lock_key: That lock (``--workers N``: worker K's, election.lock_key).

        Raises:
            StoreError: The database holds tables amqpd did not create, was written by a
                newer amqpd, or the server failed.
        """
        store = cls(url, conn, lock_key)
        try:
            await store._migrate()
        except election.CONNECTION_ERRORS as exc:
            raise StoreError(f"cannot open the store in {redact(url)}: {exc}") from exc
        log.info("opened store %s (PostgreSQL schema %d)", redact(url), schema.SCHEMA_VERSION)
        return store

    async def __aenter__(self) -> PgStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _migrate(self) -> None:
        conn = self._conn
        async with conn.transaction():
            has_version = await conn.fetchval("SELECT to_regclass('schema_version') IS NOT NULL")
            version = 0
            if has_version:
                row = await conn.fetchrow("SELECT application, version FROM schema_version")
                if row is None or row[0] != schema.APPLICATION:
                    raise StoreError(
                        f"{redact(self._url)} has a schema_version table that amqpd did not "
                        "create; amqpd will not touch it. Point --store at another database."
                    )
                version = int(row[1])
            else:
                existing = await conn.fetchval(
                    "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()"
                    " AND tablename = ANY($1::text[])",
                    list(schema.TABLES),
                )
                if existing:
                    raise StoreError(
                        f"{redact(self._url)} already has tables named like amqpd's but no "
                        "schema_version; amqpd will not touch them. Point --store at an "
                        "empty database."
                    )
                await conn.execute(schema.CREATE_VERSION_TABLE)
                await conn.execute(
                    "INSERT INTO schema_version (application, version) VALUES ($1, 0)",
                    schema.APPLICATION,
                )
            if version > schema.SCHEMA_VERSION:
                raise StoreError(
                    f"{redact(self._url)} was written by a newer amqpd (schema {version} > "
                    f"{schema.SCHEMA_VERSION}); upgrade amqpd or point --store elsewhere."
                )
            self.created = version == 0
            for target in range(version + 1, schema.SCHEMA_VERSION + 1):
                for statement in schema.MIGRATIONS[target]:
                    await conn.execute(statement)
                await conn.execute("UPDATE schema_version SET version = $1", target)
                log.info("migrated %s to schema %d", redact(self._url), target)

    async def apply(self, batch: Batch, *, inline: bool = False) -> None:
        """Write a batch in one transaction, committed before this returns (``inline`` is
        the SQLite store's hint; asyncpg's writes are already on the event loop).

        Raises:
            StoreError: PostgreSQL failed (nothing of the batch was written) or the store
                is closed.
            RuntimeError: Another ``apply`` is still in flight.
        """
        if not batch.ops:
            return
        if self._closed:
            raise StoreError(f"store {self.description} is closed")
        if self._applying:
            raise RuntimeError("PgStore.apply called while another apply is in flight")
        self._applying = True
        try:
            with anyio.CancelScope(shield=True):
                await self._write(
                    [(sql, rows) for kind, rows in batch.ops for sql in SQL[kind]],
                    f"could not commit batch {batch.id}",
                )
        finally:
            self._applying = False

    async def _write(self, statements: list[tuple[str, list[Any]]], what: str) -> None:
        async with self._turn:
            conn = self._conn
            try:
                if len(statements) == 1 and statements[0][1] and statements[0][1] != [()]:
                    # One statement (a lone publish, a batch of acks): asyncpg runs all its
                    # rows as one implicit transaction, committed at the protocol's Sync,
                    # before it returns: two round trips fewer than BEGIN ... COMMIT.
                    await conn.executemany(*statements[0])
                    return
                async with conn.transaction():
                    for sql, rows in statements:
                        if rows == [()]:
                            await conn.execute(sql)
                        elif rows:
                            await conn.executemany(sql, rows)
            except election.CONNECTION_ERRORS as exc:
                raise StoreError(f"{what} to {self.description}: {exc}") from exc

    async def load(
        self, body_window: int | None = None, messages: bool = True, keys_only: str = ""
    ) -> RecoveredState:
        """Read everything back from one snapshot (see ``persistence.store.Store.load``).

        Raises:
            StoreError: PostgreSQL failed, a stored definition is corrupt, or the store is
                closed.
        """
        self._check_open()
        try:
            async with self._turn:
                conn = self._conn
                async with conn.transaction(isolation="repeatable_read", readonly=True):
                    return await self._load(conn, body_window, messages, keys_only)
        except _LOAD_ERRORS as exc:
            raise StoreError(f"cannot load {self.description}: {exc}") from exc

    async def _load(
        self, conn: Any, body_window: int | None, load_messages: bool, keys_only: str
    ) -> RecoveredState:
        exchanges = [
            ExchangeDef(r[0], r[1], r[2], r[3], r[4], fieldcodec.decode(r[5]))
            for r in await conn.fetch(
                "SELECT vhost, name, type, auto_delete, internal, arguments FROM exchanges"
                " ORDER BY vhost, name"
            )
        ]
        queue_rows = await conn.fetch(
            "SELECT id, vhost, name, auto_delete, arguments FROM queues ORDER BY vhost, name"
        )
        queues = [QueueDef(r[1], r[2], r[3], fieldcodec.decode(r[4])) for r in queue_rows]
        keys: dict[int, QueueKey] = {r[0]: (r[1], r[2]) for r in queue_rows}
        bindings = [
            BindingDef(r[0], r[1], r[2], r[3], r[4], fieldcodec.decode(r[5]))
            for r in await conn.fetch(
                "SELECT vhost, source, destination_kind, destination, routing_key, arguments"
                " FROM bindings ORDER BY vhost, source, destination_kind, destination,"
                " routing_key, arguments"
            )
        ]
        messages: dict[QueueKey, list[tuple[int, MessageRecord]]] = {}
        if not load_messages:
            return RecoveredState(exchanges, queues, bindings, messages)
        key_ids = [r[0] for r in queue_rows if keys_only and r[2].startswith(keys_only)]
        message_keys: dict[QueueKey, list[int]] = {}
        for queue_id in key_ids:
            message_keys[keys[queue_id]] = [r[0] for r in await conn.fetch(_KEYS, queue_id)]
        if body_window is None:
            cursor = conn.cursor(_MESSAGES, key_ids, prefetch=_PREFETCH)
        else:
            cursor = conn.cursor(_MESSAGES_WINDOWED, key_ids, body_window, prefetch=_PREFETCH)
        gc_was_enabled = gc.isenabled()
        gc.disable()  # long-lived records: collecting while building them is wasted
        try:
            dedup: dict[Any, Any] = {}
            d = dedup.setdefault
            last_id: int | None = None
            out: list[tuple[int, MessageRecord]] | None = None
            async for qid, seq, ex, rk, hd, body, size, red, count, exp in cursor:
                if qid != last_id:
                    last_id = qid
                    key = keys.get(qid)
                    if key is None:
                        log.warning("ignoring messages of unknown queue id %d", qid)
                        out = None
                    else:
                        out = messages.setdefault(key, [])
                    if len(dedup) > _DEDUP_LIMIT:
                        dedup.clear()
                if out is None:
                    continue
                if body is None:
                    record = MessageRecord(d(ex, ex), d(rk, rk), d(hd, hd), b"", red, count, exp)
                    record.body_size = size
                else:
                    record = MessageRecord(d(ex, ex), d(rk, rk), d(hd, hd), body, red, count, exp)
                out.append((seq, record))
        finally:
            if gc_was_enabled:
                gc.enable()
        dedup_ids: dict[QueueKey, list[tuple[int, bytes]]] = {}
        for qid, pos, dedup_id in await conn.fetch(
            "SELECT queue_id, pos, id FROM dedup_ids ORDER BY queue_id, pos"
        ):
            key = keys.get(qid)
            if key is not None:
                dedup_ids.setdefault(key, []).append((pos, bytes(dedup_id)))
        return RecoveredState(exchanges, queues, bindings, messages, dedup_ids, message_keys)

    async def load_access(self) -> access.AccessState:
        """Read the users, vhosts and permissions (one snapshot).

        Raises:
            StoreError: PostgreSQL failed or the store is closed.
        """
        self._check_open()
        try:
            async with self._turn:
                conn = self._conn
                async with conn.transaction(isolation="repeatable_read", readonly=True):
                    rows = {
                        key: list(await conn.fetch(_pg(sql)))
                        for key, sql in access.LOAD_SQL.items()
                    }
        except election.CONNECTION_ERRORS as exc:
            raise StoreError(f"cannot load access control from {self.description}: {exc}") from exc
        return access.rows_to_state(rows)

    async def save_access(self, state: access.AccessState) -> None:
        """Replace the stored users, vhosts and permissions in one transaction.

        Raises:
            StoreError: PostgreSQL failed (nothing was changed) or the store is closed.
            RuntimeError: An ``apply`` is in flight.
        """
        self._check_open()
        if self._applying:
            raise RuntimeError("PgStore.save_access called while an apply is in flight")
        statements = [(_pg(sql), rows) for sql, rows in access.state_to_statements(state)]
        with anyio.CancelScope(shield=True):
            await self._write(statements, "cannot save access control")

    async def reclaim(self) -> bool:
        """Nothing to do: PostgreSQL's autovacuum gives dead rows' space back."""
        return False

    async def holds_lock(self, timeout: float) -> bool:
        """Whether this store's session still holds the store's lock (False if the
        connection failed or the check took longer than ``timeout`` seconds)."""
        if self._closed:
            return False
        with anyio.move_on_after(timeout):
            async with self._turn:
                try:
                    return await election.holds_lock(self._conn, timeout, self._lock_key)
                except election.CONNECTION_ERRORS as exc:
                    log.error("checking the store lock failed: %s", exc)
                    return False
        return False

    async def load_placement(self) -> str | None:
        """The recorded placement of a ``--workers N`` node (JSON; None: none yet)."""
        async with self._turn:
            try:
                found = await self._conn.fetchval("SELECT document FROM worker_placement")
            except election.CONNECTION_ERRORS as exc:
                raise StoreError(
                    f"cannot read the placement from {self.description}: {exc}"
                ) from exc
        return None if found is None else str(found)

    async def first_queue_beyond(self, workers: int) -> tuple[int, str, str] | None:
        """A queue (worker, vhost, name) in the schema of a worker ``workers`` or above
        (``amqpd_shard_K``: a spread vhost's queue declared there) of a ``--workers N``
        node; None if there is none, so a node of ``workers`` serves every queue."""
        prefix = schema.SHARD_SCHEMA_PREFIX
        async with self._turn:
            try:
                rows = await self._conn.fetch(
                    "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)", prefix
                )
                names = (str(row[0]).removeprefix(prefix) for row in rows)
                beyond = sorted(
                    (int(name) for name in names if name.isdigit() and int(name) >= workers),
                    reverse=True,
                )
                for index in beyond:
                    try:
                        found = await self._conn.fetchrow(
                            f'SELECT vhost, name FROM "{prefix}{index}".queues ORDER BY id LIMIT 1'
                        )
                    except asyncpg.UndefinedTableError:
                        continue  # a schema its worker never finished creating
                    if found is not None:
                        return index, str(found[0]), str(found[1])
            except election.CONNECTION_ERRORS as exc:
                raise StoreError(
                    f"cannot read the workers' schemas from {self.description}: {exc}"
                ) from exc
        return None

    async def save_placement(self, document: str) -> None:
        """Record the placement of a ``--workers N`` node (amqpd/shell/workers/placement.py)."""
        await self._write(
            [
                (
                    "INSERT INTO worker_placement (document) VALUES ($1)"
                    " ON CONFLICT (single) DO UPDATE SET document = excluded.document",
                    [(document,)],
                )
            ],
            "could not record the placement",
        )

    def abort(self) -> None:
        """Drop the connection now (the lock is lost or being given up); later calls fail."""
        self._closed = True
        self._conn.terminate()

    def body_reader(self) -> BodyReaderPort:
        """A new synchronous body reader on a connection of its own (blocks to connect)."""
        return PgBodyReader(self._url)

    async def close(self) -> None:
        """Close the connection, which releases the store's lock. Idempotent."""
        if self._closed:
            if not self._conn.is_closed():
                self._conn.terminate()
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            try:
                with anyio.fail_after(5):
                    await self._conn.close()
            except election.CONNECTION_ERRORS:
                self._conn.terminate()
        log.info("closed store %s", self.description)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"store {self.description} is closed")
