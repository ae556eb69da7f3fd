"""The SQLite schema of an amqpd data directory, its identity checks and its migrations.

An amqpd store is one SQLite file, ``<data dir>/amqpd.sqlite3``, in WAL mode. It is marked
with ``PRAGMA application_id = APPLICATION_ID`` and versioned with ``PRAGMA user_version``
(1, 2, ... = the schema version reached by the migrations in :data:`MIGRATIONS`). Before
touching a file, :class:`persistence.store.Store` checks it with :func:`check_file_header`
and :func:`check_identity`, which refuse anything that is not an empty database or an amqpd
store this code understands. Nothing here overwrites or "repairs" a file it does not own.

Tables (schema 1):

* ``exchanges``, ``bindings``: keyed by their AMQP identity, ``WITHOUT ROWID`` (small rows).
  Arguments are field tables encoded by :mod:`persistence.fieldcodec` (canonical, i.e.
  sorted, for bindings, where the arguments are part of the key).
* ``queues``: an integer ``id`` (the rowid) plus the unique ``(vhost, name)``. Messages refer
  to the id, so a message row does not repeat the names; a queue keeps its id when it is
  redeclared (upsert) and its messages are deleted with it.
* ``messages``: one row per ``(queue_id, seq)``. A rowid table with the composite primary key
  as a separate index. Measured with 1 KiB bodies in batches of 1000: a ``WITHOUT ROWID``
  table was 3.7x slower for inserts, 2.6x slower for deletes and 3.3x larger on disk (rows
  that large belong in a rowid table, as the SQLite documentation says), while the key
  index costs ~10% against packing ``(queue_id, seq)`` into the rowid, which would bound
  ``seq``. Text keys ``(vhost, queue)`` instead of ``queue_id`` measured the same speed but
  repeat the names in every row and index entry.

Tables added by schema 2 (access control, see :mod:`persistence.access`): ``vhosts``,
``users`` (RabbitMQ-format password hashes, never plain text) and ``permissions`` (three
regular expressions per user and vhost). Small, rewritten whole when they change.

Tables added by schema 3: ``policies`` (policies and operator policies, RabbitMQ's JSON
definition as text) and ``global_parameters``; rewritten with the access tables.

Table added by schema 5: ``dedup_ids``, the deduplication window of each queue declared with
``x-message-deduplication`` (see ``amqpd.model.dedup``): ``(queue_id, pos, id)``, ``pos``
counting the ids the queue accepted; ids that fall out of the window are deleted.
"""

from __future__ import annotations

from pathlib import Path

from persistence.errors import StoreError

__all__ = [
    "APPLICATION_ID",
    "AUTO_VACUUM_INCREMENTAL",
    "DB_FILENAME",
    "MIGRATIONS",
    "PAGE_SIZE",
    "SCHEMA_VERSION",
    "SQLITE_MAGIC",
    "SYNCHRONOUS_MODES",
    "check_file_header",
    "check_identity",
]

APPLICATION_ID = 0x414D5144
"""``PRAGMA application_id`` of every amqpd store: the ASCII bytes ``AMQD``."""

DB_FILENAME = "amqpd.sqlite3"
"""Name of the database file inside the data directory."""

SQLITE_MAGIC = b"SQLite format 3\x00"
"""The first 16 bytes of every SQLite 3 database file."""

PAGE_SIZE = 8192
"""Page size of a new store (cannot change once the file exists in WAL mode)."""

AUTO_VACUUM_INCREMENTAL = 2
"""``PRAGMA auto_vacuum`` of a store at schema 4 or later."""

SYNCHRONOUS_MODES = ("FULL", "NORMAL", "EXTRA")
"""Accepted ``PRAGMA synchronous`` settings. ``NORMAL`` in WAL mode survives a crash of the
process but may lose the last commits on power loss."""

