"""amqpd on a shared PostgreSQL store (``--store postgresql://…``), as real processes on a
private PostgreSQL cluster (tests/pg_cluster.py): confirmed messages survive kill -9; two
brokers on one database elect one active (the standby does not listen); the standby takes
over when the active is killed and serves its messages, unacked ones redelivered; an active
that loses its database connection stops serving (320 to its clients, exit status 3; a
``--workers`` node's supervisor restarts its workers, which are elected again)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import aio_pika
import aio_pika.abc
import aio_pika.exceptions
import httpx
import pika
import pika.exceptions
import pytest

from interop.jms import AckMode, ConnectionFactory
from tests.pg_cluster import PgCluster
from tests.ports import spare_port

pytestmark = pytest.mark.slow

DEADLINE = 90.0  # generous: 2 shared cores
LISTENING = re.compile(r"msg=\"listening on 127\.0\.0\.1:(\d+)\"")


class PgBroker:
    """``python -m amqpd --store URL`` on 127.0.0.1; its log lines are collected in the
    background so a test can wait for one."""

    def __init__(
        self, url: str, data_dir: Path, port: int = 0, extra: tuple[str, ...] = ()
    ) -> None:
        self.data_dir = data_dir
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "amqpd",
                "--port",
                str(port),
                "--data-dir",
                str(data_dir),
                "--store",
                url,
                *extra,
            ],
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.port = 0

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self.lines.append("<exited>")
            self._changed.notify_all()

    def wait_for(self, pattern: str, timeout: float = DEADLINE) -> re.Match[str]:
        """The first log line matching ``pattern`` (waits for it)."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self.lines:
                    match = regex.search(line)
                    if match:
                        return match
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (self.lines and self.lines[-1] == "<exited>"):
                    raise AssertionError(
                        f"no log line matching {pattern!r}:\n" + "".join(self.lines)
                    )
                self._changed.wait(remaining)

    def wait_listening(self, timeout: float = DEADLINE) -> int:
        self.port = int(self.wait_for(LISTENING.pattern, timeout).group(1))
        return self.port

    def role(self) -> str:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "amqpd",
                "ctl",
                "status",
                "--data-dir",
                str(self.data_dir),
                "--format",
                "json",
            ],
            capture_output=True,
            text=True,
            timeout=DEADLINE,
            check=True,
        )
        return str(json.loads(done.stdout)["role"])

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._close()

    def _close(self) -> None:
        self._reader.join(timeout=10)
        assert self.proc.stderr is not None
        self.proc.stderr.close()

    def stop(self) -> None:
        assert self.proc.stderr is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        if not self.proc.stderr.closed:
            self._close()


def connect(port: int) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", port, blocked_connection_timeout=DEADLINE)
    )


def publish_confirmed(port: int, queue: str, count: int) -> None:
    with connect(port) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare(queue, durable=True)
        for i in range(count):
            ch.basic_publish("", queue, b"m%d" % i, pika.BasicProperties(delivery_mode=2))


def drain(port: int, queue: str) -> list[tuple[bytes, bool]]:
    """Every message of ``queue`` (body, redelivered), acked."""
    out: list[tuple[bytes, bool]] = []
    with connect(port) as conn:
        ch = conn.channel()
        while True:
            method, _props, body = ch.basic_get(queue, auto_ack=True)
            if method is None:
                return out
            out.append((body, bool(method.redelivered)))


def test_broker_on_postgres_keeps_confirmed_messages_across_kill_9(
    pg_url: str, tmp_path: Path
) -> None:
    broker = PgBroker(pg_url, tmp_path / "a")
    try:
        port = broker.wait_listening()
        assert broker.role() == "active"
        http = broker.wait_for(r"listening for http on 127\.0\.0\.1:(\d+)").group(1)
        nodes = httpx.get(f"http://127.0.0.1:{http}/api/nodes", auth=("guest", "guest"))
        assert [node["role"] for node in nodes.json()] == ["active"]
        publish_confirmed(port, "jobs", 3000)  # more than the hot window: paged on reload
        broker.kill()
        broker = PgBroker(pg_url, tmp_path / "a")
        port = broker.wait_listening()
        broker.wait_for(r"recovered 1 durable queues and 3000 persistent messages")
        got = drain(port, "jobs")
        assert [body for body, _ in got] == [b"m%d" % i for i in range(3000)]
    finally:
        broker.stop()


