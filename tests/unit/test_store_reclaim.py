"""The store gives space back (persistence/store.py reclaim, group_commit idle work, the
schema 4 conversion to incremental vacuum)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio

from persistence import fieldcodec, schema
from persistence.group_commit import GroupCommitter
from persistence.journal import Journal
from persistence.records import MessageRecord, QueueDef
from persistence.store import RECLAIM_KEEP, RECLAIM_STEP, Store

Q = ("/", "q")
BODY = b"x" * 8000
COUNT = 3000  # ~24 MB of bodies


def _fill(journal: Journal) -> None:
    journal.put_queue(QueueDef("/", "q", False, {}))
    for seq in range(COUNT):
        journal.insert_message(Q, seq, MessageRecord("", "q", b"h", BODY))


def _drain(journal: Journal) -> None:
    for seq in range(COUNT):
        journal.delete_message(Q, seq)


def _freelist(path: Path) -> int:
    con = sqlite3.connect(path)
    try:
        return int(con.execute("PRAGMA freelist_count").fetchone()[0])
    finally:
        con.close()


def _size(path: Path) -> int:
    return path.stat().st_size


def test_reclaim_shrinks_the_file_after_a_backlog_drains(tmp_path: Path) -> None:
    async def main() -> None:
        async with await Store.open(tmp_path) as store:
            empty = _size(store.path)
            journal = Journal()
            _fill(journal)
            batch = journal.take_batch()
            assert batch is not None
            await store.apply(batch)
            full = _size(store.path) + _size(tmp_path / (schema.DB_FILENAME + "-wal"))
            assert full > 20_000_000
            _drain(journal)
            batch = journal.take_batch()
            assert batch is not None
            await store.apply(batch)
            free_before = _freelist(store.path)
            assert free_before > 2 * RECLAIM_STEP
            assert await store.reclaim()
            assert _freelist(store.path) == free_before - RECLAIM_STEP  # one bounded step
            steps = 1
            while await store.reclaim():
                steps += 1
            assert steps > 1  # in small steps, not one long vacuum
            assert not await store.reclaim()
            con = sqlite3.connect(store.path)
            try:
                assert con.execute("PRAGMA freelist_count").fetchone()[0] <= RECLAIM_KEEP
                assert con.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
            finally:
                con.close()
            assert _size(store.path) < empty + (RECLAIM_KEEP + 64) * schema.PAGE_SIZE

    anyio.run(main)


def test_the_committer_reclaims_when_idle_and_commits_first(tmp_path: Path) -> None:
    async def main() -> None:
        async with await Store.open(tmp_path) as store:
            journal = Journal()
            calls: list[bool] = []

            async def idle() -> bool:
                assert not journal.pending  # never while something waits to be committed
                more = await store.reclaim()
                calls.append(more)
                return more

            committed: list[int] = []
            committer = GroupCommitter(
                store, journal, lambda b: committed.append(b.id), lambda _b, _e: None, idle=idle
            )
            async with anyio.create_task_group() as group:
                group.start_soon(committer.run)
                group.start_soon(committer.run_idle)
                _fill(journal)
                committer.wake()
                with anyio.fail_after(60):
                    while journal.pending or not committed or not calls:
                        await anyio.sleep(0.01)
                assert calls == [False]  # idle after the commit: nothing free yet
                _drain(journal)
                committer.wake()
                with anyio.fail_after(60):
                    while len(calls) < 2 or calls[-1]:
                        await anyio.sleep(0.01)
                group.cancel_scope.cancel()
            assert len(calls) > 3 and calls[-1] is False  # several small steps
            con = sqlite3.connect(store.path)
            try:
                assert con.execute("PRAGMA freelist_count").fetchone()[0] <= RECLAIM_KEEP
            finally:
                con.close()

    anyio.run(main)


def test_an_older_store_is_converted_to_incremental_vacuum(tmp_path: Path) -> None:
    path = tmp_path / schema.DB_FILENAME
    con = sqlite3.connect(path)
    con.execute(f"PRAGMA page_size = {schema.PAGE_SIZE}")
    con.execute("PRAGMA journal_mode = WAL")
    for version in (1, 2, 3):
        for statement in schema.MIGRATIONS[version]:
            con.execute(statement)
    con.execute(f"PRAGMA application_id = {schema.APPLICATION_ID}")
    con.execute("PRAGMA user_version = 3")
    con.execute(
        "INSERT INTO queues (vhost, name, auto_delete, arguments) VALUES ('/', 'q', 0, ?)",
        (fieldcodec.encode({}),),
    )
    con.commit()
    assert con.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
    con.close()

    async def main() -> None:
        async with await Store.open(tmp_path) as store:
            state = await store.load()
            assert [q.name for q in state.queues] == ["q"]

    anyio.run(main)
    con = sqlite3.connect(path)
    try:
        assert con.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
        assert con.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION
    finally:
        con.close()
