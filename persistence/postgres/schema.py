"""The PostgreSQL schema of an amqpd store and its migrations.

The tables mirror the SQLite schema (persistence/schema.py) with PostgreSQL types: BYTEA for
bodies, headers and encoded field tables, BOOLEAN flags, BIGINT sequence numbers. The
``schema_version`` table (one row: the version reached by :data:`MIGRATIONS`, plus the
``application`` marker ``amqpd``) versions it; a database whose tables were not created by
amqpd is refused untouched. Migrations run in one transaction, and only by the node that
holds the store's lock (persistence/postgres/election.py), so two brokers never migrate at
once. ``"user"`` is quoted: it is a reserved word in PostgreSQL.

The numbering is this backend's own: PostgreSQL schema 1 = SQLite schemas 1 and 2, schema 2
= SQLite's 3 (policies, global parameters); SQLite's 4 (incremental vacuum) has no
counterpart (autovacuum).
"""

from __future__ import annotations

__all__ = ["APPLICATION", "MIGRATIONS", "SCHEMA_VERSION", "TABLES", "shard_url"]

APPLICATION = "amqpd"
"""The marker in ``schema_version.application``."""

TABLES = (
    "exchanges",
    "queues",
    "bindings",
    "messages",
    "vhosts",
    "users",
    "permissions",
    "policies",
    "global_parameters",
    "parameters",
    "worker_placement",
)
"""The tables amqpd owns (besides ``schema_version``)."""

_MIGRATION_1 = (
    """
    CREATE TABLE exchanges (
        vhost       TEXT    NOT NULL,
        name        TEXT    NOT NULL,
        type        TEXT    NOT NULL,
        auto_delete BOOLEAN NOT NULL,
        internal    BOOLEAN NOT NULL,
        arguments   BYTEA   NOT NULL,
        PRIMARY KEY (vhost, name)
    )
    """,
    """
    CREATE TABLE queues (
        id          BIGSERIAL PRIMARY KEY,
        vhost       TEXT    NOT NULL,
        name        TEXT    NOT NULL,
        auto_delete BOOLEAN NOT NULL,
        arguments   BYTEA   NOT NULL,
        UNIQUE (vhost, name)
    )
    """,
    """
    CREATE TABLE bindings (
        vhost            TEXT  NOT NULL,
        source           TEXT  NOT NULL,
        destination_kind TEXT  NOT NULL CHECK (destination_kind IN ('queue', 'exchange')),
        destination      TEXT  NOT NULL,
        routing_key      TEXT  NOT NULL,
        arguments        BYTEA NOT NULL,
        PRIMARY KEY (vhost, source, destination_kind, destination, routing_key, arguments)
    )
    """,
    "CREATE INDEX bindings_by_destination ON bindings (vhost, destination_kind, destination)",
    """
    CREATE TABLE messages (
        queue_id       BIGINT  NOT NULL,
        seq            BIGINT  NOT NULL,
        exchange       TEXT    NOT NULL,
        routing_key    TEXT    NOT NULL,
        header         BYTEA   NOT NULL,
        body           BYTEA   NOT NULL,
        redelivered    BOOLEAN NOT NULL,
        delivery_count INTEGER NOT NULL,
        expires_at     DOUBLE PRECISION,
        PRIMARY KEY (queue_id, seq)
    )
    """,
    # Bodies are mostly small and rarely compress: keep them inline, uncompressed.
    "ALTER TABLE messages ALTER COLUMN body SET STORAGE EXTERNAL",
    """
    CREATE TABLE vhosts (
        name            TEXT NOT NULL PRIMARY KEY,
        description     TEXT NOT NULL DEFAULT '',
        tags            TEXT NOT NULL DEFAULT '',
        max_connections INTEGER
    )
    """,
    """
    CREATE TABLE users (
        name              TEXT NOT NULL PRIMARY KEY,
        password_hash     TEXT NOT NULL,
        hashing_algorithm TEXT NOT NULL,
        tags              TEXT NOT NULL DEFAULT ''
    )
    """,
    """
    CREATE TABLE permissions (
        "user"    TEXT NOT NULL,
        vhost     TEXT NOT NULL,
        configure TEXT NOT NULL,
        write     TEXT NOT NULL,
        read      TEXT NOT NULL,
        PRIMARY KEY ("user", vhost)
    )
    """,
    # RabbitMQ's first-boot state, as SQLite's schema 2 seeds it (guest/guest, vhost /).
    "INSERT INTO vhosts (name) VALUES ('/')",
    "INSERT INTO users (name, password_hash, hashing_algorithm, tags) VALUES ('guest',"
    " 'ejyR5F2e8NWZBOuU0LHBXo54l2KUznhb+ZigxcAz+o1dfO1+', 'rabbit_password_hashing_sha256',"
    " 'administrator')",
    "INSERT INTO permissions VALUES ('guest', '/', '.*', '.*', '.*')",
)

