"""Tests for the SQLite store (persistence/store.py, persistence/schema.py)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sqlite3
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from persistence import schema
from persistence import store as store_module
from persistence.errors import StoreError
from persistence.journal import Journal
from persistence.postgres import election
from persistence.postgres.store import PgStore
from persistence.records import (
    Batch,
    BindingDef,
    ExchangeDef,
    MessageRecord,
    OpKind,
    QueueDef,
    QueueKey,
)
from persistence.store import Store
from tests.pg_cluster import PgCluster
from tests.unit.test_persistence import (
    ARGS,
    EXCHANGES,
    QUEUES,
    RECORDS,
    VHOSTS,
    Reference,
    State,
    binding_defs,
)
from tests.unit.test_persistence_codec import TRICKY

Q: QueueKey = ("/", "q")


def run(fn: Callable[[], Awaitable[None]]) -> None:
    anyio.run(fn)


def rec(i: int, body: bytes | None = None, **kw: Any) -> MessageRecord:
    header = b"\x00<header" + bytes([i % 256])
    return MessageRecord("amq.direct", f"key.{i}", header, body or b"body%d" % i, **kw)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def commit(store: Store, journal: Journal, inline: bool = False) -> None:
    batch = journal.take_batch()
    assert batch is not None
    await store.apply(batch, inline=inline)


def with_queue(*names: str) -> Journal:
    j = Journal()
    for name in names:
        j.put_queue(QueueDef("/", name, False, {}))
    return j


class Backend:
    """Opens the store under test: SQLite in a directory, or PostgreSQL in a database (the
    shared suite below runs on both)."""

    def __init__(self, kind: str, data_dir: Path, url: str = "") -> None:
        self.kind = kind
        self.data_dir = data_dir
        self.url = url

    async def open(self) -> Any:
        if self.kind == "sqlite":
            return await Store.open(self.data_dir)
        conn = await election.connect(self.url)
        assert await election.try_lock(conn), "another store is open on this database"
        return await PgStore.open(self.url, conn)

    async def raw(self, store: Any, sql: str) -> None:
        """Run ``sql`` on the store's writer connection, behind its back."""
        if self.kind == "sqlite":
            await store._writer.execute(sql)
        else:
            await store._conn.execute(sql)

    def blob(self, hex_digits: str) -> str:
        return f"x'{hex_digits}'" if self.kind == "sqlite" else f"'\\x{hex_digits}'::bytea"

    async def reset(self) -> None:
        """Make the store empty (for each example of the property test)."""
        if self.kind == "sqlite":
            for name in os.listdir(self.data_dir):
                os.unlink(self.data_dir / name)
            return
        conn = await election.connect(self.url)
        try:
            await conn.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
        finally:
            await conn.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        return Backend("sqlite", tmp_path)
    return Backend("postgresql", tmp_path, request.getfixturevalue("pg_url"))


# ---------------------------------------------------------------------- round trips


def test_round_trip_definitions_and_messages_in_seq_order(backend: Backend) -> None:
    async def main() -> None:
        store = await backend.open()
        j = with_queue("q", "empty")
        j.put_queue(QueueDef("v", "q", True, {"x-queue-type": "classic"}))
        j.put_exchange(ExchangeDef("/", "x", "topic", False, True, {"alternate-exchange": "ae"}))
        j.put_binding(BindingDef("/", "x", "queue", "q", "a.*", {}))
        j.put_binding(BindingDef("/", "x", "exchange", "y", "#", {"k": 1}))
        for seq in (5, 1, 9):
            j.insert_message(Q, seq, rec(seq))
        await commit(store, j)
        for seq in (3, 7, 2):
            j.insert_message(Q, seq, rec(seq, expires_at=1.5e9))
        j.insert_message(("v", "q"), 1, rec(100, redelivered=True, delivery_count=3))
        await commit(store, j)
        state = await store.load()
        assert [s for s, _ in state.messages[Q]] == [1, 2, 3, 5, 7, 9]
        assert state.messages[Q][1] == (2, rec(2, expires_at=1.5e9))
        assert state.messages[("v", "q")] == [(1, rec(100, redelivered=True, delivery_count=3))]
        assert ("/", "empty") not in state.messages
        assert {(q.vhost, q.name) for q in state.queues} == {("/", "q"), ("/", "empty"), ("v", "q")}
        assert QueueDef("v", "q", True, {"x-queue-type": "classic"}) in state.queues
        assert state.exchanges == [
            ExchangeDef("/", "x", "topic", False, True, {"alternate-exchange": "ae"})
        ]
        assert BindingDef("/", "x", "exchange", "y", "#", {"k": 1}) in state.bindings
        assert len(state.bindings) == 2
        record = state.messages[Q][0][1]
        assert type(record.redelivered) is bool
        await store.close()

        reopened = await backend.open()
        assert await reopened.load() == state
        await reopened.close()

    run(main)