_MIGRATION_1 = (
    """
    CREATE TABLE exchanges (
        vhost       TEXT    NOT NULL,
        name        TEXT    NOT NULL,
        type        TEXT    NOT NULL,
        auto_delete INTEGER NOT NULL,
        internal    INTEGER NOT NULL,
        arguments   BLOB    NOT NULL,
        PRIMARY KEY (vhost, name)
    ) WITHOUT ROWID
    """,
    """
    CREATE TABLE queues (
        id          INTEGER PRIMARY KEY,
        vhost       TEXT    NOT NULL,
        name        TEXT    NOT NULL,
        auto_delete INTEGER NOT NULL,
        arguments   BLOB    NOT NULL,
        UNIQUE (vhost, name)
    )
    """,
    """
    CREATE TABLE bindings (
        vhost            TEXT NOT NULL,
        source           TEXT NOT NULL,
        destination_kind TEXT NOT NULL CHECK (destination_kind IN ('queue', 'exchange')),
        destination      TEXT NOT NULL,
        routing_key      TEXT NOT NULL,
        arguments        BLOB NOT NULL,
        PRIMARY KEY (vhost, source, destination_kind, destination, routing_key, arguments)
    ) WITHOUT ROWID
    """,
    "CREATE INDEX bindings_by_destination ON bindings (vhost, destination_kind, destination)",
    """
    CREATE TABLE messages (
        queue_id       INTEGER NOT NULL,
        seq            INTEGER NOT NULL,
        exchange       TEXT    NOT NULL,
        routing_key    TEXT    NOT NULL,
        header         BLOB    NOT NULL,
        body           BLOB    NOT NULL,
        redelivered    INTEGER NOT NULL,
        delivery_count INTEGER NOT NULL,
        expires_at     REAL,
        PRIMARY KEY (queue_id, seq)
    )
    """,
)

# Schema 2: access control (RabbitMQ's first-boot state is seeded, so a store written by
# schema 1, which knew only vhost '/' and guest/guest, keeps opening the same way). The guest
# hash is RabbitMQ's rabbit_password_hashing_sha256 of "guest" with the salt 7a3c91e4.
_MIGRATION_2 = (
    """
    CREATE TABLE vhosts (
        name            TEXT    NOT NULL PRIMARY KEY,
        description     TEXT    NOT NULL DEFAULT '',
        tags            TEXT    NOT NULL DEFAULT '',
        max_connections INTEGER
    ) WITHOUT ROWID
    """,
    """
    CREATE TABLE users (
        name              TEXT NOT NULL PRIMARY KEY,
        password_hash     TEXT NOT NULL,
        hashing_algorithm TEXT NOT NULL,
        tags              TEXT NOT NULL DEFAULT ''
    ) WITHOUT ROWID
    """,
    """
    CREATE TABLE permissions (
        user      TEXT NOT NULL,
        vhost     TEXT NOT NULL,
        configure TEXT NOT NULL,
        write     TEXT NOT NULL,
        read      TEXT NOT NULL,
        PRIMARY KEY (user, vhost)
    ) WITHOUT ROWID
    """,
    "INSERT INTO vhosts (name) VALUES ('/')",
    "INSERT INTO users (name, password_hash, hashing_algorithm, tags) VALUES ('guest',"
    " 'ejyR5F2e8NWZBOuU0LHBXo54l2KUznhb+ZigxcAz+o1dfO1+', 'rabbit_password_hashing_sha256',"
    " 'administrator')",
    "INSERT INTO permissions VALUES ('guest', '/', '.*', '.*', '.*')",
)

# Schema 3: policies and operator policies (``kind`` 'policy' / 'operator'; the definition
# is RabbitMQ's JSON object) and global runtime parameters (a JSON value each), so that
# definitions move between RabbitMQ and amqpd without losing them.
_MIGRATION_3 = (
    """
    CREATE TABLE policies (
        kind       TEXT    NOT NULL CHECK (kind IN ('policy', 'operator')),
        vhost      TEXT    NOT NULL,
        name       TEXT    NOT NULL,
        pattern    TEXT    NOT NULL,
        apply_to   TEXT    NOT NULL,
        priority   INTEGER NOT NULL,
        definition TEXT    NOT NULL,
        PRIMARY KEY (kind, vhost, name)
    ) WITHOUT ROWID
    """,
    """
    CREATE TABLE global_parameters (
        name  TEXT NOT NULL PRIMARY KEY,
        value TEXT NOT NULL
    ) WITHOUT ROWID
    """,
)

