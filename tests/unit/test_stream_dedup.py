"""A deduplicating stream (``x-message-deduplication``) through the sans-IO core: duplicates
are not appended, and after a crash that lost the store's batch (the stream's fsync comes
first) the window is rebuilt from the tail of the log (amqpd/model/stream_dedup.py)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from pamqp import commands

from amqpd.model.broker import Broker
from amqpd.model.stream import StreamQueue
from persistence.journal import Journal
from persistence.records import QueueDef, RecoveredState
from tests.unit.engine_driver import Client
from tests.unit.protocol_support import connect
from tests.unit.test_protocol_streams import _broker, _commit, _consume, _declare, _deliveries

DEDUP = {"x-message-deduplication": True, "x-deduplication-window": 4}


def _publish(client: Client, numbers: range) -> None:
    for number in numbers:
        client.publish(1, "s", b"m%d" % number, message_id=f"m{number}", delivery_mode=2)


def _bodies(broker: Broker) -> list[tuple[int, bytes]]:
    reader = connect(broker)
    _consume(reader, prefetch=100, **{"x-stream-offset": "first"})
    return [(offset, body) for _t, offset, body, _h in _deliveries(reader)]


def _close_logs(broker: Broker) -> None:
    queue = broker.vhosts["/"].queues["s"]
    assert isinstance(queue, StreamQueue)
    queue.log.close()


def test_a_republished_id_is_not_appended_again(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    client = connect(broker)
    _declare(client, **DEDUP)
    client.send(1, commands.Confirm.Select())
    _publish(client, range(3))
    _publish(client, range(1, 4))
    _commit(broker)
    acks = [m for m in client.methods() if isinstance(m, commands.Basic.Ack)]
    assert max(a.delivery_tag for a in acks) == 6  # duplicates are confirmed too
    assert _bodies(broker) == [(0, b"m0"), (1, b"m1"), (2, b"m2"), (3, b"m3")]


def test_window_rebuilt_from_the_log_when_the_stores_batch_was_lost(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    client = connect(broker)
    _declare(client, **DEDUP)
    _publish(client, range(6))
    _commit(broker)  # the log is fsynced; pretend the store's batch never committed
    _close_logs(broker)

    restarted = _broker(tmp_path)
    state = RecoveredState(
        [], [QueueDef("/", "s", False, {"x-queue-type": "stream", **DEDUP})], [], {}
    )
    restarted.recover(state)
    queue = restarted.vhosts["/"].queues["s"]
    assert isinstance(queue, StreamQueue) and queue.dedup is not None
    assert len(queue.dedup) == 4  # the window: the last four ids of the log
    publisher = connect(restarted)
    _publish(publisher, range(2, 8))  # m2..m5 again (all unconfirmed, say), then m6, m7
    _commit(restarted)
    assert _bodies(restarted) == [(n, b"m%d" % n) for n in range(8)]


def test_ids_of_a_chunk_a_failed_write_cut_off_leave_the_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = _broker(tmp_path)
    client = connect(broker)
    _declare(client, **{**DEDUP, "x-deduplication-window": 100})
    client.send(1, commands.Confirm.Select())
    _publish(client, range(2))
    _commit(broker)
    real = os.write

    def disk_full(_fd: int, _data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    # os.write itself: a compiled build calls its own _write_all directly, never a patch.
    monkeypatch.setattr(os, "write", disk_full)
    _publish(client, range(2, 4))
    journal = broker.journal
    assert isinstance(journal, Journal) and broker.dirty_streams is not None
    batch = journal.take_batch()
    assert batch is not None
    queue = broker.vhosts["/"].queues["s"]
    assert isinstance(queue, StreamQueue)
    with pytest.raises(OSError, match="No space"):  # what the shell's StreamFiles.sync meets
        queue.log.sync_targets()
    broker.dirty_streams.clear()
    broker.batch_failed(batch.id, OSError("cannot write stream files"))
    confirms = client.methods()
    assert [type(m) for m in confirms[-2:]] == [commands.Basic.Ack, commands.Basic.Nack]
    monkeypatch.setattr(os, "write", real)
    _publish(client, range(2, 4))  # the publisher retries m2 and m3 after the nack
    _commit(broker)
    assert _bodies(broker) == [(n, b"m%d" % n) for n in range(4)]
