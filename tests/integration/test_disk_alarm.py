"""The disk alarm on a real small file system (issue 28, item 1).

A 64 MB tmpfs (a loop-mounted ext4 image where tmpfs cannot be mounted; both need root, as
in CI) holds the data directory. A pika publisher sends 32 KiB persistent messages with
confirms as fast as it can; a fanout puts each in ``backlog`` (never consumed: it fills the
disk) and in ``watched`` (a consumer takes them). Episode one: the broker's own writes fill
the disk, and the free-space check, made after every MiB written, blocks the publisher
before a single batch fails (with only the once-a-second check, as before, the disk fills
and batches fail with SQLITE_FULL: this test then fails on the nack). Episode two: another
process takes all the free space at once under the running broker; the next check sees it
(SQLite may still write into the WAL's spare room meanwhile; where a batch fails instead,
its messages are nacked and never delivered - the same assertions hold). Each
episode is one connection.blocked "low on disk" and, once the test deletes its filler file,
one connection.unblocked. The consumer gets exactly the confirmed messages, and after a
restart ``backlog`` holds exactly them.
"""

from __future__ import annotations

import errno
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest

from amqpd.shell.server import Server
from tests.conftest import NodeUnderTest, node_process, running_server

MiB = 1024 * 1024
LIMIT = 8 * MiB  # disk_free_limit
BODY = 32 * 1024
PERSISTENT = pika.BasicProperties(delivery_mode=2)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 MB file system of its own, unmounted afterwards."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    tmpfs = ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount_point)]
    if subprocess.run(tmpfs, capture_output=True).returncode != 0:
        image = tmp_path / "disk.img"
        with image.open("wb") as f:
            f.truncate(64 * MiB)
        subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, capture_output=True)
        subprocess.run(["mount", "-o", "loop", str(image), str(mount_point)], check=True)
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)


@contextmanager
def _broker(data_dir: Path) -> Iterator[Server | NodeUnderTest]:
    """The broker on ``data_dir`` with the disk limit: in this process, or under
    ``AMQPD_TEST_WORKERS=N`` (scripts/test-all's workers passes) a ``--workers N`` node
    (tests/conftest.py `node_process`) whose shards share the small file system."""
    workers = int(os.environ.get("AMQPD_TEST_WORKERS") or 1)
    if workers > 1:
        with node_process(data_dir, workers, ("--disk-free-limit", str(LIMIT))) as node:
            yield node
        return
    with running_server(data_dir=data_dir, disk_free_limit=LIMIT) as server:
        yield server


def free_bytes(path: Path) -> int:
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


def fill(filler: Path, leave: int) -> None:
    """Take all but ``leave`` bytes of the free space at once (fallocate), then the rest
    of what is over ``leave`` as the file system allows."""
    with filler.open("ab") as f:
        for _ in range(64):
            free = free_bytes(filler.parent)
            if free <= leave:
                return
            try:
                os.posix_fallocate(f.fileno(), os.fstat(f.fileno()).st_size, free - leave)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                leave += 4096  # the broker took some meanwhile: take a little less


