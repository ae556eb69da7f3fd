"""Stage 2's forwarding link into a running worker (amqpd/shell/workers/forward_links.py):
a peer that speaks the link protocol, standing in for another worker's routing, hands worker
1 of a ``--workers 2`` node publishes for v1's queues; they are answered only once settled
(after their batch is written, for persistent ones), refused where a queue refuses them,
and consumed by an ordinary AMQP client. Nothing of a node's client-facing path forwards yet:
this is the owner's half, live."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest
from pamqp.commands import Basic
from pamqp.header import ContentHeader

from amqpd.wire.codec import encode_shortstr
from amqpd.wire.forwarding import (
    NO_EXPIRY,
    NO_PRIORITY,
    PERSISTENT,
    PROMISED,
    RecordReader,
    Settled,
    encode_forward,
    encode_settled,
    encode_vhost,
    queue_names,
)
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_workers import _add_v1, _channel, _workers

pytestmark = pytest.mark.usefixtures("whole_vhosts")  # tests/conftest.py


def _runtime(worker_pid: int) -> Path:
    for item in Path(f"/proc/{worker_pid}/environ").read_bytes().split(b"\0"):
        if item.startswith(b"AMQPD_WORKER_DIR="):
            return Path(item.split(b"=", 1)[1].decode())
    raise AssertionError("the worker has no runtime directory")


def _forward(out: bytearray, publish_id: int, queues: list[str], body: bytes) -> None:
    header = ContentHeader(0, len(body), Basic.Properties(delivery_mode=2)).marshal()
    encode_forward(
        out, publish_id, PERSISTENT | PROMISED, NO_PRIORITY, NO_EXPIRY, len(queues),
        queue_names(queues), encode_shortstr(""), encode_shortstr(queues[0]), None, None,
        header, body,
    )  # fmt: skip


class Peer:
    """This test's end of a link: writes records, reads SETTLED answers."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(30)
        self.sock.connect(str(path))
        self.reader = RecordReader()

    def __enter__(self) -> Peer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def send(self, out: bytearray) -> None:
        self.sock.sendall(bytes(out))

    def answers_through(self, publish_id: int) -> list[int]:
        """Read answers until one covers ``publish_id``; every refused id seen."""
        refused: list[int] = []
        while True:
            while (record := self.reader.next_record()) is not None:
                assert isinstance(record, Settled)
                refused += record.refused
                if record.through >= publish_id:
                    return refused
            data = self.sock.recv(65536)
            assert data, "the worker closed the link"
            self.reader.feed(data)


@contextmanager
def _node(tmp_path: Path) -> Iterator[tuple[BrokerProcess, Path]]:
    data = tmp_path / "data"
    broker = BrokerProcess(data, extra=("--workers", "2", "--no-management", "--no-prometheus"))
    try:
        _add_v1(data)  # v1 lives on worker 1
        yield broker, _runtime(_workers(broker.proc.pid)[1]) / "w1.forward"
        broker.stop()
    finally:
        with suppress(Exception):
            broker.kill()


def test_a_worker_enqueues_forwarded_publishes_and_answers_once_they_are_settled(
    tmp_path: Path,
) -> None:
    with _node(tmp_path) as (broker, link):
        with _channel(broker.port, "v1") as channel:
            channel.queue_declare("orders", durable=True)
            channel.queue_declare("audit", durable=True)
            capped = {"x-max-length": 1, "x-overflow": "reject-publish"}
            channel.queue_declare("capped", arguments=capped)
        out = bytearray()
        encode_vhost(out, "v1")
        for publish_id in range(1, 501):  # one chunk, one commit: fanned out to two queues
            _forward(out, publish_id, ["orders", "audit"], b"m%d" % publish_id)
        _forward(out, 501, ["capped"], b"first")
        _forward(out, 502, ["capped", "orders"], b"refused: capped is full")
        _forward(out, 503, ["deleted meanwhile"], b"confirmed, in no queue")
        encode_vhost(out, "gone")
        _forward(out, 504, ["orders"], b"a vhost deleted meanwhile")
        with Peer(link) as peer:
            peer.send(out)
            assert peer.answers_through(504) == [502]

        with _channel(broker.port, "v1") as channel:
            for queue, expected in (("orders", 500), ("audit", 500), ("capped", 1)):
                assert channel.queue_declare(queue, passive=True).method.message_count == expected
            got = [channel.basic_get("orders", auto_ack=True)[2] for _ in range(3)]
            assert got == [b"m1", b"m2", b"m3"]  # in the order forwarded

        # what was answered is durable: a killed node still has it
        broker.kill()
        broker.restart()
        with _channel(broker.port, "v1") as channel:
            assert channel.queue_declare("audit", passive=True).method.message_count == 500


def test_a_corrupt_link_is_closed_and_the_worker_keeps_serving(tmp_path: Path) -> None:
    with _node(tmp_path) as (broker, link):
        worker = _workers(broker.proc.pid)[1]
        with Peer(link) as bad:
            out = bytearray()
            encode_settled(out, 1, [])  # the owner's own answer, sent to it: a protocol error
            bad.send(out)
            assert bad.sock.recv(10) == b""  # closed
        with Peer(link) as bad:
            out = bytearray()
            _forward(out, 7, ["q"], b"")
            _forward(out, 7, ["q"], b"the same id again")
            bad.send(out)
            assert bad.sock.recv(10) == b""  # closed
        with _channel(broker.port, "v1") as channel:
            channel.queue_declare("q")
        out = bytearray()
        encode_vhost(out, "v1")
        _forward(out, 1, ["q"], b"after")
        with Peer(link) as peer:  # another link still works
            peer.send(out)
            assert peer.answers_through(1) == []
        with _channel(broker.port, "v1") as channel:
            assert channel.basic_get("q", auto_ack=True)[2] == b"after"
        assert _workers(broker.proc.pid)[1] == worker  # the same process: it never crashed
