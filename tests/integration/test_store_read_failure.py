"""A store that cannot be read while the ticker expires paged-out messages does not take the
server down: the error is logged, everyone is still served, and the dead-lettering resumes
once the store reads again."""

from __future__ import annotations

import time
from pathlib import Path

import pika

from amqpd.model.queue import HOT_WINDOW
from persistence.errors import StoreError
from tests.conftest import running_server

PAGED = 50


class Unreadable:
    def read_bodies(
        self, queue: tuple[str, str], after_seq: int, limit: int
    ) -> list[tuple[int, bytes]]:
        raise StoreError("disk I/O error (injected)")


def _dead_count(port: int) -> int:
    with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port)) as conn:
        return conn.channel().queue_declare("dead", passive=True).method.message_count


def test_a_body_read_failure_in_the_ticker_is_contained(tmp_path: Path) -> None:
    with running_server(tick_interval=0.1, data_dir=tmp_path) as server:
        reader = server._body_reader
        assert reader is not None
        server.broker.set_body_loader(Unreadable())
        with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.port)) as conn:
            ch = conn.channel()
            ch.queue_declare("dead", durable=True)
            args = {
                "x-message-ttl": 2000,
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": "dead",
            }
            ch.queue_declare("ttl", durable=True, arguments=args)
            total = HOT_WINDOW + PAGED
            for n in range(total):
                ch.basic_publish("", "ttl", b"%05d" % n, pika.BasicProperties(delivery_mode=2))
            ch.queue_declare("sync")
            ch.confirm_delivery()  # everything before is committed: the tail is paged out
            ch.basic_publish("", "sync", b"", pika.BasicProperties(delivery_mode=2))
            ttl = server.broker.vhosts["/"].queues["ttl"]
            # (on a slow machine some head messages may already have expired meanwhile, so
            # fewer than PAGED entries became page-out candidates)
            paged = sum(entry.message.body is None for entry in ttl.ready)
            assert 0 < paged <= PAGED
        deadline = time.monotonic() + 10
        while not ttl.read_failing and time.monotonic() < deadline:
            time.sleep(0.1)  # the expired head is dead-lettered up to the first paged body
        stalled = _dead_count(server.port)
        time.sleep(0.5)  # several more ticks against the unreadable store
        assert _dead_count(server.port) == stalled  # the server still serves
        assert stalled + ttl.message_count == total and ttl.read_failing
        assert ttl.ready[0].message.body is None
        server.broker.set_body_loader(reader)
        deadline = time.monotonic() + 10
        while _dead_count(server.port) < total and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _dead_count(server.port) == total