def test_one_active_the_standby_takes_over_after_kill_9(pg_url: str, tmp_path: Path) -> None:
    active = PgBroker(pg_url, tmp_path / "a")
    standby_port = spare_port()
    standby: PgBroker | None = None
    try:
        port = active.wait_listening()
        standby = PgBroker(pg_url, tmp_path / "b", port=standby_port)
        standby.wait_for(r"standby: another amqpd holds the lock")
        assert standby.role() == "standby"
        assert active.role() == "active"
        with (
            pytest.raises(ConnectionRefusedError),
            socket.create_connection(("127.0.0.1", standby_port), timeout=10),
        ):
            pass

        publish_confirmed(port, "jobs", 500)
        consumer = connect(port)
        ch = consumer.channel()
        unacked = [ch.basic_get("jobs", auto_ack=False)[2] for _ in range(3)]
        assert unacked == [b"m0", b"m1", b"m2"]
        # basic_get's reply is sent only after the delivery was journaled; make sure its
        # batch committed: one more confirmed publish goes into a later batch.
        publish_confirmed(port, "other", 1)

        active.kill()
        assert standby.wait_listening() == standby_port
        assert standby.role() == "active"
        got = drain(standby_port, "jobs")
        assert [body for body, _ in got] == [b"m%d" % i for i in range(500)]
        assert [body for body, redelivered in got if redelivered] == unacked
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            consumer.process_data_events(time_limit=0)  # its broker is gone
    finally:
        active.stop()
        if standby is not None:
            standby.stop()


def test_active_that_loses_its_database_connection_stops_serving(
    pg_cluster: PgCluster, pg_url: str, tmp_path: Path
) -> None:
    broker = PgBroker(pg_url, tmp_path / "a")
    try:
        port = broker.wait_listening()
        conn = connect(port)
        conn.channel().queue_declare("q", durable=True)
        database = pg_url.rsplit("/", 1)[1]
        killed = pg_cluster.psql(
            database,
            "SELECT count(pg_terminate_backend(pid, 60000)) FROM pg_locks"
            " WHERE locktype = 'advisory'"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        )
        workers = int(os.environ.get("AMQPD_WORKERS") or 1)  # the workers passes' nodes
        assert killed == str(workers)  # each worker holds its own part's lock
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
            deadline = time.monotonic() + DEADLINE
            while time.monotonic() < deadline:
                conn.process_data_events(time_limit=0.5)
        assert closed.value.reply_code == 320
        broker.wait_for(r"lost the lock of .*no longer active")
        if workers == 1:
            assert broker.proc.wait(timeout=DEADLINE) == 3
            with (
                pytest.raises(ConnectionRefusedError),
                socket.create_connection(("127.0.0.1", port), timeout=10),
            ):
                pass
        else:
            # a node's supervisor restarts the workers that stepped down, as standbys;
            # with no other node on the database, this one is elected again and serves
            assert _serves_queue_again(port, "q")
            assert broker.proc.poll() is None
    finally:
        broker.stop()


