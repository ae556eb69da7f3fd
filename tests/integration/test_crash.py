"""Crash test: SIGKILL the broker under load; nothing confirmed or committed is lost.

Each round starts amqpd as a subprocess on the same data directory, runs publishers at full
speed (two pika confirm channels, one pipelined raw confirm publisher, one tx publisher),
kills the broker with SIGKILL at a random moment, restarts it and checks that every
confirmed or committed message is present exactly once, uncorrupted, and that nothing
appears that was never published.
"""

from __future__ import annotations

import hashlib
import os
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pika
import pika.exceptions
import pytest
from pamqp import commands, frame

from tests.integration.broker_process import BrokerProcess
from tests.integration.raw_client import PeerClosed, RawClient

pytestmark = pytest.mark.slow
QUEUE = "crash"
PERSISTENT = pika.BasicProperties(delivery_mode=2)


def _body(message_id: str) -> bytes:
    digest = hashlib.sha256(message_id.encode()).hexdigest()
    return f"{message_id}|{digest}|".encode() + b"p" * 200


def _parse(body: bytes) -> str:
    message_id, digest, padding = body.split(b"|")
    assert hashlib.sha256(message_id).hexdigest().encode() == digest, f"corrupted {body[:80]!r}"
    assert padding == b"p" * 200, "corrupted padding"
    return message_id.decode()


class Ledger:
    """What each publisher attempted and what the broker promised."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.attempted: set[str] = set()
        self.promised: set[str] = set()

    def attempt(self, ids: list[str]) -> None:
        with self.lock:
            self.attempted.update(ids)

    def promise(self, ids: list[str]) -> None:
        with self.lock:
            self.promised.update(ids)


@contextmanager
def _pika_connection(port: int) -> Iterator[pika.BlockingConnection | None]:
    """A pika connection (None if the broker is already gone), closed quietly afterwards."""
    try:
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    except pika.exceptions.AMQPError:
        yield None
        return
    try:
        yield conn
    finally:
        try:
            if conn.is_open:
                conn.close()
        except (pika.exceptions.AMQPError, OSError):
            pass


def _pika_confirm_publisher(port: int, name: str, ledger: Ledger, stop: threading.Event) -> None:
    with _pika_connection(port) as conn:
        if conn is not None:
            _confirm_loop(conn, name, ledger, stop)


def _confirm_loop(
    conn: pika.BlockingConnection, name: str, ledger: Ledger, stop: threading.Event
) -> None:
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        n = 0
        while not stop.is_set():
            message_id = f"{name}-{n}"
            ledger.attempt([message_id])
            ch.basic_publish("", QUEUE, _body(message_id), PERSISTENT)
            ledger.promise([message_id])
            n += 1
    except (pika.exceptions.AMQPError, OSError):
        pass  # the broker was killed under us: expected


def _pika_tx_publisher(port: int, name: str, ledger: Ledger, stop: threading.Event) -> None:
    with _pika_connection(port) as conn:
        if conn is not None:
            _tx_loop(conn, name, ledger, stop)


def _tx_loop(
    conn: pika.BlockingConnection, name: str, ledger: Ledger, stop: threading.Event
) -> None:
    try:
        ch = conn.channel()
        ch.tx_select()
        n = 0
        while not stop.is_set():
            ids = [f"{name}-{n + k}" for k in range(5)]
            ledger.attempt(ids)
            for message_id in ids:
                ch.basic_publish("", QUEUE, _body(message_id), PERSISTENT)
            ch.tx_commit()
            ledger.promise(ids)
            n += 5
    except (pika.exceptions.AMQPError, OSError):
        pass  # the broker was killed under us: expected


def _raw_pipelined_publisher(port: int, name: str, ledger: Ledger, stop: threading.Event) -> None:
    """Keeps up to 300 publishes in flight; maps (coalesced) acks back to message ids."""
    try:
        client = RawClient.open(port)
    except OSError:
        return
    try:
        client.open_channel(1)
        client.rpc(1, commands.Confirm.Select(), commands.Confirm.SelectOk)
        in_flight: dict[int, str] = {}  # sequence number -> message id, ascending
        sent = 0
        persistent = commands.Basic.Properties(delivery_mode=2)
        while not stop.is_set():
            burst = []
            while len(in_flight) < 300:
                sent += 1
                in_flight[sent] = f"{name}-{sent}"
                burst.append(in_flight[sent])
            ledger.attempt(burst)
            client.send_bytes(
                b"".join(
                    frame.marshal(f, 1)
                    for message_id in burst
                    for f in client.publish_frames(
                        1, _body(message_id), routing_key=QUEUE, properties=persistent
                    )
                )
            )
            _channel, value = client.read_frame(timeout=10)
            if isinstance(value, commands.Basic.Ack | commands.Basic.Nack):
                tag = value.delivery_tag
                settled = [s for s in in_flight if s <= tag] if value.multiple else [tag]
                ids = [in_flight.pop(s) for s in settled]
                if isinstance(value, commands.Basic.Ack):
                    ledger.promise(ids)
    except (PeerClosed, OSError, TimeoutError):
        pass
    finally:
        client.close()


def _drain_and_check(port: int, ledger: Ledger) -> int:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    try:
        ch = conn.channel()
        ch.queue_declare(QUEUE, durable=True)
        seen: dict[str, int] = {}
        while True:
            method, _props, body = ch.basic_get(QUEUE, auto_ack=True)
            if method is None:
                break
            message_id = _parse(body)
            seen[message_id] = seen.get(message_id, 0) + 1
    finally:
        conn.close()
    duplicates = {k: v for k, v in seen.items() if v > 1}
    assert not duplicates, f"messages present more than once: {list(duplicates)[:5]}"
    lost = ledger.promised - set(seen)
    assert not lost, f"{len(lost)} confirmed/committed messages lost, e.g. {sorted(lost)[:5]}"
    invented = set(seen) - ledger.attempted
    assert not invented, f"messages that were never published: {sorted(invented)[:5]}"
    return len(seen)


def test_sigkill_under_load_loses_nothing_confirmed(tmp_path: Path) -> None:
    rng = random.Random(int.from_bytes(os.urandom(4), "big"))
    data_dir = tmp_path / "data"
    for round_ in range(3):
        broker = BrokerProcess(data_dir)
        setup = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
        setup.channel().queue_declare(QUEUE, durable=True)
        setup.close()
        ledger = Ledger()
        stop = threading.Event()
        threads = [
            threading.Thread(
                target=_pika_confirm_publisher,
                args=(broker.port, f"r{round_}c{i}", ledger, stop),
                daemon=True,
            )
            for i in range(2)
        ]
        threads.append(
            threading.Thread(
                target=_pika_tx_publisher,
                args=(broker.port, f"r{round_}tx", ledger, stop),
                daemon=True,
            )
        )
        threads.append(
            threading.Thread(
                target=_raw_pipelined_publisher,
                args=(broker.port, f"r{round_}raw", ledger, stop),
                daemon=True,
            )
        )
        for thread in threads:
            thread.start()
        stop.wait(rng.uniform(0.5, 2.0))  # let the publishers run at full speed a while
        broker.kill()
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
            assert not thread.is_alive()
        assert len(ledger.promised) > 100, "the publishers got few confirms before the kill"
        restarted = BrokerProcess(data_dir)
        try:
            found = _drain_and_check(restarted.port, ledger)
            assert found >= len(ledger.promised)
        finally:
            restarted.stop()
