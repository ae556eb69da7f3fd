"""The durable store: one SQLite database (via aiosqlite) per data directory.

:class:`Store` applies journal batches, one transaction each, and loads everything back at
startup. It owns two aiosqlite connections (each runs its statements on its own thread):

* the *writer*, which only runs :meth:`Store.apply` transactions, one at a time;
* the *reader* (``query_only``), for :meth:`Store.load` and :meth:`Store.load_access`.
  WAL gives it a snapshot of committed data only, so a read never sees half of a batch
  that the writer is in the middle of, and never waits for it.

The data directory is locked (``flock`` on ``amqpd.lock``) while a store is open, so two
brokers cannot share it.
"""

from __future__ import annotations

import gc
import logging
import os
import sqlite3
import sys
from collections.abc import Iterable
from itertools import groupby
from operator import itemgetter
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import aiosqlite
import anyio

from persistence import access, fieldcodec, schema
from persistence.errors import StoreError
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

__all__ = ["Store", "StoreError"]

log = logging.getLogger(__name__)

LOCK_FILENAME = "amqpd.lock"

_QID = "(SELECT id FROM queues WHERE vhost = ?1 AND name = ?2)"

# The statements of each operation kind, run in order with the same rows (see OpKind for the
# row layouts). Numbered parameters let one row feed several statements.
_SQL: dict[OpKind, tuple[str, ...]] = {
    OpKind.DELETE_BINDING: (
        "DELETE FROM bindings WHERE vhost = ? AND source = ? AND destination_kind = ?"
        " AND destination = ? AND routing_key = ? AND arguments = ?",
    ),
    OpKind.DELETE_QUEUE: (
        f"DELETE FROM messages WHERE queue_id = {_QID}",
        f"DELETE FROM dedup_ids WHERE queue_id = {_QID}",
        "DELETE FROM bindings WHERE vhost = ?1 AND destination_kind = 'queue' AND destination = ?2",
        "DELETE FROM queues WHERE vhost = ?1 AND name = ?2",
    ),
    OpKind.DELETE_EXCHANGE: (
        "DELETE FROM bindings WHERE vhost = ?1 AND source = ?2",
        "DELETE FROM bindings WHERE vhost = ?1 AND destination_kind = 'exchange'"
        " AND destination = ?2",
        "DELETE FROM exchanges WHERE vhost = ?1 AND name = ?2",
    ),
    OpKind.PUT_EXCHANGE: (
        "INSERT OR REPLACE INTO exchanges (vhost, name, type, auto_delete, internal, arguments)"
        " VALUES (?, ?, ?, ?, ?, ?)",
    ),
    OpKind.PUT_QUEUE: (
        # An upsert, not REPLACE: the queue keeps its id and with it its messages.
        "INSERT INTO queues (vhost, name, auto_delete, arguments) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (vhost, name) DO UPDATE"
        " SET auto_delete = excluded.auto_delete, arguments = excluded.arguments",
    ),
    OpKind.PUT_BINDING: (
        "INSERT OR IGNORE INTO bindings"
        " (vhost, source, destination_kind, destination, routing_key, arguments)"
        " VALUES (?, ?, ?, ?, ?, ?)",
    ),
    OpKind.DELETE_MESSAGE: (f"DELETE FROM messages WHERE queue_id = {_QID} AND seq = ?3",),
    OpKind.INSERT_MESSAGE: (
        # A message for a queue that is not stored gets queue_id NULL and fails the batch
        # (NOT NULL): that is a bug in the caller, not something to drop silently.
        "INSERT OR REPLACE INTO messages (queue_id, seq, exchange, routing_key, header, body,"
        f" redelivered, delivery_count, expires_at) VALUES ({_QID}, ?3, ?4, ?5, ?6, ?7, ?8,"
        " ?9, ?10)",
    ),
    OpKind.MARK_DELIVERED: (
        "UPDATE messages SET redelivered = 1, delivery_count = ?4"
        f" WHERE queue_id = {_QID} AND seq = ?3",
    ),
    OpKind.FORGET_IDS: (f"DELETE FROM dedup_ids WHERE queue_id = {_QID} AND pos <= ?3",),
    OpKind.REMEMBER_ID: (
        f"INSERT OR REPLACE INTO dedup_ids (queue_id, pos, id) VALUES ({_QID}, ?3, ?4)",
    ),
}
_LOAD_DEDUP_IDS = "SELECT queue_id, pos, id FROM dedup_ids ORDER BY queue_id, pos"