def test_tricky_field_tables_survive_exactly(backend: Backend) -> None:
    async def main() -> None:
        async with await backend.open() as store:
            j = Journal()
            j.put_exchange(ExchangeDef("/", "x", "headers", True, False, TRICKY))
            j.put_queue(QueueDef("/", "q", False, TRICKY))
            j.put_binding(BindingDef("/", "x", "queue", "q", "", TRICKY))
            await commit(store, j)
        async with await backend.open() as store:
            state = await store.load()
        assert state.exchanges[0].arguments == TRICKY
        assert list(state.exchanges[0].arguments) == list(TRICKY)
        assert state.queues[0].arguments == TRICKY
        assert state.bindings[0].arguments == TRICKY
        for key, value in TRICKY.items():
            assert type(state.queues[0].arguments[key]) is type(value)

    run(main)


def test_queue_redeclare_keeps_messages_and_delete_cascades(backend: Backend) -> None:
    async def main() -> None:
        async with await backend.open() as store:
            j = with_queue("q", "other")
            j.put_exchange(ExchangeDef("/", "x", "direct", False, False, {}))
            j.put_exchange(ExchangeDef("/", "y", "direct", False, False, {}))
            j.put_binding(BindingDef("/", "x", "queue", "q", "k", {}))
            j.put_binding(BindingDef("/", "x", "queue", "other", "k", {}))
            j.put_binding(BindingDef("/", "y", "exchange", "x", "k", {}))
            j.put_binding(BindingDef("/", "x", "exchange", "y", "k", {}))
            j.insert_message(Q, 1, rec(1))
            j.insert_message(("/", "other"), 1, rec(1))
            await commit(store, j)
            j.put_queue(QueueDef("/", "q", True, {"x-max-length": 5}))
            await commit(store, j)
            state = await store.load()
            assert QueueDef("/", "q", True, {"x-max-length": 5}) in state.queues
            assert state.messages[Q] == [(1, rec(1))]

            j.delete_queue("/", "q")
            await commit(store, j)
            state = await store.load()
            assert Q not in state.messages and ("/", "other") in state.messages
            assert len(state.bindings) == 3

            j.delete_exchange("/", "x")
            await commit(store, j)
            state = await store.load()
            assert state.bindings == []
            assert [e.name for e in state.exchanges] == ["y"]

    run(main)


def test_mark_delivered_and_delete_after_commit(backend: Backend) -> None:
    async def main() -> None:
        async with await backend.open() as store:
            j = with_queue("q")
            for seq in range(4):
                j.insert_message(Q, seq, rec(seq))
            await commit(store, j)
            j.mark_delivered(Q, 1, 2)
            j.mark_delivered(Q, 2, 1)
            j.delete_message(Q, 2)
            j.delete_message(Q, 3)
            await commit(store, j)
            state = await store.load()
            assert state.messages[Q] == [
                (0, rec(0)),
                (1, rec(1, redelivered=True, delivery_count=2)),
            ]

    run(main)


