"""Helpers for the shovel tests: publish with confirms, count, drain, run ``amqpd ctl``."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pika
import pika.exceptions

DEADLINE = 120.0  # seconds: generous, the machine is shared


def wait_for(condition: Callable[[], bool], what: str, timeout: float = DEADLINE) -> None:
    """Poll ``condition`` until true; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)  # polling an observable condition: no event crosses processes
    raise AssertionError(f"timed out waiting for {what}")


def ctl(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``amqpd ctl ARGS --data-dir DATA_DIR``."""
    command, *rest = args
    return subprocess.run(
        [sys.executable, "-m", "amqpd", "ctl", command, "--data-dir", str(data_dir), *rest],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def set_shovel(data_dir: Path, name: str, value: dict[str, Any]) -> None:
    """``amqpd ctl set-parameter shovel NAME JSON`` (asserts success)."""
    done = ctl(data_dir, "set-parameter", "shovel", name, json.dumps(value))
    assert done.returncode == 0, done.stderr


def publish(url: str, queue: str, bodies: range) -> None:
    """Publish persistent messages (bodies: the numbers) with confirms to a durable queue."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = conn.channel()
        channel.confirm_delivery()
        channel.queue_declare(queue, durable=True)
        persistent = pika.BasicProperties(delivery_mode=2)
        for number in bodies:
            channel.basic_publish("", queue, str(number).encode(), persistent)
    finally:
        conn.close()


def count(url: str, queue: str) -> int:
    """Messages ready in ``queue`` (0 if the broker or the queue is not there)."""
    try:
        conn = pika.BlockingConnection(pika.URLParameters(url))
    except pika.exceptions.AMQPError:
        return 0
    try:
        declared = conn.channel().queue_declare(queue, passive=True)
        return int(declared.method.message_count)
    except pika.exceptions.AMQPError:
        return 0
    finally:
        if conn.is_open:
            conn.close()


def drain(url: str, queue: str, expected: int) -> tuple[set[int], int]:
    """Consume (and ack) until ``expected`` distinct bodies arrived or the queue stays
    empty; returns the distinct bodies and how many messages arrived in all."""
    seen: set[int] = set()
    total = 0
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = conn.channel()
        channel.basic_qos(prefetch_count=500)
        deadline = time.monotonic() + DEADLINE
        for _method, _props, body in channel.consume(queue, inactivity_timeout=5):
            if body is None:  # 5 s without a message: the queue is drained
                break
            seen.add(int(body))
            total += 1
            channel.basic_ack(_method.delivery_tag)
            if len(seen) >= expected or time.monotonic() > deadline:
                break
        channel.cancel()
    finally:
        conn.close()
    return seen, total


class Sink:
    """A consumer that drains ``queue`` on ``url`` from a thread for as long as it runs,
    acking everything and reconnecting whenever the broker goes away: the destination's
    own consumer. Messages it took are safe in `seen` even if that broker later loses its
    queue in a crash (a test of the shovel must not depend on the other broker's own
    durability: RabbitMQ 3.10 has been seen to come back from a kill -9 under heavy load
    without a durable queue it had confirmed messages into)."""

    def __init__(self, url: str, queue: str) -> None:
        self.url, self.queue = url, queue
        self.seen: set[int] = set()
        self.total = 0
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sink", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._consume()
            except (pika.exceptions.AMQPError, OSError):
                self._stopping.wait(0.2)  # the broker is away, or the queue not there yet

    def _consume(self) -> None:
        conn = pika.BlockingConnection(pika.URLParameters(self.url))
        try:
            channel = conn.channel()
            channel.basic_qos(prefetch_count=500)
            channel.basic_consume(self.queue, self._on_message)
            while not self._stopping.is_set():
                conn.process_data_events(time_limit=0.2)
        finally:
            if conn.is_open:
                conn.close()

    def _on_message(self, channel: Any, method: Any, _props: Any, body: bytes) -> None:
        with self._changed:
            self.seen.add(int(body))
            self.total += 1
            self._changed.notify_all()
        channel.basic_ack(method.delivery_tag)

    def wait_for(self, distinct: int, timeout: float = DEADLINE) -> None:
        """Block until ``distinct`` different messages arrived (fail after ``timeout``)."""
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.seen) >= distinct, timeout):
                raise AssertionError(
                    f"timed out waiting for {distinct} messages in {self.queue}: "
                    f"{len(self.seen)} arrived"
                )

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(30)
