"""A deduplicating stream (``x-message-deduplication``) over pika against the real server:
amqpd is SIGKILLed while a publisher with confirms writes into it, then the whole range is
published again (as the Spark sink retries): each message id is in the stream once."""

from __future__ import annotations

import threading
from pathlib import Path

import pika

from tests.integration.broker_process import BrokerProcess
from tests.integration.stream_support import publish_confirmed
from tests.integration.test_streams import _read

ROWS = 10_000
ARGS = {"x-queue-type": "stream", "x-message-deduplication": True, "x-deduplication-window": ROWS}


def _count(url: str) -> int:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        return int(conn.channel().queue_declare("s", passive=True).method.message_count)
    finally:
        conn.close()


def test_kill_9_mid_publish_then_republish_keeps_each_id_once(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, extra=("--no-management",))
    try:
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        conn.channel().queue_declare("s", durable=True, arguments=ARGS)
        conn.close()
        errors: list[BaseException] = []

        def publish() -> None:
            try:
                publish_confirmed(broker.url, "s", range(ROWS))
            except BaseException as exc:  # the broker dies under it
                errors.append(exc)

        thread = threading.Thread(target=publish, daemon=True)
        thread.start()
        while _count(broker.url) < ROWS // 5:  # no event to wait on: poll the stream's length
            assert thread.is_alive(), errors
        broker.kill()
        thread.join(timeout=60)
        assert errors, "the publisher finished before the kill"
        broker.restart()
        publish_confirmed(broker.url, "s", range(ROWS))  # everything again, confirms included
        assert _count(broker.url) == ROWS
        got = _read(broker.url, ROWS, prefetch=1000, **{"x-stream-offset": "first"})
        assert [offset for offset, *_ in got] == list(range(ROWS))
        ids = sorted(int(props.message_id[1:]) for *_x, props in got)
        assert ids == list(range(ROWS))
    finally:
        broker.stop()