def test_reads_see_only_committed_data(tmp_path: Path) -> None:
    async def main() -> None:
        async with await Store.open(tmp_path) as store:
            j = with_queue("q")
            j.insert_message(Q, 1, rec(1))
            await commit(store, j)
            writer = store._writer  # a transaction left open half-way through
            await writer.execute("BEGIN IMMEDIATE")
            await writer.execute("DELETE FROM messages")
            assert len((await store.load()).messages[Q]) == 1
            j.insert_message(Q, 2, rec(2))
            await commit(store, j)  # rolls back the stray transaction first
            assert [s for s, _ in (await store.load()).messages[Q]] == [1, 2]

    run(main)


def test_concurrent_apply_is_refused(backend: Backend) -> None:
    async def main() -> None:
        async with await backend.open() as store:
            j = with_queue("q")
            for seq in range(2000):
                j.insert_message(Q, seq, rec(seq))
            first = j.take_batch()
            j.put_queue(QueueDef("/", "other", False, {}))
            second = j.take_batch()
            assert first is not None and second is not None
            errors: list[BaseException] = []

            async def apply_second() -> None:
                try:
                    await store.apply(second)
                except RuntimeError as exc:
                    errors.append(exc)

            async with anyio.create_task_group() as tg:
                tg.start_soon(store.apply, first)
                await anyio.sleep(0)
                tg.start_soon(apply_second)
            assert len(errors) == 1 and "in flight" in str(errors[0])
            assert len((await store.load()).messages[Q]) == 2000

    run(main)


def test_empty_batch_is_a_noop(backend: Backend) -> None:
    async def main() -> None:
        async with await backend.open() as store:
            await store.apply(Batch(1, []))
            assert (await store.load()).queues == []

    run(main)


def test_cancellation_does_not_interrupt_a_started_apply(backend: Backend) -> None:
    async def main() -> None:
        async with await backend.open() as store:
            j = with_queue("q")
            j.insert_message(Q, 1, rec(1))
            batch = j.take_batch()
            assert batch is not None
            with anyio.CancelScope() as scope:
                scope.cancel()
                await store.apply(batch)
                await anyio.sleep(0)  # the cancellation is delivered here, after the commit
            assert scope.cancelled_caught
            assert (await store.load()).messages[Q] == [(1, rec(1))]

    run(main)


# ---------------------------------------------------------------------- opening


def test_new_store_is_marked_and_in_wal_mode(tmp_path: Path) -> None:
    async def main() -> None:
        store = await Store.open(tmp_path / "new" / "dir", synchronous="normal")
        assert store.path == tmp_path / "new" / "dir" / schema.DB_FILENAME
        sync = await store._writer.execute_fetchall("PRAGMA synchronous")
        assert list(sync) == [(1,)]  # NORMAL
        await store.close()
        await store.close()  # idempotent

    run(main)
    con = sqlite3.connect(tmp_path / "new" / "dir" / schema.DB_FILENAME)
    assert con.execute("PRAGMA application_id").fetchone() == (schema.APPLICATION_ID,)
    assert con.execute("PRAGMA user_version").fetchone() == (schema.SCHEMA_VERSION,)
    assert con.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert con.execute("PRAGMA page_size").fetchone() == (schema.PAGE_SIZE,)
    con.close()


def test_bad_synchronous_mode_is_rejected(tmp_path: Path) -> None:
    async def main() -> None:
        with pytest.raises(ValueError, match="synchronous"):
            await Store.open(tmp_path, synchronous="OFF")

    run(main)


def open_fails(data_dir: Path, match: str) -> None:
    async def main() -> None:
        with pytest.raises(StoreError, match=match):
            await Store.open(data_dir)

    run(main)


