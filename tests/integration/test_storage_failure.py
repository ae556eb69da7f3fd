"""A storage failure nacks, fails tx.commit, blocks publishers, and loses nothing confirmed."""

from __future__ import annotations

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
    committer = server._committer  # the store boundary: the group committer's store
    assert committer is not None
    faulty = FailingStore(committer._store)
    committer._store = faulty  # type: ignore[assignment]
    return faulty


def test_storage_failure_nacks_blocks_and_recovers(tmp_path: Path) -> None:
    with running_server(data_dir=tmp_path) as server:
        faulty = _inject(server)
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.port))
        blocked: list[str] = []
        conn.add_on_connection_blocked_callback(
            lambda _c, frame: blocked.append(frame.method.reason)
        )
        conn.add_on_connection_unblocked_callback(lambda _c, _frame: blocked.append("unblocked"))
        ch = conn.channel()
        ch.queue_declare("durable", durable=True)
        ch.confirm_delivery()
        ch.basic_publish("", "durable", b"before", PERSISTENT)

        faulty.failing = True
        with pytest.raises(pika.exceptions.NackError):
            ch.basic_publish("", "durable", b"during", PERSISTENT)
        conn.process_data_events(time_limit=0)  # pika runs blocked callbacks here
        assert blocked and "storage failure" in blocked[0]

        tx = conn.channel()
        tx.tx_select()
        tx.basic_publish("", "durable", b"tx-during", PERSISTENT)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            tx.tx_commit()
        assert info.value.reply_code == 541 and "storage" in info.value.reply_text

        # transient messages to transient queues are not affected
        ch.queue_declare("transient")
        ch.basic_publish("", "transient", b"fine")

        faulty.failing = False
        ch.basic_publish("", "durable", b"after", PERSISTENT)
        conn.process_data_events(time_limit=0)
        assert blocked[-1] == "unblocked"
        conn.close()
    with running_server(data_dir=tmp_path) as server:
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.port))
        ch = conn.channel()
        bodies = []
        while (message := ch.basic_get("durable", auto_ack=True))[0] is not None:
            bodies.append(message[2])
        conn.close()
    assert b"before" in bodies and b"after" in bodies  # everything confirmed is there
    assert b"during" not in bodies and b"tx-during" not in bodies  # nacked / failed: not kept
