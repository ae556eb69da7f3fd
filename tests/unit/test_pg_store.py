"""What only the PostgreSQL store does (the shared suite is tests/unit/test_persistence_store.py):
the schema_version table and foreign or newer databases, the advisory lock that elects the
active node and fences a deposed one, and the body reader's reconnect."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from persistence.backend import is_postgres_url, parse_store_url, redact
from persistence.errors import StoreError
from persistence.journal import Journal
from persistence.postgres import election, schema
from persistence.postgres.store import PgStore
from persistence.records import MessageRecord, QueueDef
from tests.pg_cluster import PgCluster

Q = ("/", "q")


def run(fn: Callable[[], Awaitable[None]]) -> None:
    anyio.run(fn)


async def open_store(url: str) -> PgStore:
    conn = await election.connect(url)
    assert await election.try_lock(conn)
    try:
        return await PgStore.open(url, conn)
    except BaseException:
        conn.terminate()
        raise


def batch_with_message(seq: int) -> Any:
    j = Journal()
    j.put_queue(QueueDef("/", "q", False, {}))
    j.insert_message(Q, seq, MessageRecord("", "q", b"h", b"body", False, 0, None))
    return j.take_batch()


def test_new_database_gets_the_schema_and_its_version(pg_cluster: PgCluster, pg_url: str) -> None:
    run(lambda: _close(open_store(pg_url)))
    database = pg_url.rsplit("/", 1)[1]
    row = pg_cluster.psql(database, "SELECT application, version FROM schema_version")
    assert row == f"amqpd|{schema.SCHEMA_VERSION}"
    users = pg_cluster.psql(database, "SELECT name FROM users")
    assert users == "guest"
    run(lambda: _close(open_store(pg_url)))  # opening again migrates nothing
    assert pg_cluster.psql(database, "SELECT count(*) FROM schema_version") == "1"


async def _close(opening: Awaitable[PgStore]) -> None:
    await (await opening).close()


def test_newer_schema_is_refused_untouched(pg_cluster: PgCluster, pg_url: str) -> None:
    run(lambda: _close(open_store(pg_url)))
    database = pg_url.rsplit("/", 1)[1]
    pg_cluster.psql(database, "UPDATE schema_version SET version = 99")

    async def main() -> None:
        with pytest.raises(StoreError, match=r"newer amqpd .*schema 99"):
            await open_store(pg_url)

    run(main)
    assert pg_cluster.psql(database, "SELECT version FROM schema_version") == "99"


def test_foreign_tables_are_refused_untouched(pg_cluster: PgCluster, pg_url: str) -> None:
    database = pg_url.rsplit("/", 1)[1]
    pg_cluster.psql(database, "CREATE TABLE messages (id int); INSERT INTO messages VALUES (7)")

    async def main() -> None:
        with pytest.raises(StoreError, match="no schema_version; amqpd will not touch"):
            await open_store(pg_url)

    run(main)
    assert pg_cluster.psql(database, "SELECT id FROM messages") == "7"


def test_foreign_schema_version_table_is_refused(pg_cluster: PgCluster, pg_url: str) -> None:
    database = pg_url.rsplit("/", 1)[1]
    pg_cluster.psql(
        database,
        "CREATE TABLE schema_version (application text, version int);"
        " INSERT INTO schema_version VALUES ('flyway', 3)",
    )

    async def main() -> None:
        with pytest.raises(StoreError, match="did not create"):
            await open_store(pg_url)

    run(main)


def test_only_one_session_gets_the_lock_until_it_ends(pg_url: str) -> None:
    async def main() -> None:
        first = await election.connect(pg_url)
        second = await election.connect(pg_url)
        try:
            assert await election.try_lock(first)
            assert not await election.try_lock(second)
            assert await election.holds_lock(first, 5)
            assert not await election.holds_lock(second, 5)
            first.terminate()  # the session dies: the server releases its lock
            with anyio.fail_after(60):
                while not await election.try_lock(second):
                    await anyio.sleep(0.05)
            assert await election.holds_lock(second, 5)
        finally:
            first.terminate()
            await second.close()

    run(main)


def test_a_store_whose_session_died_can_commit_nothing(pg_cluster: PgCluster, pg_url: str) -> None:
    """The fence: the lock and the writes share one session, so once the session is gone a
    deposed active cannot commit (and a new active loads everything it did commit)."""

    async def main() -> None:
        store = await open_store(pg_url)
        try:
            await store.apply(batch_with_message(1))
            database = pg_url.rsplit("/", 1)[1]
            pg_cluster.psql(
                database,
                "SELECT pg_terminate_backend(pid, 60000) FROM pg_locks WHERE locktype = 'advisory'"
                " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            )
            assert not await store.holds_lock(5)
            with pytest.raises(StoreError, match="could not commit batch"):
                await store.apply(batch_with_message(2))
            successor = await open_store(pg_url)  # the lock is free now
            try:
                state = await successor.load()
                assert [seq for seq, _ in state.messages[Q]] == [1]
            finally:
                await successor.close()
        finally:
            await store.close()

    run(main)


def test_aborted_store_refuses_everything(pg_url: str) -> None:
    async def main() -> None:
        store = await open_store(pg_url)
        store.abort()
        assert not await store.holds_lock(5)
        with pytest.raises(StoreError, match="closed"):
            await store.apply(batch_with_message(1))
        with pytest.raises(StoreError, match="closed"):
            await store.load()
        await store.close()

    run(main)


def test_body_reader_reconnects_after_losing_its_connection(
    pg_cluster: PgCluster, pg_url: str
) -> None:
    async def main() -> None:
        async with await open_store(pg_url) as store:
            await store.apply(batch_with_message(1))
            reader = store.body_reader()
            try:
                assert reader.read_bodies(Q, 0, 10) == [(1, b"body")]
                old_pid = reader._conn.get_server_pid()
                database = pg_url.rsplit("/", 1)[1]
                pg_cluster.psql(
                    database,
                    "SELECT pg_terminate_backend(pid, 60000) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    " AND pid NOT IN (SELECT pid FROM pg_locks WHERE locktype = 'advisory')",
                )
                # The server closed the session: the next page is read on a new one (or
                # fails with StoreError once, if the close had not been seen yet).
                with anyio.fail_after(60):
                    while True:
                        try:
                            assert reader.read_bodies(Q, 0, 10) == [(1, b"body")]
                            break
                        except StoreError as exc:
                            assert "cannot read message bodies" in str(exc)
                            await anyio.sleep(0.05)
                assert reader._conn.get_server_pid() != old_pid
            finally:
                reader.close()

    run(main)


@pytest.mark.parametrize(
    ("setting", "error"),
    [
        ("mysql://h/db", "expected postgresql://"),
        ("postgresql://h:port/db", "bad --store URL"),
        ("postgresql:///db", "names no host"),
        ("postgresql://h:5432", "names no database"),
        ("postgresql://h:0/db", "port 0"),
    ],
)
def test_bad_store_urls_are_refused_with_what_to_do(setting: str, error: str) -> None:
    with pytest.raises(StoreError, match=error):
        parse_store_url(setting)


def test_store_url_helpers() -> None:
    assert parse_store_url("postgresql://u@h:5432/db") == "postgresql://u@h:5432/db"
    assert is_postgres_url("postgres://h/db") and not is_postgres_url(None)
    assert not is_postgres_url("/var/lib/amqpd")
    assert redact("postgresql://u:pw@h:1/db") == "postgresql://u:***@h:1/db"
    assert redact("postgresql://u@h/db") == "postgresql://u@h/db"
