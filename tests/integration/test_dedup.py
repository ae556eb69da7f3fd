"""x-message-deduplication against the real broker: duplicates are acked and dropped, the
window is bounded, and it survives a SIGKILL and a restart on the same data directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest

from tests.integration.broker_process import BrokerProcess


def _publish(ch: Any, ids: list[str | None], headers: dict[str, Any] | None = None) -> None:
    for message_id in ids:
        ch.basic_publish(
            "",
            "dedup",
            b"body",
            pika.BasicProperties(message_id=message_id, headers=headers, delivery_mode=2),
            mandatory=True,  # a dropped duplicate must not come back as unroutable
        )


def _count(ch: Any, queue: str = "dedup") -> int:
    return int(ch.queue_declare(queue, passive=True).method.message_count)


def _channel(url: str) -> Any:
    ch = pika.BlockingConnection(pika.URLParameters(url)).channel()
    ch.confirm_delivery()  # basic_publish raises on a nack or a return
    return ch


def test_duplicates_are_dropped_within_a_window_that_survives_a_crash(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    try:
        ch = _channel(broker.url)
        args = {"x-message-deduplication": True, "x-deduplication-window": 5}
        ch.queue_declare("dedup", durable=True, arguments=args)
        _publish(ch, [f"m{i}" for i in range(10)])
        _publish(ch, [f"m{i}" for i in range(5, 10)])  # duplicates: acked, dropped
        assert _count(ch) == 10
        ch.basic_get("dedup", auto_ack=True)  # a consumed message's id stays in the window
        # A no-ack get is not confirmed to anyone: its delete is only known to be stored once
        # a later batch has committed. Batches commit in order, so a confirmed persistent
        # publish after it is the barrier (without it a kill -9 may bring the message back).
        ch.queue_declare("barrier", durable=True)
        ch.basic_publish("", "barrier", b"", pika.BasicProperties(delivery_mode=2))
        ch.connection.close()

        broker.kill()
        broker.restart()
        ch = _channel(broker.url)
        assert _count(ch) == 9
        _publish(ch, [f"m{i}" for i in range(5, 10)])  # still duplicates after the restart
        assert _count(ch) == 9
        _publish(ch, ["m0"])  # fell out of the 5-id window long ago: accepted again
        _publish(ch, [None, None])  # no message_id: never deduplicated
        assert _count(ch) == 12
        with pytest.raises(pika.exceptions.ChannelClosedByBroker, match="406"):
            ch.queue_declare("bad", arguments={"x-message-deduplication": "yes"})
        ch.connection.close()
    finally:
        broker.stop()


def test_deduplication_on_a_header(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    try:
        ch = _channel(broker.url)
        args = {"x-message-deduplication": True, "x-deduplication-header": "order"}
        ch.queue_declare("dedup", durable=True, arguments=args)
        _publish(ch, ["a", "b"], headers={"order": "o-1"})
        _publish(ch, ["c"], headers={"order": "o-2"})
        assert _count(ch) == 2
        ch.connection.close()
    finally:
        broker.stop()