def _serves_queue_again(port: int, queue: str) -> bool:
    """Whether a new connection to ``port`` finds ``queue`` within DEADLINE (the node's
    listener answers again once a restarted worker 0 holds the lock)."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        try:
            with connect(port) as again:
                again.channel().queue_declare(queue, passive=True)
                return True
        except pika.exceptions.AMQPConnectionError:
            time.sleep(0.2)  # no event to wait on: the node is electing itself again
    return False


def test_bad_store_settings_exit_2_with_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "AMQPD_STORE": "postgresql://nobody@127.0.0.1:1/none"}
    done = subprocess.run(
        [sys.executable, "-m", "amqpd", "--port", "0", "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        env=env,
        check=False,
    )
    assert done.returncode == 2
    assert "cannot connect to PostgreSQL at postgresql://nobody@127.0.0.1:1/none" in done.stderr
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "amqpd",
            "--port",
            "0",
            "--data-dir",
            str(tmp_path),
            "--store",
            "postgresql://u:secret@h:notaport/db",
        ],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert done.returncode == 2
    assert "invalid setting --store" in done.stderr and "secret" not in done.stderr


def amqpd(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "amqpd", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )


def test_admin_commands_on_a_stopped_postgres_store(pg_url: str, tmp_path: Path) -> None:
    store = ["--data-dir", str(tmp_path / "admin"), "--store", pg_url]
    done = amqpd("users", "add", "svc", *store, stdin="svc-pw\n")
    assert done.returncode == 0, done.stderr
    done = amqpd("users", "set-permissions", "svc", ".*", ".*", ".*", *store)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "admin" / "amqpd.sqlite3").exists()  # no stray SQLite store
    broker = PgBroker(pg_url, tmp_path / "a")
    try:
        port = broker.wait_listening()
        credentials = pika.PlainCredentials("svc", "svc-pw")
        with pika.BlockingConnection(
            pika.ConnectionParameters("127.0.0.1", port, credentials=credentials)
        ) as conn:
            assert conn.is_open  # the user was written to PostgreSQL
        done = amqpd("users", "list", *store)  # the active holds the store elsewhere
        assert done.returncode == 2
        assert "held by the active amqpd: run the command on its host" in done.stderr
    finally:
        broker.stop()


def test_a_standby_stops_cleanly_and_the_active_keeps_serving(pg_url: str, tmp_path: Path) -> None:
    active = PgBroker(pg_url, tmp_path / "a")
    standby: PgBroker | None = None
    try:
        port = active.wait_listening()
        standby = PgBroker(pg_url, tmp_path / "b")
        standby.wait_for(r"standby: another amqpd holds the lock")
        done = amqpd("users", "list", "--data-dir", str(tmp_path / "b"))
        assert done.returncode == 1 and "this node is standby: ask the active node" in done.stderr
        standby.proc.send_signal(signal.SIGTERM)
        assert standby.proc.wait(timeout=DEADLINE) == 0
        assert not any(LISTENING.search(line) for line in standby.lines)
        publish_confirmed(port, "jobs", 10)
        assert len(drain(port, "jobs")) == 10
    finally:
        active.stop()
        if standby is not None:
            standby.stop()


def test_aio_pika_robust_connection_carries_on_through_a_failover(
    pg_url: str, tmp_path: Path
) -> None:
    """Both brokers are configured with the same address: the standby binds it once the
    active is dead, so one URL serves an aio-pika robust connection across the failover."""
    port = spare_port()
    active = PgBroker(pg_url, tmp_path / "a", port=port)
    standby: PgBroker | None = None
    try:
        active.wait_listening()
        standby = PgBroker(pg_url, tmp_path / "b", port=port)
        standby.wait_for(r"standby: another amqpd holds the lock")
        url = f"amqp://guest:guest@127.0.0.1:{port}/"

        async def publish(channel: aio_pika.abc.AbstractChannel, body: bytes) -> None:
            message = aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT)
            await channel.default_exchange.publish(message, routing_key="jobs")

        async def scenario() -> list[bytes]:
            connection = await aio_pika.connect_robust(url, reconnect_interval=0.2)
            async with connection:
                channel = await connection.channel()  # publisher confirms on
                await channel.declare_queue("jobs", durable=True)
                for i in range(50):
                    await publish(channel, b"before-%d" % i)
                active.kill()
                deadline = asyncio.get_running_loop().time() + DEADLINE
                while True:  # publishing fails until the robust connection is back
                    try:
                        await publish(channel, b"after")
                        break
                    except (aio_pika.exceptions.AMQPError, ConnectionError, RuntimeError):
                        assert asyncio.get_running_loop().time() < deadline
                        await asyncio.sleep(0.1)
                queue = await channel.declare_queue("jobs", durable=True)
                bodies = []
                while (message := await queue.get(no_ack=True, fail=False)) is not None:
                    bodies.append(message.body)
                return bodies

        async def main() -> list[bytes]:
            async with asyncio.timeout(DEADLINE * 2):
                return await scenario()

        bodies = asyncio.run(main())
        assert bodies == [b"before-%d" % i for i in range(50)] + [b"after"]
        assert standby.wait_listening() == port
    finally:
        active.stop()
        if standby is not None:
            standby.stop()


def test_a_standby_that_loses_its_connection_reconnects_and_still_takes_over(
    pg_cluster: PgCluster, pg_url: str, tmp_path: Path
) -> None:
    active = PgBroker(pg_url, tmp_path / "a")
    standby: PgBroker | None = None
    try:
        port = active.wait_listening()
        with connect(port) as conn:  # a transaction, committed before the failover
            ch = conn.channel()
            ch.queue_declare("jobs", durable=True)
            ch.tx_select()
            for i in range(20):
                ch.basic_publish("", "jobs", b"tx-%d" % i, pika.BasicProperties(delivery_mode=2))
            ch.tx_commit()
        standby = PgBroker(pg_url, tmp_path / "b")
        standby.wait_for(r"standby: another amqpd holds the lock")
        database = pg_url.rsplit("/", 1)[1]
        pg_cluster.psql(  # every amqpd session but the lock holder's
            database,
            "SELECT pg_terminate_backend(pid, 60000) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = 'amqpd' AND pid NOT IN"
            " (SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted)",
        )
        standby.wait_for(r"standby: lost the connection")
        assert active.role() == "active"
        active.kill()
        standby_port = standby.wait_listening()
        assert [body for body, _ in drain(standby_port, "jobs")] == [
            b"tx-%d" % i for i in range(20)
        ]
    finally:
        active.stop()
        if standby is not None:
            standby.stop()


def test_jms_failover_url_follows_the_active_to_the_standby(pg_url: str, tmp_path: Path) -> None:
    """The JMS client's `failover:` URL names both brokers of an active/standby pair: when the
    active dies, the standby takes over and the client moves to it by itself; every send that
    returned (each one confirmed) is there, unacknowledged deliveries come back redelivered."""
    active = PgBroker(pg_url, tmp_path / "a")
    standby: PgBroker | None = None
    try:
        first = active.wait_listening()
        second = spare_port()
        standby = PgBroker(pg_url, tmp_path / "b", port=second)
        standby.wait_for(r"standby: another amqpd holds the lock")
        urls = ",".join(f"amqp://guest:guest@127.0.0.1:{p}/%2F" for p in (first, second))
        url = f"failover:({urls})?randomize=false&initialReconnectDelay=50&maxReconnectDelay=500"
        connection = ConnectionFactory(url).create_connection()
        try:
            session = connection.create_session(ack_mode=AckMode.CLIENT_ACKNOWLEDGE)
            queue = session.queue("jms-jobs")
            producer = session.create_producer(queue)
            sent = [f"m{n}" for n in range(20)]
            for body in sent[:10]:
                producer.send(body)  # persistent by default: returns once confirmed
            consumer = session.create_consumer(queue)
            connection.start()
            held = consumer.receive(DEADLINE)  # delivered, not acknowledged
            assert held is not None and held.body == "m0"

            active.kill()
            for body in sent[10:]:
                producer.send(body)  # blocks while the client fails over, then confirmed
            assert standby.wait_listening() == second
            assert connection.broker_url.endswith(f":{second}/%2F")
            got: list[tuple[str, bool]] = []
            while len({body for body, _ in got}) < len(sent):
                message = consumer.receive(DEADLINE)
                assert message is not None, got
                got.append((str(message.body), message.redelivered))
                message.acknowledge()
            assert {body for body, _ in got} == set(sent)  # nothing confirmed is lost
            assert ("m0", True) in got  # the unacknowledged one comes back redelivered
        finally:
            connection.close()
    finally:
        active.stop()
        if standby is not None:
            standby.stop()
