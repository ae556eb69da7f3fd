"""``amqpd definitions export|import`` and ``amqpd vhosts delete --store URL`` on a stopped
``--workers 2`` node on PostgreSQL: worker 1's vhosts live in the schema ``amqpd_shard_1``,
and the commands read and change them there (each shard under its lock), as the running
node does through its workers (the SQLite version: test_workers_offline.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pika
import pika.exceptions
import pytest

from persistence.postgres import election
from tests.integration.test_postgres_failover import PgBroker, amqpd
from tests.integration.test_postgres_workers import WORKERS, _publish_confirmed, _stored

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("whole_vhosts")]  # conftest.py

SHARD = "amqpd_shard_1"


def run(*argv: str, stdin: str = "") -> str:
    """An ``amqpd`` admin command (on the node's admin socket while it runs, else on its
    store); it must succeed."""
    done = amqpd(*argv, stdin=stdin)
    assert done.returncode == 0, done.stderr
    return done.stdout


def add_vhost(data: Path, url: str, name: str) -> None:
    store = ("--data-dir", str(data), "--store", url)
    run("vhosts", "add", name, *store)
    run("users", "set-permissions", "guest", "--vhost", name, ".*", ".*", ".*", *store)


def placed(url: str, schema: str) -> dict[str, int]:
    """The vhosts of the placement recorded in ``schema``."""

    async def read() -> Any:
        conn = await asyncpg.connect(url)
        try:
            return await conn.fetchval(f"SELECT document FROM {schema}.worker_placement")
        finally:
            await conn.close()

    vhosts: dict[str, int] = json.loads(asyncio.run(read()))["vhosts"]
    return vhosts


def queue_names(document: dict[str, Any], vhost: str) -> list[str]:
    return sorted(q["name"] for q in document["queues"] if q["vhost"] == vhost)


def connect(port: int, vhost: str) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", port, vhost, connection_attempts=1)
    )


@pytest.fixture
def data(pg_url: str, tmp_path: Path) -> Iterator[Path]:
    """A stopped two-worker node on ``pg_url``: "/" on worker 0, "far" (added while it
    ran) on worker 1 with a durable queue "kept" holding one persistent message."""
    directory = tmp_path / "data"
    node = PgBroker(pg_url, directory, extra=WORKERS)
    try:
        port = node.wait_listening()
        add_vhost(directory, pg_url, "far")
        _publish_confirmed(port, "far", "kept", [b"confirmed"])
    finally:
        node.stop()
    assert node.proc.returncode == 0
    assert placed(pg_url, "public")["far"] == 1
    assert placed(pg_url, SHARD)["far"] == 1  # worker 1's copy
    assert _stored(pg_url, SHARD) == {("far", "kept"): 1}
    yield directory


def test_export_reads_every_workers_schema(data: Path, pg_url: str) -> None:
    exported = json.loads(run("definitions", "export", "--data-dir", str(data), "--store", pg_url))
    assert queue_names(exported, "far") == ["kept"]
    assert queue_names(exported, "/") == []


def test_import_writes_to_the_vhosts_workers_schema(data: Path, pg_url: str) -> None:
    document = {
        "queues": [
            {"name": name, "vhost": vhost, "durable": True, "auto_delete": False, "arguments": {}}
            for name, vhost in (("imported", "far"), ("imported-here", "/"))
        ]
    }
    store = ("--data-dir", str(data), "--store", pg_url)
    out = run("definitions", "import", "-", *store, stdin=json.dumps(document))
    assert "2 queues" in out  # both parts counted
    exported = json.loads(run("definitions", "export", *store))
    assert queue_names(exported, "far") == ["imported", "kept"]
    node = PgBroker(pg_url, data, extra=WORKERS)
    try:
        port = node.wait_listening()
        with connect(port, "far") as conn:
            channel = conn.channel()
            channel.queue_declare("imported", passive=True)  # served by worker 1
            assert channel.queue_declare("kept", passive=True).method.message_count == 1
        with connect(port, "/") as conn:
            conn.channel().queue_declare("imported-here", passive=True)
    finally:
        node.stop()


def test_a_vhost_deleted_while_stopped_stays_deleted_with_everything_in_it(
    data: Path, pg_url: str
) -> None:
    run("vhosts", "delete", "far", "--data-dir", str(data), "--store", pg_url)
    assert "far" not in placed(pg_url, "public")
    assert "far" not in placed(pg_url, SHARD)
    assert _stored(pg_url, SHARD) == {}
    add_vhost(data, pg_url, "far")  # a new vhost of the same name: empty
    node = PgBroker(pg_url, data, extra=WORKERS)
    try:
        port = node.wait_listening()
        with connect(port, "far") as conn:
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
                conn.channel().queue_declare("kept", passive=True)
            assert info.value.reply_code == 404
    finally:
        node.stop()


def test_a_shard_whose_lock_is_held_refuses_the_command(data: Path, pg_url: str) -> None:
    """A worker 1 still holding its schema (its node's worker 0 gone): nothing changes."""

    async def delete_while_held() -> Any:
        conn = await asyncpg.connect(pg_url)
        try:
            assert await election.try_lock(conn, election.lock_key(1))
            return await asyncio.to_thread(
                amqpd, "vhosts", "delete", "far", "--data-dir", str(data), "--store", pg_url
            )
        finally:
            await conn.close()

    done = asyncio.run(delete_while_held())
    assert done.returncode == 2
    assert f"worker 1's schema {SHARD}" in done.stderr
    assert "held by a worker of a running amqpd" in done.stderr
    assert placed(pg_url, "public")["far"] == 1  # worker 0's part untouched
    assert "far" in run("vhosts", "list", "--data-dir", str(data), "--store", pg_url)
    assert _stored(pg_url, SHARD) == {("far", "kept"): 1}
