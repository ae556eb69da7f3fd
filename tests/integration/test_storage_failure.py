"""A storage failure nacks, fails tx.commit, blocks publishers, and loses nothing confirmed."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pika
import pika.exceptions
import pytest
from pamqp import commands

from amqpd.shell.server import Server
from persistence.errors import StoreError
from persistence.records import Batch
from tests.conftest import running_server
from tests.integration.raw_client import RawClient

PERSISTENT = pika.BasicProperties(delivery_mode=2)
RAW_PERSISTENT = commands.Basic.Properties(delivery_mode=2)


class FailingStore:
    """Wraps the real store; fails every batch while ``failing`` is set (disk full, I/O
    error, read-only file all surface as StoreError at this boundary)."""

    def __init__(self, store: object) -> None:
        self.store = store
        self.failing = False

    async def apply(self, batch: Batch, *, inline: bool = False) -> None:
        if self.failing:
            raise StoreError(f"batch {batch.id}: database or disk is full (injected)")
        await self.store.apply(batch, inline=inline)  # type: ignore[attr-defined]


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
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("amq.fanout", "", b"before", PERSISTENT)  # acked: all written
        # The publisher during the failure writes each message in one write: while an alarm
        # is on, the broker (like RabbitMQ's reader) stops reading after the first chunk
        # that carried content, so a message split over two reads would wait unread.
        raw = RawClient.connect(server.port)
        raw.start(capabilities={"connection.blocked": True})
        raw.tune()
        raw.send_method(0, commands.Connection.Open(virtual_host="/"))
        raw.expect(commands.Connection.OpenOk, channel=0)
        raw.open_channel(1)
        raw.rpc(1, commands.Confirm.Select(), commands.Confirm.SelectOk)

        faulty.failing = True
        tx_conn = pika.BlockingConnection(params)
        tx = tx_conn.channel()
        tx.tx_select()
        tx.basic_publish("amq.fanout", "", b"tx-during", PERSISTENT)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            tx.tx_commit()  # the first failed batch: the disk alarm goes on
        assert info.value.reply_code == 541 and "storage" in info.value.reply_text
        tx_conn.close()  # it published nothing since: not blocked

        raw.publish(1, b"during", "amq.fanout", properties=RAW_PERSISTENT)
        replies = [raw.read_frame(timeout=30)[1] for _ in range(2)]
        nacks = [r for r in replies if isinstance(r, commands.Basic.Nack)]
        blocked = [r for r in replies if isinstance(r, commands.Connection.Blocked)]
        assert len(nacks) == 1 and nacks[0].delivery_tag == 1, replies
        assert [b.reason for b in blocked] == ["low on disk"]  # RabbitMQ's disk alarm reason

        consumed: list[bytes] = []
        sub.basic_consume("watched", lambda _ch, _m, _p, body: consumed.append(body), True)
        faulty.failing = False  # the broker's probe (an empty batch) commits: unblocked
        raw.expect(commands.Connection.Unblocked, channel=0, timeout=30)
        raw.close()
        ch.basic_publish("amq.fanout", "", b"after", PERSISTENT)
        _until(watcher, lambda: len(consumed) >= 2)
        watcher.process_data_events(time_limit=0.2)  # nothing else arrives
        assert consumed == [b"before", b"after"]  # a nacked message is never delivered
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