class Publisher(threading.Thread):
    """Publishes numbered 32 KiB messages with confirms until told to stop; records what
    was acked and nacked and the connection.blocked / unblocked it got. One thread owns
    the connection (a blocked connection leaves basic_publish waiting for its confirm)."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.acked: list[int] = []
        self.nacked: list[int] = []
        self.events: list[str] = []
        self.changed = threading.Condition()
        self.stop = threading.Event()
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", self.port))
            # BlockingConnection runs these callbacks only between its own calls, and a
            # blocked connection can leave basic_publish waiting: hook the I/O layer, which
            # sees the frames as they arrive (pika's documented SelectConnection API).
            impl = conn._impl
            impl.add_on_connection_blocked_callback(
                lambda _c, frame: self._record(self.events, frame.method.reason)
            )
            impl.add_on_connection_unblocked_callback(
                lambda _c, _frame: self._record(self.events, "unblocked")
            )
            channel = conn.channel()
            channel.confirm_delivery()
            number = 0
            while not self.stop.is_set():
                number += 1
                body = number.to_bytes(8, "big") + bytes(BODY - 8)
                try:
                    channel.basic_publish("amq.fanout", "", body, PERSISTENT)
                except pika.exceptions.NackError:
                    self._record(self.nacked, number)
                else:
                    self._record(self.acked, number)
            conn.close()
        except BaseException as exc:  # reported by the test thread
            self.failure = exc
            with self.changed:
                self.changed.notify_all()

    def _record(self, into: list[Any], item: object) -> None:
        with self.changed:
            into.append(item)
            self.changed.notify_all()

    def wait_for(self, what: str, done: Callable[[], bool], seconds: float = 20) -> None:
        with self.changed:
            ok = self.changed.wait_for(lambda: done() or self.failure is not None, seconds)
        assert self.failure is None, self.failure
        assert ok, f"timed out waiting for {what}: events {self.events}"


def test_a_full_disk_is_one_alarm_and_no_nacked_message_is_delivered(small_disk: Path) -> None:
    data_dir = small_disk / "data"
    data_dir.mkdir()
    filler = small_disk / "filler"
    with _broker(data_dir) as server:
        params = pika.ConnectionParameters("127.0.0.1", server.port)
        watcher = pika.BlockingConnection(params)
        sub = watcher.channel()
        for queue in ("backlog", "watched"):
            sub.queue_declare(queue, durable=True)
            sub.queue_bind(queue, "amq.fanout")
        consumed: list[int] = []
        sub.basic_consume(
            "watched",
            lambda _ch, _m, _p, body: consumed.append(int.from_bytes(body[:8], "big")),
            auto_ack=True,
        )
        fill(filler, leave=LIMIT + 4 * MiB)  # the broker's backlog will use up the rest

        publisher = Publisher(server.port)
        publisher.start()
        try:
            # Episode one: the broker's own writes approach the limit.
            publisher.wait_for("blocked", lambda: len(publisher.events) == 1)
            assert publisher.events == ["low on disk"]  # RabbitMQ's reason
            assert publisher.nacked == []  # the check kept pace: no batch failed
            filler.unlink()
            publisher.wait_for("unblocked", lambda: len(publisher.events) == 2)

            # Episode two: someone else fills the disk under the running broker.
            confirmed = len(publisher.acked)
            publisher.wait_for("publishing", lambda: len(publisher.acked) > confirmed + 20)
            fill(filler, leave=0)
            publisher.wait_for("blocked again", lambda: len(publisher.events) == 3)
            filler.unlink()
            publisher.wait_for("unblocked again", lambda: len(publisher.events) == 4)
            confirmed = len(publisher.acked)
            publisher.wait_for("publishing again", lambda: len(publisher.acked) > confirmed + 5)
        finally:
            publisher.stop.set()
            publisher.join(timeout=30)
        assert not publisher.is_alive() and publisher.failure is None
        assert publisher.events == ["low on disk", "unblocked"] * 2

        acked = set(publisher.acked)
        deadline = time.monotonic() + 20
        while len(consumed) < len(acked) and time.monotonic() < deadline:
            watcher.process_data_events(time_limit=0.1)
        watcher.process_data_events(time_limit=0.2)  # anything more would show now
        assert not set(consumed) & set(publisher.nacked)  # a nacked message: never delivered
        assert sorted(consumed) == sorted(acked)  # every confirmed one, each once
        watcher.close()

    with _broker(data_dir) as server:
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.port))
        channel = conn.channel()
        stored: list[int] = []
        channel.basic_consume(
            "backlog",
            lambda _ch, _m, _p, body: stored.append(int.from_bytes(body[:8], "big")),
            auto_ack=True,
        )
        deadline = time.monotonic() + 20
        while len(stored) < len(acked) and time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.1)
        count = channel.queue_declare("backlog", passive=True).method.message_count
        conn.close()
    assert sorted(stored) == sorted(acked) and count == 0  # all confirmed, nothing else