_MESSAGE_COLUMNS = (
    "seq, exchange, routing_key, header, body, redelivered, delivery_count, expires_at"
)
# {}: the WHERE clause that leaves out the queues loaded as keys only
_LOAD_MESSAGES = f"SELECT queue_id, {_MESSAGE_COLUMNS} FROM messages{{}} ORDER BY queue_id, seq"
_LOAD_KEYS = "SELECT seq FROM messages WHERE queue_id = ? ORDER BY seq"
# The same, with the body only for the first ?1 messages of each queue (the rest: its size).
_LOAD_MESSAGES_WINDOWED = (
    "SELECT queue_id, seq, exchange, routing_key, header,"
    " CASE WHEN row_number() OVER (PARTITION BY queue_id ORDER BY seq) <= ?1"
    " THEN body ELSE length(body) END,"
    " redelivered, delivery_count, expires_at FROM messages{} ORDER BY queue_id, seq"
)
_READ_BODIES = (
    f"SELECT seq, body FROM messages WHERE queue_id = {_QID} AND seq > ?3 ORDER BY seq LIMIT ?4"
)
_READ_MESSAGES = (
    "SELECT seq, exchange, routing_key, header, body FROM messages"
    f" WHERE queue_id = {_QID} AND seq > ?3 ORDER BY seq LIMIT ?4"
)
_FETCH_ROWS = 8192  # rows per fetchmany while loading
_DEDUP_LIMIT = 65536  # entries in the load-time string/header dedup cache before it resets
_WRITER_CACHE_KIB = 16384
RECLAIM_STEP = 64  # pages (512 KiB) given back per step between batches
RECLAIM_KEEP = 256  # free pages kept for reuse: the file stays within 2 MiB of its content