def test_newer_schema_is_refused_untouched(tmp_path: Path) -> None:
    async def main() -> None:
        await (await Store.open(tmp_path)).close()

    run(main)
    db = tmp_path / schema.DB_FILENAME
    con = sqlite3.connect(db)
    con.execute(f"PRAGMA user_version = {schema.SCHEMA_VERSION + 2}")
    con.commit()
    con.close()
    before = digest(db)
    version = schema.SCHEMA_VERSION
    newer = rf"newer amqpd \(schema {version + 2} > {version}\)"
    open_fails(tmp_path, newer + "; upgrade amqpd or point --data-dir")
    assert digest(db) == before
    # The lock was released: a fixed file opens again.
    con = sqlite3.connect(db)
    con.execute(f"PRAGMA user_version = {schema.SCHEMA_VERSION}")
    con.commit()
    con.close()

    async def reopen() -> None:
        await (await Store.open(tmp_path)).close()

    run(reopen)


@pytest.mark.parametrize("application_id", [0, 0x12345678])
def test_foreign_sqlite_database_is_refused_untouched(tmp_path: Path, application_id: int) -> None:
    db = tmp_path / schema.DB_FILENAME
    con = sqlite3.connect(db)
    con.execute(f"PRAGMA application_id = {application_id}")
    con.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER)")
    con.execute("INSERT INTO accounts VALUES (1, 100)")
    con.commit()
    con.close()
    before = digest(db)
    open_fails(tmp_path, "not created by amqpd")
    assert digest(db) == before
    assert sorted(os.listdir(tmp_path)) == ["amqpd.lock", schema.DB_FILENAME]


def test_foreign_application_id_on_empty_database_is_refused(tmp_path: Path) -> None:
    db = tmp_path / schema.DB_FILENAME
    con = sqlite3.connect(db)
    con.execute("PRAGMA application_id = 7")
    con.commit()
    con.close()
    open_fails(tmp_path, "application_id 0x00000007")


@pytest.mark.parametrize(
    "content",
    [b"not a database at all\n" * 100, schema.SQLITE_MAGIC + b"\xff" * 4000],
    ids=["text", "corrupt-sqlite"],
)
def test_non_sqlite_file_is_refused_untouched(tmp_path: Path, content: bytes) -> None:
    db = tmp_path / schema.DB_FILENAME
    db.write_bytes(content)
    open_fails(tmp_path, "not (an|a usable) SQLite database")
    assert db.read_bytes() == content


def test_empty_file_is_a_new_store(tmp_path: Path) -> None:
    (tmp_path / schema.DB_FILENAME).write_bytes(b"")

    async def main() -> None:
        async with await Store.open(tmp_path) as store:
            assert (await store.load()).queues == []

    run(main)


def test_data_directory_in_use_is_refused(tmp_path: Path) -> None:
    async def main() -> None:
        first = await Store.open(tmp_path)
        with pytest.raises(StoreError, match=rf"in use by another amqpd \(pid {os.getpid()}\)"):
            await Store.open(tmp_path)
        await first.close()
        await (await Store.open(tmp_path)).close()

    run(main)


def test_data_directory_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    open_fails(tmp_path / "file", "cannot create data directory")


# ---------------------------------------------------------------------- failures


async def set_pragma(store: Store, pragma: str) -> None:
    await store._writer.execute(f"PRAGMA {pragma}")


def test_read_only_database_raises_store_error_and_recovers(tmp_path: Path) -> None:
    async def main() -> None:
        async with await Store.open(tmp_path) as store:
            j = with_queue("q")
            await commit(store, j)
            j.insert_message(Q, 1, rec(1))
            j.put_exchange(ExchangeDef("/", "x", "direct", False, False, {}))
            batch = j.take_batch()
            assert batch is not None
            # Works as root too, unlike chmod: the connection refuses every write.
            await set_pragma(store, "query_only = ON")
            with pytest.raises(StoreError, match=f"batch {batch.id} .*readonly"):
                await store.apply(batch)
            assert not store._writer.in_transaction
            state = await store.load()
            assert state.messages == {} and state.exchanges == []
            await set_pragma(store, "query_only = OFF")  # the cause goes away
            await store.apply(batch)
            assert (await store.load()).messages[Q] == [(1, rec(1))]

    run(main)


