"""Opening a SQLite store's file: the data directory's lock, the file's identity checks, the
connection's settings (WAL, synchronous, cache) and the schema migrations; and the quiet
rollback and close the store uses on its way out of a failure. :class:`persistence.store.Store`
calls them from ``Store.open`` and ``Store.close``."""

from __future__ import annotations

import logging
import os
import sqlite3
import sys
from pathlib import Path
from typing import IO, Any

import aiosqlite

from persistence import schema
from persistence.errors import StoreError

log = logging.getLogger(__name__)

LOCK_FILENAME = "amqpd.lock"
_WRITER_CACHE_KIB = 16384


async def _scalar(db: aiosqlite.Connection, sql: str) -> Any:
    cursor = await db.execute(sql)
    row = await cursor.fetchone()
    await cursor.close()
    return None if row is None else row[0]


async def prepare(db: aiosqlite.Connection, path: Path, synchronous: str) -> int:
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
        await rollback_quietly(db)
        raise
    if await _scalar(db, "PRAGMA auto_vacuum") != schema.AUTO_VACUUM_INCREMENTAL:
        # Schema 4: a store created before it switches to incremental vacuum, which needs
        # one full VACUUM (a copy of the file, once).
        log.info("converting %s to incremental vacuum (one full VACUUM, once)", path)
        await db.execute("PRAGMA auto_vacuum = INCREMENTAL")
        await db.execute("VACUUM")
    return version


async def rollback_quietly(db: aiosqlite.Connection) -> None:
    try:
        if db.in_transaction:
            await db.execute("ROLLBACK")
    except (sqlite3.Error, ValueError) as exc:
        log.warning("rollback failed: %s", exc)


async def close_quietly(db: aiosqlite.Connection) -> None:
    try:
        await db.close()
    except (sqlite3.Error, ValueError) as exc:
        log.warning("closing the database failed: %s", exc)


def lock_directory(data_dir: Path) -> IO[bytes] | None:
    """Lock ``data_dir`` for this process (as an open store does) until the file is closed:
    an exclusive ``flock`` on its lock file (POSIX only).

    Raises:
        StoreError: Another amqpd holds it.
    """
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
