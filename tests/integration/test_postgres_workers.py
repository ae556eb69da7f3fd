"""``--workers 2`` on a shared PostgreSQL store: each worker keeps its vhosts in its own
schema under its own lock, the placement is in the database (a standby node on another
data directory puts every vhost where its data is), a killed worker is restarted without
the standby taking its shard, and when the active node's worker 0 dies the standby takes
over every worker's vhosts, the old node's workers stepping down (store_role.py)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import asyncpg
import pika
import pytest

from tests.integration.test_postgres_failover import DEADLINE, PgBroker, amqpd
from tests.integration.test_workers import _declares, _drain, _wait_for, _workers
from tests.ports import spare_port

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("whole_vhosts")]  # conftest.py

WORKERS = ("--workers", "2", "--no-management", "--no-prometheus")


def _publish_confirmed(port: int, vhost: str, queue: str, bodies: list[bytes]) -> None:
    params = pika.ConnectionParameters("127.0.0.1", port, vhost, connection_attempts=1)
    with pika.BlockingConnection(params) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare(queue, durable=True)
        for body in bodies:
            channel.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2))


def _stored(url: str, schema: str) -> dict[tuple[str, str], int]:
    """(vhost, queue) -> messages stored in ``schema`` of the database."""

    async def count() -> dict[tuple[str, str], int]:
        conn = await asyncpg.connect(url)
        try:
            rows = await conn.fetch(
                f"SELECT q.vhost, q.name, count(*) FROM {schema}.messages m"
                f" JOIN {schema}.queues q ON q.id = m.queue_id GROUP BY q.vhost, q.name"
            )
        finally:
            await conn.close()
        return {(row[0], row[1]): row[2] for row in rows}

    return asyncio.run(count())


def _refused_alone(url: str, data_dir: Path, reason: str) -> None:
    """A one-process node on the store exits with status 2, logging ``reason`` (a regex)."""
    alone = PgBroker(url, data_dir, extra=("--workers", "1"))
    try:
        assert alone.proc.wait(timeout=DEADLINE) == 2
        alone.wait_for(reason)
    finally:
        alone.stop()


def _admin(data_dir: Path, *args: str) -> None:
    done = amqpd(*args, "--data-dir", str(data_dir))
    assert done.returncode == 0, done.stderr


def test_workers_on_postgres_survive_a_killed_worker_and_fail_over_as_one_node(
    pg_url: str, tmp_path: Path
) -> None:
    active = PgBroker(pg_url, tmp_path / "a", extra=WORKERS)
    standby: PgBroker | None = None
    try:
        port = active.wait_listening()
        _admin(tmp_path / "a", "vhosts", "add", "v1")  # on worker 1: it has none
        _admin(
            tmp_path / "a", "users", "set-permissions", "guest", "--vhost", "v1", ".*", ".*", ".*"
        )
        front = [b"front-%d" % i for i in range(200)]
        back = [b"back-%d" % i for i in range(200)]
        _publish_confirmed(port, "/", "jobs", front)
        _publish_confirmed(port, "v1", "jobs", back)
        workers = _workers(active.proc.pid)
        assert sorted(workers) == [0, 1]
        # each worker's messages in its own part of the database
        assert _stored(pg_url, "public") == {("/", "jobs"): len(front)}
        assert _stored(pg_url, "amqpd_shard_1") == {("v1", "jobs"): len(back)}

        standby = PgBroker(pg_url, tmp_path / "b", port=spare_port(), extra=WORKERS)
        standby.wait_for(r"standby: another amqpd holds the lock")
        standby.wait_for(r"standby: worker 1 waits for its node to be active")

        # worker 1 killed: its own node restarts it; the standby's worker 1 does not compete
        os.kill(workers[1], signal.SIGKILL)
        _wait_for(lambda: _declares(port, "v1", "after-restart"), "worker 1 serving again")
        more = [b"back-after-%d" % i for i in range(50)]
        _publish_confirmed(port, "v1", "jobs", more)
        assert standby.role() == "standby"

        # worker 0 killed while its supervisor is stopped: the standby wins the node's lock
        # first; the restarted worker 0 then finds it taken and its worker 1 steps down
        os.kill(active.proc.pid, signal.SIGSTOP)
        os.kill(_workers(active.proc.pid)[0], signal.SIGKILL)
        standby.wait_for(r"active: holding the lock")
        os.kill(active.proc.pid, signal.SIGCONT)
        standby_port = standby.wait_listening()
        assert standby.role() == "active"
        assert _drain(standby_port, "/", "jobs") == set(front)
        assert _drain(standby_port, "v1", "jobs") == set(back + more)
        active.wait_for(r"worker 0 found another node active: this worker steps down")
        assert active.role() == "standby"
    finally:
        active.stop()
        if standby is not None:
            standby.stop()


def test_a_worker_count_too_small_for_the_stored_placement_is_one_line_and_exit_2(
    pg_url: str, tmp_path: Path
) -> None:
    """The placement in the database holds a vhost on worker 1: a node started on that
    store with one process refuses to serve without that vhost's data (as the SQLite
    store's placement.json check does), once it holds the lock."""
    node = PgBroker(pg_url, tmp_path / "a", extra=WORKERS)
    try:
        node.wait_listening()
        _admin(tmp_path / "a", "vhosts", "add", "v1")
    finally:
        node.stop()
    assert node.proc.returncode == 0
    _refused_alone(
        pg_url,
        tmp_path / "a",
        r"cannot open the store: the placement recorded in the store: vhost 'v1' lives "
        r"on worker 1 \(its data is in the schema amqpd_shard_1\): start with --workers 2",
    )


def test_a_spread_queue_in_a_workers_schema_needs_that_worker(pg_url: str, tmp_path: Path) -> None:
    """A spread vhost's queue lives in its worker's schema: a node started with fewer
    workers on that store refuses to serve without it, one line and exit 2."""
    node = PgBroker(pg_url, tmp_path / "a", extra=(*WORKERS, "--spread-vhosts", "/"))
    try:
        port = node.wait_listening()
        for queue in ("qa", "qb"):  # connections go to the workers in turn
            _publish_confirmed(port, "/", queue, [b"kept"])
    finally:
        node.stop()
    assert node.proc.returncode == 0
    on_one = _stored(pg_url, "amqpd_shard_1")
    assert len(on_one) == 1, on_one
    ((_vhost, name),) = on_one
    _refused_alone(
        pg_url,
        tmp_path / "a",
        rf"cannot open the store: queue '{name}' in vhost '/' lives on worker 1 \(its "
        r"data is in the schema amqpd_shard_1\): start with --workers 2 or more",
    )