def test_disk_full_rolls_back_the_whole_batch(tmp_path: Path) -> None:
    async def main() -> None:
        async with await Store.open(tmp_path) as store:
            j = with_queue("q")
            await commit(store, j)
            (pages,) = next(iter(await store._writer.execute_fetchall("PRAGMA page_count")))
            await set_pragma(store, f"max_page_count = {pages + 2}")
            j.put_exchange(ExchangeDef("/", "x", "direct", False, False, {}))
            for seq in range(100):
                j.insert_message(Q, seq, rec(seq, body=os.urandom(4096)))
            batch = j.take_batch()
            assert batch is not None
            with pytest.raises(StoreError, match="full"):
                await store.apply(batch)
            state = await store.load()
            assert state.messages == {} and state.exchanges == []
            await set_pragma(store, "max_page_count = 1073741823")
            await store.apply(batch)
            assert len((await store.load()).messages[Q]) == 100

    run(main)


def _count_thread_calls(store: Store) -> list[int]:
    """Count the calls that run on aiosqlite's writer thread (``_execute``)."""
    calls = [0]
    on_thread = store._writer._execute

    async def counted(fn: Any, *args: Any) -> Any:
        calls[0] += 1
        return await on_thread(fn, *args)  # type: ignore[no-untyped-call]

    store._writer._execute = counted  # type: ignore[method-assign]
    return calls


async def _counted_with_queue(store: Store) -> tuple[list[int], Journal]:
    """Count the writer thread's calls, stop the store's clock (a busy machine must not
    look like a slow disk), and commit queue ``q`` inline."""
    calls = _count_thread_calls(store)
    store._clock = lambda: 1000.0
    journal = with_queue("q")
    await commit(store, journal, inline=True)
    return calls, journal


def test_lone_small_batches_are_written_on_the_loop_thread_others_on_the_writer_thread(
    tmp_path: Path,
) -> None:
    """A lone confirm's batch skips the two thread hand-offs; a busy broker's batch keeps
    the thread so the loop goes on reading while it is written (INLINE_MAX_ROWS)."""

    async def main() -> None:
        async with await Store.open(tmp_path) as store:
            calls, j = await _counted_with_queue(store)
            for seq in range(store_module.INLINE_MAX_ROWS):
                j.insert_message(Q, seq, rec(seq))
            await commit(store, j, inline=True)
            assert calls == [0]
            for seq in range(100, 101 + store_module.INLINE_MAX_ROWS):
                j.insert_message(Q, seq, rec(seq))
            await commit(store, j, inline=True)
            assert calls == [1]
            j.insert_message(Q, 200, rec(200))
            await commit(store, j)  # not a lone batch: the caller saw others publishing
            assert calls == [2]
            assert len((await store.load()).messages[Q]) == 2 * store_module.INLINE_MAX_ROWS + 2

    run(main)


def test_a_slow_transaction_sends_small_batches_to_the_thread_for_a_while(
    tmp_path: Path,
) -> None:
    """A slow disk must not hold the event loop: after a transaction slower than
    INLINE_SLOW, small batches go to the writer thread for INLINE_BACKOFF seconds."""

    async def main() -> None:
        async with await Store.open(tmp_path) as store:
            calls, j = await _counted_with_queue(store)
            now = [1000.0]
            store._clock = lambda: now[0]  # each transaction takes no time on this clock
            seq = iter(range(100))

            async def small() -> None:
                j.insert_message(Q, next(seq), rec(0))
                await commit(store, j, inline=True)

            await small()
            assert calls == [0]  # fast: inline
            fast = store._clock
            ended = 1000.0 + 2 * store_module.INLINE_SLOW
            ticks = iter([1000.0, ended])
            store._clock = lambda: next(ticks)
            await small()  # inline, and slow
            store._clock = fast
            assert calls == [0]
            now[0] = ended
            await small()
            now[0] = ended + store_module.INLINE_BACKOFF - 0.001
            await small()
            assert calls == [2]  # on the thread while the back-off lasts
            now[0] = ended + store_module.INLINE_BACKOFF
            await small()
            assert calls == [2]  # inline again
            assert len((await store.load()).messages[Q]) == 5

    run(main)