class Store:
    """The SQLite store of one data directory.

    Create it with :meth:`open`; close it with :meth:`close` (or ``async with``). Methods
    must be called from the event loop that opened it; :meth:`apply` must not be called
    again before the previous call returned (the group committer guarantees it).
    """

    def __init__(
        self,
        path: Path,
        writer: aiosqlite.Connection,
        reader: aiosqlite.Connection,
        lock: IO[bytes] | None,
    ) -> None:
        """Use :meth:`open` instead."""
        self._path = path
        self._writer = writer
        self._reader = reader
        self._lock = lock
        self._closed = False
        self._applying = False
        self.created = False  # the file was created (initialised) by this open

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    @property
    def description(self) -> str:
        """The database file, for logs."""
        return str(self._path)

    def body_reader(self) -> BodyReader:
        """A new synchronous reader of committed bodies (for paging; the caller closes it)."""
        return BodyReader(self._path)

    @classmethod
    async def open(cls, data_dir: Path, synchronous: str = "FULL") -> Store:
        """Open (creating or migrating if needed) the store in ``data_dir``.

        Args:
            data_dir: The data directory; created if missing. The database is
                ``data_dir / "amqpd.sqlite3"``.
            synchronous: ``"FULL"`` (default: a commit survives power loss), ``"NORMAL"``
                (survives a crash of the process; the last commits may be lost on power
                loss) or ``"EXTRA"``.

        Returns:
            The open store.

        Raises:
            StoreError: The directory cannot be created or is in use by another store, the
                file is not SQLite, belongs to another application or to a newer amqpd, or
                SQLite failed.
            ValueError: ``synchronous`` is not one of the accepted modes.
        """
        sync = synchronous.upper()
        if sync not in schema.SYNCHRONOUS_MODES:
            raise ValueError(
                f"synchronous must be one of {', '.join(schema.SYNCHRONOUS_MODES)}, "
                f"not {synchronous!r}"
            )
        data_dir = Path(data_dir)
        try:
            data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create data directory {data_dir}: {exc}") from exc
        path = data_dir / schema.DB_FILENAME
        lock = _lock_directory(data_dir)
        writer: aiosqlite.Connection | None = None
        reader: aiosqlite.Connection | None = None
        try:
            schema.check_file_header(path)
            writer = await aiosqlite.connect(path, isolation_level=None)
            created = await _prepare(writer, path, sync) == 0
            reader = await aiosqlite.connect(path, isolation_level=None)
            await reader.execute("PRAGMA query_only = ON")
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                for db in (reader, writer):
                    if db is not None:
                        await _close_quietly(db)
            if lock is not None:
                lock.close()
            if isinstance(exc, (sqlite3.Error, OSError)):
                raise StoreError(f"cannot open {path}: {exc}") from exc
            raise
        log.info("opened store %s (schema %d, synchronous=%s)", path, schema.SCHEMA_VERSION, sync)
        store = cls(path, writer, reader, lock)
        store.created = created
        return store

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def apply(self, batch: Batch) -> None:
        """Write a batch in one transaction, committed before this returns.

        A batch with no operations is a no-op. Cancellation does not interrupt a started
        transaction: it runs to its commit or rollback.

        Args:
            batch: The batch, from :meth:`persistence.journal.Journal.take_batch`.

        Raises:
            StoreError: SQLite or the operating system failed (the transaction was rolled
                back; the store stays usable and later batches succeed once the cause is
                gone), or the store is closed.
            RuntimeError: Another ``apply`` is still in flight.
        """
        if not batch.ops:
            return
        db = self._writer
        if self._closed:
            raise StoreError(f"store {self._path} is closed")
        if self._applying:
            raise RuntimeError("Store.apply called while another apply is in flight")
        self._applying = True
        with anyio.CancelScope(shield=True):
            try:
                # The whole transaction runs as one call on aiosqlite's writer thread: one
                # thread hop per batch instead of one per statement (a lone confirm's
                # latency and CPU are dominated by those hops). `_execute` is the helper
                # aiosqlite's own execute_* methods use; covered by the store tests.
                await db._execute(_write_batch, db, batch.ops)  # type: ignore[no-untyped-call]
            except (sqlite3.Error, OSError, ValueError) as exc:
                # ValueError: aiosqlite's "no active connection" (thread gone).
                await _rollback_quietly(db)
                raise StoreError(
                    f"could not commit batch {batch.id} to {self._path}: {exc}"
                ) from exc
            finally:
                self._applying = False

    async def reclaim(self, pages: int = RECLAIM_STEP, keep: int = RECLAIM_KEEP) -> bool:
        """Give free pages back to the file system, at most ``pages`` per call
        (``PRAGMA incremental_vacuum``), while more than ``keep`` pages are free. The
        group committer calls it between batches when the journal is idle, so a commit
        waits at most for one small step.

        Returns:
            True if more free pages are left to give back.

        Raises:
            StoreError: SQLite failed or the store is closed.
        """
        db = self._writer
        if self._closed:
            raise StoreError(f"store {self._path} is closed")
        if self._applying:
            raise RuntimeError("Store.reclaim called while an apply is in flight")
        self._applying = True
        more = False
        try:
            with anyio.CancelScope(shield=True):
                more = await db._execute(_reclaim, db, pages, keep)  # type: ignore[no-untyped-call]
        except (sqlite3.Error, OSError, ValueError) as exc:
            raise StoreError(f"could not reclaim free space in {self._path}: {exc}") from exc
        finally:
            self._applying = False
        return more

    async def load(
        self, body_window: int | None = None, messages: bool = True, keys_only: str = ""
    ) -> RecoveredState:
        """Read everything back: definitions and every message, in ``seq`` order per queue.

        Reads one consistent snapshot of committed data. With ``body_window``, only the first
        ``body_window`` messages of each queue carry their body; the others come with an
        empty body and ``body_size`` set (memory stays bounded for long queues). With
        ``messages=False`` only the definitions are read (for the admin commands). Queues
        whose name starts with a non-empty ``keys_only`` come back as their messages'
        ``seq`` only (``message_keys``; their rows are read back a page at a time).

        Returns:
            The stored state.

        Raises:
            StoreError: SQLite failed or a stored definition is corrupt.
        """
        db = self._reader_or_raise()
        try:
            await db.execute("BEGIN")
            try:
                return await self._load(db, body_window, messages, keys_only)
            finally:
                await db.execute("COMMIT")
        except (sqlite3.Error, OSError, ValueError) as exc:
            raise StoreError(f"cannot load {self._path}: {exc}") from exc

    async def _load(
        self,
        db: aiosqlite.Connection,
        body_window: int | None,
        load_messages: bool,
        keys_only: str,
    ) -> RecoveredState:
        exchanges = [
            ExchangeDef(vhost, name, type_name, bool(auto_delete), bool(internal), _args(args))
            for vhost, name, type_name, auto_delete, internal, args in await db.execute_fetchall(
                "SELECT vhost, name, type, auto_delete, internal, arguments FROM exchanges"
                " ORDER BY vhost, name"
            )
        ]
        queue_rows = list(
            await db.execute_fetchall(
                "SELECT id, vhost, name, auto_delete, arguments FROM queues ORDER BY vhost, name"
            )
        )
        queues = [
            QueueDef(vhost, name, bool(auto_delete), _args(args))
            for _, vhost, name, auto_delete, args in queue_rows
        ]
        keys: dict[int, QueueKey] = {row[0]: (row[1], row[2]) for row in queue_rows}
        bindings = [
            BindingDef(vhost, source, kind, destination, routing_key, _args(args))
            for vhost, source, kind, destination, routing_key, args in await db.execute_fetchall(
                "SELECT vhost, source, destination_kind, destination, routing_key, arguments"
                " FROM bindings ORDER BY vhost, source, destination_kind, destination,"
                " routing_key, arguments"
            )
        ]
        messages: dict[QueueKey, list[tuple[int, MessageRecord]]] = {}
        if not load_messages:
            return RecoveredState(exchanges, queues, bindings, messages)
        key_ids = [row[0] for row in queue_rows if keys_only and row[2].startswith(keys_only)]
        message_keys: dict[QueueKey, list[int]] = {}
        for queue_id in key_ids:  # the primary key's index alone: no row is read
            rows = await db.execute_fetchall(_LOAD_KEYS, (queue_id,))
            message_keys[keys[queue_id]] = [row[0] for row in rows]
        # ids are integers from the database itself: safe to put into the statement
        skip = f" WHERE queue_id NOT IN ({','.join(map(str, key_ids))})" if key_ids else ""
        gc_was_enabled = gc.isenabled()
        gc.disable()  # the records are long-lived; collecting while building them is wasted
        try:
            if body_window is None:
                cursor = await db.execute(_LOAD_MESSAGES.format(skip))
            else:
                cursor = await db.execute(_LOAD_MESSAGES_WINDOWED.format(skip), (body_window,))
            dedup: dict[Any, Any] = {}
            while rows := await cursor.fetchmany(_FETCH_ROWS):
                if len(dedup) > _DEDUP_LIMIT:
                    dedup.clear()
                for queue_id, group in groupby(rows, _FIRST):
                    key = keys.get(queue_id)
                    if key is None:  # cannot happen through apply(); keep loading the rest
                        log.warning("ignoring messages of unknown queue id %d", queue_id)
                        continue
                    out = messages.get(key)
                    if out is None:
                        out = messages[key] = []
                    out += _records(group, dedup)
            await cursor.close()
        finally:
            if gc_was_enabled:
                gc.enable()
        dedup_ids: dict[QueueKey, list[tuple[int, bytes]]] = {}
        for queue_id, pos, dedup_id in await db.execute_fetchall(_LOAD_DEDUP_IDS):
            key = keys.get(queue_id)
            if key is not None:
                dedup_ids.setdefault(key, []).append((pos, bytes(dedup_id)))
        return RecoveredState(exchanges, queues, bindings, messages, dedup_ids, message_keys)

    async def load_access(self) -> access.AccessState:
        """Read the users, vhosts and permissions (one snapshot).

        Raises:
            StoreError: SQLite failed or the store is closed.
        """
        db = self._reader_or_raise()
        try:
            await db.execute("BEGIN")
            try:
                rows = {
                    key: list(await db.execute_fetchall(sql))
                    for key, sql in access.LOAD_SQL.items()
                }
            finally:
                await db.execute("COMMIT")
        except (sqlite3.Error, OSError, ValueError) as exc:
            raise StoreError(f"cannot load access control from {self._path}: {exc}") from exc
        return access.rows_to_state(rows)

    async def save_access(self, state: access.AccessState) -> None:
        """Replace the stored users, vhosts and permissions in one transaction.

        Like :meth:`apply`, one call on the writer thread. It must not run while an
        ``apply`` is in flight: a running broker calls it through
        :meth:`persistence.group_commit.GroupCommitter.commit_then`.

        Raises:
            StoreError: SQLite failed (nothing was changed) or the store is closed.
            RuntimeError: An ``apply`` is in flight.
        """
        db = self._writer
        if self._closed:
            raise StoreError(f"store {self._path} is closed")
        if self._applying:
            raise RuntimeError("Store.save_access called while an apply is in flight")
        self._applying = True
        with anyio.CancelScope(shield=True):
            try:
                statements = access.state_to_statements(state)
                await db._execute(_write_statements, db, statements)  # type: ignore[no-untyped-call]
            except (sqlite3.Error, OSError, ValueError) as exc:
                await _rollback_quietly(db)
                raise StoreError(f"cannot save access control to {self._path}: {exc}") from exc
            finally:
                self._applying = False

    async def close(self) -> None:
        """Close the store (rolling back an unfinished transaction) and unlock the directory.

        Idempotent.
        """
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            await _rollback_quietly(self._writer)
            await _close_quietly(self._reader)
            await _close_quietly(self._writer)
        if self._lock is not None:
            self._lock.close()
            self._lock = None
        log.info("closed store %s", self._path)

    def _reader_or_raise(self) -> aiosqlite.Connection:
        if self._closed:
            raise StoreError(f"store {self._path} is closed")
        return self._reader


