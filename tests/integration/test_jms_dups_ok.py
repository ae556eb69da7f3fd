"""DUPS_OK and optimizeAcknowledge as ActiveMQ does them: the batch ack a ``receive()`` sends
when it crosses the threshold is on the wire when that ``receive()`` returns.

Each case runs a real consumer process (`tests.integration.jms_dups_child`) that receives
``count`` messages of 20 and SIGKILLs itself right after the last ``receive`` returns; the
broker requeues whatever was not acknowledged. What comes back must be exactly the messages
after the last batch: the batch is never lost, and the tail below the threshold (received
but not yet acknowledged) is redelivered, which DUPS_OK allows.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pika
import pytest

from interop.jms import AckMode, ConnectionFactory
from tests.conftest import node_under_test

SENT = 20


def _queue_state(port: int, queue: str) -> tuple[int, int]:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    try:
        ok = conn.channel().queue_declare(queue, passive=True).method
        return int(ok.message_count), int(ok.consumer_count)
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("mode", "optimize", "topic", "count", "acked"),
    [
        # DUPS_OK on a queue is AUTO: with optimizeAcknowledge a batch at 65 % of 10 = 7
        (AckMode.DUPS_OK_ACKNOWLEDGE, True, False, 8, 7),
        # DUPS_OK on a queue without it: each message's ack, written before receive returns
        (AckMode.DUPS_OK_ACKNOWLEDGE, False, False, 3, 3),
        # DUPS_OK on a topic: a batch at 50 % of 10 = 5
        (AckMode.DUPS_OK_ACKNOWLEDGE, False, True, 6, 5),
        (AckMode.AUTO_ACKNOWLEDGE, True, False, 9, 7),
    ],
)
def test_batch_ack_survives_a_crash_right_after_receive(
    mode: AckMode,
    optimize: bool,
    topic: bool,
    count: int,
    acked: int,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with node_under_test(tmp_path_factory) as server:
        url = f"amqp://guest:guest@127.0.0.1:{server.port}/%2F"
        tag = uuid.uuid4().hex[:8]
        if topic:
            client, name, topic_name = f"c{tag}", "sub", f"dups.{tag}"
            queue, dest = f"{client}.{name}", f"durable:{client}:{name}:{topic_name}"
            with ConnectionFactory(url, client_id=client).create_connection() as connection:
                session = connection.create_session()
                session.create_durable_subscriber(session.topic(topic_name), name).close()
        else:
            queue = dest = f"dups.{tag}"
            dest = f"queue:{queue}"
        with ConnectionFactory(url).create_connection() as connection:
            session = connection.create_session()
            target = session.topic(topic_name) if topic else session.queue(queue)
            producer = session.create_producer(target)
            for n in range(SENT):
                producer.send(f"m{n:02d}")
        args = [url, mode.name, "10", "1" if optimize else "0", str(count), dest]
        child = subprocess.run(
            [sys.executable, "-m", "tests.integration.jms_dups_child", *args],
            capture_output=True,
            timeout=120,
        )
        assert child.returncode == -9, child.stderr.decode()[-2000:]
        deadline = time.monotonic() + 60
        while (state := _queue_state(server.port, queue))[1]:  # broker still sees it
            assert time.monotonic() < deadline, "the killed consumer is still registered"
            time.sleep(0.05)
        assert state[0] == SENT - acked