# Schema 4: ``PRAGMA auto_vacuum = INCREMENTAL``, so the committer can give free pages back
# after a backlog drained (persistence.store.Store.reclaim). No statements: a new store sets
# it before its first table; an older one is converted by one VACUUM (Store.open).
_MIGRATION_4: tuple[str, ...] = ()

# Schema 5: the deduplication windows of queues with x-message-deduplication (model/dedup.py).
_MIGRATION_5 = (
    """
    CREATE TABLE dedup_ids (
        queue_id    INTEGER NOT NULL,
        pos         INTEGER NOT NULL,
        id          BLOB    NOT NULL,
        PRIMARY KEY (queue_id, pos)
    )
    """,
)

# Schema 6: vhost-scoped runtime parameters (RabbitMQ's ``rabbitmqctl set_parameter``:
# component ``shovel`` today; the value is the parameter's JSON object).
_MIGRATION_6 = (
    """
    CREATE TABLE parameters (
        component TEXT NOT NULL,
        vhost     TEXT NOT NULL,
        name      TEXT NOT NULL,
        value     TEXT NOT NULL,
        PRIMARY KEY (component, vhost, name)
    ) WITHOUT ROWID
    """,
)

MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: _MIGRATION_1,
    2: _MIGRATION_2,
    3: _MIGRATION_3,
    4: _MIGRATION_4,
    5: _MIGRATION_5,
    6: _MIGRATION_6,
}
"""Statements that take a store from version ``n - 1`` to version ``n``."""

SCHEMA_VERSION = max(MIGRATIONS)
"""The schema version this code writes and understands."""


def check_file_header(path: Path) -> None:
    """Refuse a file that exists, is not empty and is not an SQLite 3 database.

    Args:
        path: The database file (it need not exist).

    Raises:
        StoreError: The file is not SQLite, or cannot be read.
    """
    try:
        with path.open("rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreError(f"cannot read {path}: {exc}") from exc
    if head and head != SQLITE_MAGIC:
        raise StoreError(
            f"{path} is not an SQLite database (it starts with {head[:16]!r}); amqpd will not "
            f"overwrite it. Move the file away or point --data-dir at another directory."
        )


def check_identity(path: Path, application_id: int, user_version: int, n_objects: int) -> int:
    """Decide whether an SQLite database may be used as an amqpd store.

    Args:
        path: The database file (for messages).
        application_id: Its ``PRAGMA application_id``.
        user_version: Its ``PRAGMA user_version``.
        n_objects: How many rows its ``sqlite_master`` has (tables, indexes, ...).

    Returns:
        The schema version it is at: 0 for a new, empty database that may be initialised.

    Raises:
        StoreError: It belongs to another application, was written by a newer amqpd, or is
            an amqpd store in a state this code does not know.
    """
    if application_id == 0 and user_version == 0 and n_objects == 0:
        return 0
    if application_id != APPLICATION_ID:
        raise StoreError(
            f"{path} is an SQLite database that was not created by amqpd (application_id "
            f"{application_id:#010x}, {n_objects} schema objects); amqpd will not touch it. "
            f"Point --data-dir at an empty directory or at an amqpd data directory."
        )
    if user_version > SCHEMA_VERSION:
        raise StoreError(
            f"data directory {path.parent} was written by a newer amqpd (schema "
            f"{user_version} > {SCHEMA_VERSION}); upgrade amqpd or point --data-dir elsewhere."
        )
    if user_version < 1:
        raise StoreError(
            f"{path} is marked as an amqpd store but has no schema version "
            f"(user_version {user_version}); it was not written by amqpd. Move it away or "
            f"point --data-dir elsewhere."
        )
    return user_version