_FIRST = itemgetter(0)


def _write_batch(db: aiosqlite.Connection, ops: list[tuple[OpKind, list[Any]]]) -> None:
    """Run on the writer thread: one transaction with every operation of a batch."""
    _write_statements(db, ((sql, rows) for kind, rows in ops for sql in _SQL[kind]))


def _reclaim(db: aiosqlite.Connection, pages: int, keep: int) -> bool:
    """Run on the writer thread: one bounded incremental vacuum step if enough is free."""
    conn = db._conn
    free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    if free <= keep:
        return False
    # executescript steps the statement to the end; execute() would free one page only.
    conn.executescript(f"PRAGMA incremental_vacuum({int(min(pages, free - keep))});")
    left = conn.execute("PRAGMA freelist_count").fetchone()[0]
    if left <= keep:  # done: let the next checkpoint shrink the file
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    return bool(left > keep)


def _write_statements(
    db: aiosqlite.Connection, statements: Iterable[tuple[str, list[Any]]]
) -> None:
    """Run on the writer thread: BEGIN IMMEDIATE, each ``(sql, rows)``, COMMIT (or ROLLBACK)."""
    conn = db._conn
    if conn.in_transaction:  # left open by an earlier failure; never commit it
        conn.execute("ROLLBACK")
    conn.execute("BEGIN IMMEDIATE")
    try:
        for sql, rows in statements:
            conn.executemany(sql, rows)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _records(rows: Iterable[Any], dedup: dict[Any, Any]) -> list[tuple[int, MessageRecord]]:
    """Turn message rows into ``(seq, record)`` pairs.

    ``rows`` hold the queue id, then the ``_MESSAGE_COLUMNS`` (a paged-out body: its size).
    Equal exchange names, routing keys and headers are shared through ``dedup`` (a million
    messages usually carry a handful of distinct ones).
    """
    d = dedup.setdefault
    return [
        (
            seq,
            MessageRecord(d(ex, ex), d(rk, rk), d(hd, hd), body, red == 1, count, exp)
            if type(body) is bytes
            else MessageRecord(d(ex, ex), d(rk, rk), d(hd, hd), b"", red == 1, count, exp, body),
        )
        for _, seq, ex, rk, hd, body, red, count, exp in rows
    ]


