"""An acknowledgement is on the wire when the call returns: a consumer killed right after
``receive()`` (AUTO) or ``acknowledge()`` (CLIENT, INDIVIDUAL) never gets the message back.

Each run is a real process (forked by `tests.integration.jms_crash_child`) that receives one
message, reports it on stdout and is SIGKILLed as soon as the report is read. Runs go in
parallel batches against one amqpd (and the private RabbitMQ node when it is installed);
the broker requeues whatever a killed consumer held
unacknowledged (its prefetched message), so the check is: every reported message was
reported once and is not in the queue afterwards, and no message was lost.

Against RabbitMQ the consumers use ``send_acks_async=False`` (ActiveMQ's sendAcksAsync):
with acks only written to the socket, RabbitMQ gave 0-2 of 100 messages back (it does not
seem to process every frame of a connection that is reset), so the call there waits for a
round trip that proves the broker processed the ack (see docs/jms.md).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pika
import pytest

from interop.jms import AckMode, ConnectionFactory
from tests.conftest import node_under_test
from tests.integration.test_jms_brokers import BROKERS, rabbit_node

RUNS = 100
BATCH = 10
SPARE = 3 * BATCH  # messages beyond RUNS: prefetched by children still running


@pytest.fixture(scope="module", params=BROKERS)
def broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, int]]:
    """amqpd (one server for the module: `node_under_test`) or the session's RabbitMQ
    node."""
    if request.param == "rabbitmq":
        node = rabbit_node()
        node.wait()
        yield "rabbitmq", node.port
        return
    with node_under_test(tmp_path_factory) as server:
        yield "amqpd", server.port


def _consumer_count(port: int, queue: str) -> int:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    try:
        return int(conn.channel().queue_declare(queue, passive=True).method.consumer_count)
    finally:
        conn.close()


def _drain(port: int, queue: str) -> list[str]:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    try:
        channel = conn.channel()
        bodies = []
        while True:
            method, _props, body = channel.basic_get(queue, auto_ack=True)
            if method is None:
                return bodies
            bodies.append(body.decode())
    finally:
        conn.close()


@contextlib.contextmanager
def _zygote(url: str, queue: str, mode: AckMode, sync: bool) -> Iterator[subprocess.Popen[str]]:
    extra = ["sync"] if sync else []
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.jms_crash_child", url, queue, mode.name, *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    try:
        yield proc
    finally:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.close()
        proc.wait(30)
        proc.stdout.close()


@pytest.mark.parametrize(
    "mode",
    [AckMode.AUTO_ACKNOWLEDGE, AckMode.CLIENT_ACKNOWLEDGE, AckMode.INDIVIDUAL_ACKNOWLEDGE],
)
def test_killed_after_ack_never_sees_the_message_again(
    broker: tuple[str, int], mode: AckMode
) -> None:
    kind, port = broker
    url = f"amqp://guest:guest@127.0.0.1:{port}/%2F"
    queue = f"crash.{mode.name.lower()}.{uuid.uuid4().hex[:8]}"
    sync = kind == "rabbitmq"  # see the module doc
    sent = [f"m{n:03d}" for n in range(RUNS + SPARE)]
    with ConnectionFactory(url).create_connection() as connection:
        session = connection.create_session()
        producer = session.create_producer(session.queue(queue))
        for body in sent:
            producer.send(body)
    reported: list[str] = []
    live: set[int] = set()
    with _zygote(url, queue, mode, sync) as zygote:
        assert zygote.stdin is not None and zygote.stdout is not None
        try:
            while len(reported) < RUNS:
                batch = min(BATCH, RUNS - len(reported))
                zygote.stdin.write("go\n" * batch)
                zygote.stdin.flush()
                for _ in range(batch):
                    line = zygote.stdout.readline()
                    assert line, "the crash-test zygote exited"
                    pid_text, body = line.split()
                    os.kill(int(pid_text), signal.SIGKILL)  # the moment it reports
                    reported.append(body)
                    live.add(int(pid_text))
        finally:
            for pid in live:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    assert "NONE" not in reported
    deadline = time.monotonic() + 60
    while _consumer_count(port, queue):  # the broker has not yet seen every death
        assert time.monotonic() < deadline, "killed consumers still registered"
        time.sleep(0.05)
    left = _drain(port, queue)
    assert len(set(reported)) == RUNS, sorted(b for b in reported if reported.count(b) > 1)
    assert not set(reported) & set(left), sorted(set(reported) & set(left))
    assert sorted(reported + left) == sent  # nothing lost either
