"""A deduplicating stream (``x-message-deduplication``) through the sans-IO core: duplicates
are not appended, and after a crash that lost the store's batch (the stream's fsync comes
first) the window is rebuilt from the tail of the log (amqpd/model/stream_dedup.py)."""

from __future__ import annotations

from pathlib import Path

from pamqp import commands

from amqpd.model.broker import Broker
from amqpd.model.stream import StreamQueue
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