def _args(blob: bytes) -> dict[str, Any]:
    return fieldcodec.decode(blob)


async def _scalar(db: aiosqlite.Connection, sql: str) -> Any:
    cursor = await db.execute(sql)
    row = await cursor.fetchone()
    await cursor.close()
    return None if row is None else row[0]


async def _prepare(db: aiosqlite.Connection, path: Path, synchronous: str) -> int:
    """Check the database's identity, configure the connection, migrate the schema; the
    schema version it had (0: created now)."""
    try:
        application_id = await _scalar(db, "PRAGMA application_id")
        user_version = await _scalar(db, "PRAGMA user_version")
        n_objects = await _scalar(db, "SELECT count(*) FROM sqlite_master")
    except sqlite3.DatabaseError as exc:
        raise StoreError(
            f"{path} is not a usable SQLite database ({exc}); amqpd will not overwrite it. "
            f"Move the file away or point --data-dir at another directory."
        ) from exc
    version = schema.check_identity(path, application_id, user_version, n_objects)
    if version == 0:
        await db.execute(f"PRAGMA page_size = {schema.PAGE_SIZE}")
        await db.execute("PRAGMA auto_vacuum = INCREMENTAL")  # before the first table
    mode = await _scalar(db, "PRAGMA journal_mode = WAL")
    if str(mode).lower() != "wal":
        raise StoreError(f"cannot put {path} in WAL mode (journal_mode is {mode!r})")
    await db.execute(f"PRAGMA synchronous = {synchronous}")
    await db.execute(f"PRAGMA cache_size = -{_WRITER_CACHE_KIB}")
    await db.execute("PRAGMA journal_size_limit = 67108864")
    if version == schema.SCHEMA_VERSION:
        return version
    await db.execute("BEGIN IMMEDIATE")
    try:
        for target in range(version + 1, schema.SCHEMA_VERSION + 1):
            for statement in schema.MIGRATIONS[target]:
                await db.execute(statement)
            await db.execute(f"PRAGMA user_version = {target}")
            log.info("migrated %s to schema %d", path, target)
        if version == 0:
            await db.execute(f"PRAGMA application_id = {schema.APPLICATION_ID}")
        await db.execute("COMMIT")
    except BaseException:
        await _rollback_quietly(db)
        raise
    if await _scalar(db, "PRAGMA auto_vacuum") != schema.AUTO_VACUUM_INCREMENTAL:
        # Schema 4: a store created before it switches to incremental vacuum, which needs
        # one full VACUUM (a copy of the file, once).
        log.info("converting %s to incremental vacuum (one full VACUUM, once)", path)
        await db.execute("PRAGMA auto_vacuum = INCREMENTAL")
        await db.execute("VACUUM")
    return version