# Schema 2 (SQLite's schema 3): policies, operator policies and global parameters, RabbitMQ's
# JSON as text, rewritten with the access tables.
_MIGRATION_2 = (
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
    )
    """,
    """
    CREATE TABLE global_parameters (
        name  TEXT NOT NULL PRIMARY KEY,
        value TEXT NOT NULL
    )
    """,
)

# Schema 3 (SQLite's schema 5): the deduplication windows of queues declared with
# x-message-deduplication (amqpd/model/dedup.py).
_MIGRATION_3 = (
    """
    CREATE TABLE dedup_ids (
        queue_id    BIGINT  NOT NULL,
        pos         BIGINT  NOT NULL,
        id          BYTEA   NOT NULL,
        PRIMARY KEY (queue_id, pos)
    )
    """,
)

# Schema 4 (SQLite's schema 6): vhost-scoped runtime parameters (shovels), JSON as text,
# rewritten with the access tables.
_MIGRATION_4 = (
    """
    CREATE TABLE parameters (
        component TEXT NOT NULL,
        vhost     TEXT NOT NULL,
        name      TEXT NOT NULL,
        value     TEXT NOT NULL,
        PRIMARY KEY (component, vhost, name)
    )
    """,
)

# Schema 5 (no SQLite counterpart: there it is placement.json in the data directory): which
# worker of a ``--workers N`` node serves which vhost (amqpd/shell/workers/placement.py), in
# the database that active and standby nodes share. Worker 0's schema holds the node's
# record, worker K's a copy, read before it recovers.
_MIGRATION_5 = (
    """
    CREATE TABLE worker_placement (
        single   BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (single),
        document TEXT    NOT NULL
    )
    """,
)

MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: _MIGRATION_1,
    2: _MIGRATION_2,
    3: _MIGRATION_3,
    4: _MIGRATION_4,
    5: _MIGRATION_5,
}
"""Statements that take a store from version ``n - 1`` to version ``n``."""

SCHEMA_VERSION = max(MIGRATIONS)
"""The schema version this code writes and understands."""

CREATE_VERSION_TABLE = (
    "CREATE TABLE schema_version ("
    " application TEXT NOT NULL, version INTEGER NOT NULL, single BOOLEAN PRIMARY KEY"
    " DEFAULT TRUE CHECK (single))"
)


SHARD_SCHEMA_PREFIX = "amqpd_shard_"


def shard_url(url: str, shard: int) -> str:
    """The store of worker ``shard`` >= 1 of a ``--workers N`` node: the same database, its
    own schema ``amqpd_shard_K`` (as SQLite's ``shard-K/`` directory), chosen with the
    ``search_path`` setting (asyncpg passes a URL's unknown query parameters on as server
    settings, so every connection to it, the body reader's included, uses that schema).
    Worker 0's is the URL's own schema, where a single-process node keeps its store."""
    separator = "&" if "?" in url else "?"
    return f"{url}{separator}search_path={SHARD_SCHEMA_PREFIX}{shard}"
