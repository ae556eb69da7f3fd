"""A storage failure nacks, fails tx.commit, blocks publishers, and loses nothing confirmed."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pika
import pika.exceptions
import pytest

from amqpd.shell.server import Server
from persistence.errors import StoreError
from persistence.records import Batch
from tests.conftest import running_server

PERSISTENT = pika.BasicProperties(delivery_mode=2)


class FailingStore:
    """Wraps the real store; fails every batch while ``failing`` is set (disk full, I/O
    error, read-only file all surface as StoreError at this boundary)."""

    def __init__(self, store: object) -> None:
        self.store = store
        self.failing = False

    async def apply(self, batch: Batch) -> None:
        if self.failing:
            raise StoreError(f"batch {batch.id}: database or disk is full (injected)")
        await self.store.apply(batch)  # type: ignore[attr-defined]


def _inject(server: Server) -> FailingStore:
    committer = server.store.committer  # the store boundary: the group committer's store
    assert committer is not None
    faulty = FailingStore(committer._store)
    committer._store = faulty  # type: ignore[assignment]
    return faulty


def _until(conn: pika.BlockingConnection, done: Callable[[], bool], seconds: float = 15) -> None:
    """Run ``conn``'s callbacks until ``done()`` (the broker probes a failing store and
    measures free space once a second)."""
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, "timed out"
        conn.process_data_events(time_limit=0.05)


def test_storage_failure_nacks_blocks_and_recovers(tmp_path: Path) -> None:
    with running_server(data_dir=tmp_path) as server:
        faulty = _inject(server)
        params = pika.ConnectionParameters("127.0.0.1", server.port)
        watcher = pika.BlockingConnection(params)
        sub = watcher.channel()
        for queue in ("durable", "watched"):  # durable: checked after a restart
            sub.queue_declare(queue, durable=True)
            sub.queue_bind(queue, "amq.fanout")

        conn = pika.BlockingConnection(params)
        blocked: list[str] = []
        conn.add_on_connection_blocked_callback(
            lambda _c, frame: blocked.append(frame.method.reason)
        )
        conn.add_on_connection_unblocked_callback(lambda _c, _frame: blocked.append("unblocked"))
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("amq.fanout", "", b"before", PERSISTENT)  # acked: all written

        faulty.failing = True
        tx_conn = pika.BlockingConnection(params)
        tx = tx_conn.channel()
        tx.tx_select()
        tx.basic_publish("amq.fanout", "", b"tx-during", PERSISTENT)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            tx.tx_commit()  # the first failed batch: the disk alarm goes on
        assert info.value.reply_code == 541 and "storage" in info.value.reply_text
        tx_conn.close()  # it published nothing since: not blocked

        with pytest.raises(pika.exceptions.NackError):
            ch.basic_publish("amq.fanout", "", b"during", PERSISTENT)
        conn.process_data_events(time_limit=0)  # pika runs blocked callbacks here
        assert blocked == ["low on disk"]  # RabbitMQ's disk alarm reason, sent once

        consumed: list[bytes] = []
        sub.basic_consume("watched", lambda _ch, _m, _p, body: consumed.append(body), True)
        faulty.failing = False  # the broker's probe (an empty batch) commits: unblocked
        _until(conn, lambda: blocked[-1] == "unblocked")
        ch.basic_publish("amq.fanout", "", b"after", PERSISTENT)
        _until(watcher, lambda: len(consumed) >= 2)
        watcher.process_data_events(time_limit=0.2)  # nothing else arrives
        assert consumed == [b"before", b"after"]  # a nacked message is never delivered
        assert blocked == ["low on disk", "unblocked"]
        conn.close()
        watcher.close()
    with running_server(data_dir=tmp_path) as server:
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.port))
        ch = conn.channel()
        bodies = []
        while (message := ch.basic_get("durable", auto_ack=True))[0] is not None:
            bodies.append(message[2])
        conn.close()
    assert bodies == [b"before", b"after"]  # everything confirmed, nothing nacked