def test_a_failed_small_batch_on_the_loop_thread_rolls_back_and_the_store_goes_on(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        async with await Store.open(tmp_path) as store:
            calls, j = await _counted_with_queue(store)
            j.put_exchange(ExchangeDef("/", "x", "direct", False, False, {}))
            j.insert_message(("/", "nowhere"), 1, rec(1))
            with pytest.raises(StoreError, match="NOT NULL"):
                await commit(store, j, inline=True)
            assert calls == [0] and not store._writer.in_transaction
            j.insert_message(Q, 2, rec(2))
            await commit(store, j, inline=True)
            state = await store.load()
            assert state.exchanges == [] and state.messages[Q] == [(2, rec(2))]

    run(main)


def test_a_writer_connection_gone_behind_the_store_is_a_store_error_on_either_path(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        async with await Store.open(tmp_path) as store:
            j = with_queue("q")
            await commit(store, j, inline=True)
            await store._writer.close()  # aiosqlite's thread and connection are gone
            for count in (1, store_module.INLINE_MAX_ROWS + 1):  # inline, then on the thread
                for seq in range(count):
                    j.insert_message(Q, seq, rec(seq))
                with pytest.raises(StoreError, match="could not commit batch"):
                    await commit(store, j, inline=True)

    run(main)


def test_insert_for_unknown_queue_fails_the_batch(backend: Backend) -> None:
    async def main() -> None:
        async with await backend.open() as store:
            j = Journal()
            j.put_exchange(ExchangeDef("/", "x", "direct", False, False, {}))
            j.insert_message(("/", "nowhere"), 1, rec(1))
            with pytest.raises(StoreError, match=r"NOT NULL|not-null"):
                await commit(store, j)
            assert (await store.load()).exchanges == []

    run(main)


def test_closed_store_raises_store_error(backend: Backend) -> None:
    async def main() -> None:
        store = await backend.open()
        await store.close()
        batch = with_queue("q").take_batch()
        assert batch is not None
        with pytest.raises(StoreError, match="closed"):
            await store.apply(batch)
        with pytest.raises(StoreError, match="closed"):
            await store.load()
        with pytest.raises(StoreError, match="closed"):
            await store.load_access()

    run(main)


def test_corrupt_definition_raises_store_error(backend: Backend) -> None:
    async def main() -> None:
        async with await backend.open() as store:
            await commit(store, with_queue("q"))
            await backend.raw(store, f"UPDATE queues SET arguments = {backend.blob('0203')}")
            with pytest.raises(StoreError, match="field-table"):
                await store.load()

    run(main)


def test_orphan_message_rows_are_skipped_with_a_warning(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        async with await backend.open() as store:
            j = with_queue("q")
            j.insert_message(Q, 1, rec(1))
            await commit(store, j)
            await backend.raw(
                store,
                "INSERT INTO messages SELECT 999, seq, exchange, routing_key, header, body,"
                " redelivered, delivery_count, expires_at FROM messages",
            )
            state = await store.load()
            assert state.messages == {Q: [(1, rec(1))]}

    run(main)
    assert "unknown queue id 999" in caplog.text


# ---------------------------------------------------------------------- property


_reference_db: str | None = None  # the PostgreSQL database of the property test

COMMANDS = st.one_of(
    st.tuples(
        st.just("put_exchange"),
        st.builds(
            ExchangeDef, VHOSTS, EXCHANGES, st.just("fanout"), st.booleans(), st.booleans(), ARGS
        ),
    ),
    st.tuples(st.just("delete_exchange"), VHOSTS, EXCHANGES),
    st.tuples(st.just("put_queue"), st.builds(QueueDef, VHOSTS, QUEUES, st.booleans(), ARGS)),
    st.tuples(st.just("delete_queue"), VHOSTS, QUEUES),
    st.tuples(st.just("put_binding"), binding_defs()),
    st.tuples(st.just("delete_binding"), binding_defs()),
    st.tuples(st.just("insert"), VHOSTS, QUEUES, st.integers(0, 5), RECORDS),
    st.tuples(st.just("insert"), VHOSTS, QUEUES, st.integers(0, 5), RECORDS),
    st.tuples(st.just("mark"), VHOSTS, QUEUES, st.integers(0, 5), st.integers(1, 5)),
    st.tuples(st.just("delete"), VHOSTS, QUEUES, st.integers(0, 5)),
    st.tuples(st.just("commit")),
    st.tuples(st.just("reopen")),
)


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(commands=st.lists(COMMANDS, max_size=40))
@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_store_matches_reference_model(
    kind: str, pg_cluster: PgCluster, commands: list[tuple[Any, ...]]
) -> None:
    global _reference_db
    if kind == "postgresql" and _reference_db is None:
        _reference_db = pg_cluster.create_database(pg_cluster.new_name())
    with tempfile.TemporaryDirectory() as tmp:
        backend = Backend(kind, Path(tmp), _reference_db or "")

        async def main() -> None:
            await backend.reset()
            store = await backend.open()
            journal = Journal()
            reference = Reference()
            try:
                for name, *args in commands:
                    if name in ("commit", "reopen"):
                        while (batch := journal.take_batch()) is not None:
                            await store.apply(batch)
                        if name == "reopen":
                            await store.close()
                            store = await backend.open()
                        assert State.from_recovered(await store.load()) == reference
                        continue
                    if name == "insert":
                        vhost, queue, seq, record = args
                        key = (vhost, queue)
                        if key not in reference.queues or (key, seq) in reference.messages:
                            continue  # the core never does this
                        reference.insert_message(key, seq, record)
                        journal.insert_message(key, seq, record)
                        continue
                    if name in ("mark", "delete"):
                        vhost, queue, seq, *rest = args
                        method = "mark_delivered" if name == "mark" else "delete_message"
                        args = [(vhost, queue), seq, *rest]
                    else:
                        method = name
                    getattr(reference, method)(*args)
                    getattr(journal, method)(*args)
                while (batch := journal.take_batch()) is not None:
                    await store.apply(batch)
                recovered = await store.load()
                assert State.from_recovered(recovered) == reference
                for key in reference.queues:
                    paged = recovered.messages.get(key, [])
                    expected = sorted(
                        (s, m) for (k, s), m in reference.messages.items() if k == key
                    )
                    assert [(s, tuple(vars_of(m))) for s, m in paged] == expected
            finally:
                await store.close()

        run(main)


def vars_of(m: MessageRecord) -> list[Any]:
    """The stored columns (body_size is only set by a windowed load)."""
    return [getattr(m, f.name) for f in dataclasses.fields(m) if f.name != "body_size"]


def test_dedup_window_round_trip_and_cascade(backend: Backend) -> None:
    async def main() -> None:
        store = await backend.open()
        j = with_queue("q", "other")
        for pos in range(4):
            j.remember_id(Q, pos, b"id-%d" % pos)
        j.remember_id(("/", "other"), 0, b"x")
        await commit(store, j)
        j.forget_ids(Q, 1)
        j.remember_id(Q, 4, b"id-4")
        await commit(store, j)
        state = await store.load()
        assert state.dedup_ids[Q] == [(2, b"id-2"), (3, b"id-3"), (4, b"id-4")]
        j.delete_queue("/", "other")
        await commit(store, j)
        await store.close()
        reopened = await backend.open()
        state = await reopened.load()
        assert ("/", "other") not in state.dedup_ids and len(state.dedup_ids[Q]) == 3
        await reopened.close()

    run(main)


def test_op_kinds_all_have_sql() -> None:
    from persistence.postgres.store import SQL
    from persistence.store import _SQL

    assert set(_SQL) == set(OpKind)
    assert set(SQL) == set(OpKind)


def test_windowed_load_keeps_only_head_bodies_and_body_reader_pages_them(backend: Backend) -> None:
    async def main() -> None:
        async with await backend.open() as store:
            j = with_queue("q")
            for seq in range(5):
                j.insert_message(Q, seq, rec(seq, body=b"body-%d" % seq))
            await commit(store, j)
            state = await store.load(body_window=2)
            records = state.messages[Q]
            assert [r.body for _s, r in records[:2]] == [b"body-0", b"body-1"]
            assert all(r.body_size is None for _s, r in records[:2])
            assert [(r.body, r.body_size) for _s, r in records[2:]] == [(b"", 6)] * 3
            reader = store.body_reader()
            try:
                assert reader.read_bodies(Q, 1, 2) == [(2, b"body-2"), (3, b"body-3")]
                assert reader.read_bodies(Q, 4, 10) == []
            finally:
                reader.close()

    run(main)


def test_reader_pages_whole_messages_by_large_keys(backend: Backend) -> None:
    """Delayed exchanges (amqpd/model/delayed.py) key rows by due time << 20: 64-bit
    sequence numbers, read back whole (exchange, routing key, header, body) in key order."""

    async def main() -> None:
        async with await backend.open() as store:
            j = with_queue("q")
            keys = [(1_900_000_000_000 + n) << 20 | n for n in (3, 1, 2)]
            for n, key in enumerate(keys):
                j.insert_message(Q, key, rec(n, body=b"body-%d" % n))
            await commit(store, j)
            reader = store.body_reader()
            try:
                page = reader.read_messages(Q, min(keys) - 1, 2)
                assert [row[0] for row in page] == sorted(keys)[:2]
                first = keys.index(page[0][0])
                assert page[0][1:] == (
                    "amq.direct",
                    f"key.{first}",
                    rec(first).header,
                    b"body-%d" % first,
                )
                assert reader.read_messages(Q, max(keys), 5) == []
            finally:
                reader.close()

    run(main)


def test_keys_only_queues_come_back_as_keys(backend: Backend) -> None:
    """``load(keys_only=prefix)``: those queues' seqs only (amqpd's delayed exchanges read
    their messages back a page at a time), the other queues as always."""

    async def main() -> None:
        async with await backend.open() as store:
            j = with_queue("q", "amq.delayed-x")
            keyed = ("/", "amq.delayed-x")
            for seq in (5, 1, 3):
                j.insert_message(keyed, seq, rec(seq))
                j.insert_message(Q, seq, rec(seq))
            await commit(store, j)
            state = await store.load(body_window=2, keys_only="amq.delayed-")
            assert state.message_keys == {keyed: [1, 3, 5]}
            assert list(state.messages) == [Q]
            assert [seq for seq, _r in state.messages[Q]] == [1, 3, 5]
            plain = await store.load(body_window=2)
            assert plain.message_keys == {} and set(plain.messages) == {Q, keyed}

    run(main)


def test_access_tables_round_trip(backend: Backend) -> None:
    from persistence.access import AccessState, Permission, PolicyRecord, User, VhostInfo

    state = AccessState(
        users={
            "guest": User("guest", "hash-g", tags=("administrator",)),
            "svc": User("svc", "", "rabbit_password_hashing_sha512", ("monitoring", "policymaker")),
        },
        vhosts={"/": VhostInfo("/"), "v": VhostInfo("v", "a vhost", ("t1",), 10, 7)},
        permissions={("svc", "v"): Permission("^$", "x.*", ".*")},
        policies={("v", "ttl"): PolicyRecord("v", "ttl", "^q", "queues", 5, {"message-ttl": 60})},
        operator_policies={
            ("/", "cap"): PolicyRecord("/", "cap", ".*", "all", 0, {"max-length": 9})
        },
        global_parameters={"cluster_name": "amqpd", "limits": {"a": [1, 2]}},
        user_limits={"svc": {"max-connections": 3, "max-channels": -1}},
    )

    async def main() -> None:
        async with await backend.open() as store:
            assert (await store.load_access()).users["guest"].tags == ("administrator",)
            await store.save_access(state)
            assert await store.load_access() == state
        async with await backend.open() as store:
            assert await store.load_access() == state
            await store.save_access(AccessState())  # rewritten whole
            assert await store.load_access() == AccessState()

    run(main)
