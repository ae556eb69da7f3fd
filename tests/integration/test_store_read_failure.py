"""A store that cannot be read while paged-out messages expire does not take the server down:
the error is logged, nothing is lost, everyone else is still served, and the dead-lettering
resumes on the ticker once the store reads again."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pika

from amqpd.model.queue import HOT_WINDOW
from persistence.errors import StoreError
from tests.conftest import running_server

PAGED = 50
DEADLINE = 30.0  # seconds; generous for a loaded machine


class Unreadable:
    def read_bodies(
        self, queue: tuple[str, str], after_seq: int, limit: int
    ) -> list[tuple[int, bytes]]:
        raise StoreError("disk I/O error (injected)")


def _wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.05)


def _ready(port: int, queue: str) -> int:
    with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port)) as conn:
        return conn.channel().queue_declare(queue, passive=True).method.message_count


def test_a_body_read_failure_is_contained_and_dead_lettering_resumes(tmp_path: Path) -> None:
    with running_server(tick_interval=0.1, data_dir=tmp_path) as server:
        reader = server.store.body_reader
        assert reader is not None
        server.broker.set_body_loader(Unreadable())
        with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.port)) as conn:
            ch = conn.channel()
            ch.queue_declare("dead", durable=True)
            dlx = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"}
            ch.queue_declare("q", durable=True, arguments=dlx)
            persistent = pika.BasicProperties(delivery_mode=2)
            for n in range(HOT_WINDOW):  # the head keeps its bodies in memory
                ch.basic_publish("", "q", b"%05d" % n, persistent)
            expiring = pika.BasicProperties(delivery_mode=2, expiration="1")
            for n in range(PAGED):  # the tail is paged out once committed, and expires
                ch.basic_publish("", "q", b"tail %05d" % n, expiring)
            ch.queue_declare("sync", durable=True)  # a persistent message here waits for a commit
            ch.confirm_delivery()  # everything before is committed: the tail is paged out
            ch.basic_publish("", "sync", b"", persistent)
            queue = server.broker.vhosts["/"].queues["q"]
            assert sum(entry.message.body is None for entry in queue.ready) == PAGED

            # Take the head: the expired tail behind it must be read back to be dead-lettered.
            for _ in range(HOT_WINDOW):
                method, _props, _body = ch.basic_get("q", auto_ack=True)
                assert method is not None
            _wait_until(lambda: queue.read_failing, "the failed read is reported")

            # Nothing is lost, nothing is dead-lettered half-read, and the server serves.
            assert _ready(server.port, "q") == PAGED
            assert _ready(server.port, "dead") == 0
            ch.basic_publish("", "sync", b"still serving", persistent)
            method, _props, body = ch.basic_get("sync", auto_ack=True)
            assert method is not None and body == b""
            method, _props, body = ch.basic_get("sync", auto_ack=True)
            assert method is not None and body == b"still serving"

        server.broker.set_body_loader(reader)  # the store reads again: the ticker retries
        _wait_until(lambda: _ready(server.port, "dead") == PAGED, "the tail is dead-lettered")
        assert _ready(server.port, "q") == 0
        assert not queue.read_failing