async def _rollback_quietly(db: aiosqlite.Connection) -> None:
    try:
        if db.in_transaction:
            await db.execute("ROLLBACK")
    except (sqlite3.Error, ValueError) as exc:
        log.warning("rollback failed: %s", exc)


async def _close_quietly(db: aiosqlite.Connection) -> None:
    try:
        await db.close()
    except (sqlite3.Error, ValueError) as exc:
        log.warning("closing the database failed: %s", exc)


def lock_directory(data_dir: Path) -> IO[bytes] | None:
    """Lock ``data_dir`` for this process (as an open store does) until the file is closed.

    Raises:
        StoreError: Another amqpd holds it.
    """
    return _lock_directory(data_dir)


def _lock_directory(data_dir: Path) -> IO[bytes] | None:
    """Take an exclusive ``flock`` on the data directory's lock file (POSIX only)."""
    if sys.platform == "win32":
        return None
    import fcntl

    lock_path = data_dir / LOCK_FILENAME
    try:
        f = lock_path.open("a+b")
    except OSError as exc:
        raise StoreError(f"cannot create lock file {lock_path}: {exc}") from exc
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.seek(0)
        holder = f.read(32).decode("ascii", "replace").strip() or "unknown"
        f.close()
        raise StoreError(
            f"data directory {data_dir} is in use by another amqpd (pid {holder}); stop it "
            f"or point --data-dir elsewhere."
        ) from None
    f.truncate(0)
    f.write(str(os.getpid()).encode("ascii"))
    f.flush()
    return f


class BodyReader:
    """Synchronous, read-only access to committed message bodies (a page at a time).

    The broker core calls it while dispatching, when it reaches messages whose bodies were
    dropped from memory. It is synchronous on purpose: a delivery frame cannot be produced
    before the body is there, and suspending a channel for an await would reorder its
    replies. One page of 1 KiB bodies reads in about a millisecond from SQLite's cache; WAL
    lets it read while the group committer writes.
    """

    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        self._db.execute("PRAGMA query_only = ON")

    def read_bodies(self, queue: QueueKey, after_seq: int, limit: int) -> list[tuple[int, bytes]]:
        """``(seq, body)`` of up to ``limit`` committed messages with ``seq > after_seq``.

        Raises:
            StoreError: SQLite failed.
        """
        try:
            rows = self._db.execute(_READ_BODIES, (queue[0], queue[1], after_seq, limit))
            return list(rows)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read message bodies of {queue}: {exc}") from exc

    def read_messages(
        self, queue: QueueKey, after_seq: int, limit: int
    ) -> list[tuple[int, str, str, bytes, bytes]]:
        """``(seq, exchange, routing_key, header, body)`` of up to ``limit`` committed
        messages with ``seq > after_seq``.

        Raises:
            StoreError: SQLite failed.
        """
        try:
            rows = self._db.execute(_READ_MESSAGES, (queue[0], queue[1], after_seq, limit))
            return list(rows)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read messages of {queue}: {exc}") from exc

    def close(self) -> None:
        """Close the connection."""
        self._db.close()
