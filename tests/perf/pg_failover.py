"""Failover time on a shared PostgreSQL store: kill -9 of the active to the standby serving.

Starts a private PostgreSQL cluster (tests/pg_cluster.py, fsync on) and two brokers on one
database; stores N persistent messages (1 KiB) through the active, confirmed; then, for each
round, kills the active with SIGKILL and measures until the standby (a) accepts a TCP
connection and (b) completes an AMQP handshake and reports the queue with all N messages.
The killed broker is restarted as the new standby before the next round.

    PYTHONPATH=$PWD .venv/bin/python tests/perf/pg_failover.py --messages 100000 --rounds 3

With ``--under-load``, a publisher (confirms, one message at a time) and a consumer (manual
acks) run through every failover, reconnecting to whichever broker listens (pika with both
hosts); at the end every confirmed message must have been received, and every message
received twice must carry redelivered=true the second time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pika

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.pg_cluster import PgCluster


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(url: str, data_dir: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, AMQPD_MANAGEMENT_PORT="0", AMQPD_PROMETHEUS_PORT="0")
    with log.open("ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "amqpd",
                "--port",
                str(port),
                "--data-dir",
                str(data_dir),
                "--store",
                url,
            ],
            stdout=out,
            stderr=out,
            env=env,
        )


def wait_accepting(port: int, deadline: float) -> float:
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return time.monotonic()
        except OSError:
            time.sleep(0.005)
    raise TimeoutError(f"nothing listens on {port}")


def wait_standby(log: Path, deadline: float) -> None:
    """Until the broker logging to ``log`` says it is a standby (polls the file)."""
    while time.monotonic() < deadline:
        if log.read_text().count("standby: another amqpd holds the lock") >= 1:
            return
        time.sleep(0.05)
    raise TimeoutError(f"no standby line in {log}")


def fill(port: int, count: int) -> None:
    body = b"x" * 1024
    with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port)) as conn:
        fast = conn.channel()
        fast.queue_declare("jobs", durable=True)
        props = pika.BasicProperties(delivery_mode=2)
        for _ in range(count - 1):
            fast.basic_publish("", "jobs", body, props)
        confirmed = conn.channel()
        confirmed.confirm_delivery()  # the last one's confirm covers every earlier batch
        confirmed.basic_publish("", "jobs", body, props)


def depth(port: int) -> int:
    with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port)) as conn:
        return int(
            conn.channel().queue_declare("jobs", durable=True, passive=True).method.message_count
        )


class Load:
    """A confirming publisher and an acking consumer that survive failovers."""

    def __init__(self, ports: list[int]) -> None:
        self.hosts = [pika.ConnectionParameters("127.0.0.1", port) for port in ports]
        self.confirmed: set[int] = set()
        self.received: dict[int, list[bool]] = {}
        self.reconnects = 0
        self.stop_publishing = threading.Event()
        self.stop_consuming = threading.Event()
        self._lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self._publish, daemon=True),
            threading.Thread(target=self._consume, daemon=True),
        ]
        for thread in self.threads:
            thread.start()

    def _connect(self) -> pika.BlockingConnection:
        while True:
            try:
                return pika.BlockingConnection(self.hosts)
            except pika.exceptions.AMQPConnectionError:
                time.sleep(0.05)

    def _publish(self) -> None:
        next_id = 0
        while not self.stop_publishing.is_set():
            conn = self._connect()
            try:
                ch = conn.channel()
                ch.confirm_delivery()
                ch.queue_declare("load", durable=True)
                while not self.stop_publishing.is_set():
                    body = str(next_id).encode()
                    next_id += 1
                    ch.basic_publish("", "load", body, pika.BasicProperties(delivery_mode=2))
                    with self._lock:
                        self.confirmed.add(next_id - 1)
                conn.close()
            except pika.exceptions.AMQPError:
                with self._lock:
                    self.reconnects += 1

    def _consume(self) -> None:
        while not self.stop_consuming.is_set():
            conn = self._connect()
            try:
                ch = conn.channel()
                ch.queue_declare("load", durable=True)
                ch.basic_qos(prefetch_count=50)

                def on_message(ch: Any, method: Any, _props: Any, body: bytes) -> None:
                    with self._lock:
                        self.received.setdefault(int(body), []).append(method.redelivered)
                    ch.basic_ack(method.delivery_tag)

                ch.basic_consume("load", on_message)
                while not self.stop_consuming.is_set():
                    conn.process_data_events(time_limit=0.2)
                conn.close()
            except pika.exceptions.AMQPError:
                with self._lock:
                    self.reconnects += 1

    def missing(self) -> set[int]:
        with self._lock:
            return self.confirmed - set(self.received)


def under_load(url: str, work: Path, rounds: int) -> int:
    ports = {"a": free_port(), "b": free_port()}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name in ("a", "b"):
            procs[name] = start(url, work / name, ports[name], work / f"{name}.log")
            if name == "a":
                wait_accepting(ports["a"], time.monotonic() + 60)
        load = Load([ports["a"], ports["b"]])
        active, standby = "a", "b"
        for n in range(1, rounds + 1):
            wait_standby(work / f"{standby}.log", time.monotonic() + 120)
            time.sleep(3)  # load runs on the active for a while
            killed = time.monotonic()
            procs[active].send_signal(signal.SIGKILL)
            procs[active].wait()
            accepting = wait_accepting(ports[standby], killed + 300)
            print(f"round {n}: kill -9 -> accepting {accepting - killed:.2f} s", flush=True)
            (work / f"{active}.log").unlink()
            procs[active] = start(url, work / active, ports[active], work / f"{active}.log")
            active, standby = standby, active
        time.sleep(3)
        load.stop_publishing.set()
        load.threads[0].join(60)
        deadline = time.monotonic() + 120
        while load.missing() and time.monotonic() < deadline:
            time.sleep(0.2)
        load.stop_consuming.set()
        load.threads[1].join(60)
        missing = load.missing()
        twice = {i: flags for i, flags in load.received.items() if len(flags) > 1}
        bad = {i for i, flags in twice.items() if not all(flags[1:])}
        print(
            f"{len(load.confirmed)} confirmed, {len(load.received)} distinct received, "
            f"{len(missing)} confirmed but lost, {len(twice)} received more than once "
            f"({len(bad)} of them without redelivered=true on the repeat), "
            f"{load.reconnects} client reconnects"
        )
        return 1 if missing or bad else 0
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(60)


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--under-load", action="store_true", help="failovers under publish+consume")
    opts = p.parse_args()
    cluster = PgCluster(fsync=True)
    work = Path(tempfile.mkdtemp(prefix="amqpd-failover-"))
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        url = cluster.create_database("failover")
        if opts.under_load:
            return under_load(url, work, opts.rounds)
        ports = {"a": free_port(), "b": free_port()}
        for name in ("a", "b"):
            procs[name] = start(url, work / name, ports[name], work / f"{name}.log")
            if name == "a":
                wait_accepting(ports["a"], time.monotonic() + 60)
        active, standby = "a", "b"
        started = time.monotonic()
        fill(ports[active], opts.messages)
        took = time.monotonic() - started
        print(f"stored {opts.messages} persistent 1 KiB messages in {took:.1f} s")
        for n in range(1, opts.rounds + 1):
            wait_standby(work / f"{standby}.log", time.monotonic() + 120)
            killed = time.monotonic()
            procs[active].send_signal(signal.SIGKILL)
            procs[active].wait()
            accepting = wait_accepting(ports[standby], killed + 300)
            count = depth(ports[standby])
            serving = time.monotonic()
            assert count == opts.messages, count
            print(
                f"round {n}: kill -9 -> accepting TCP {accepting - killed:.2f} s, "
                f"-> AMQP handshake + queue.declare ({count} messages) {serving - killed:.2f} s"
            )
            (work / f"{active}.log").unlink()  # so wait_standby reads the new run's lines
            procs[active] = start(url, work / active, ports[active], work / f"{active}.log")
            active, standby = standby, active
        return 0
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(60)
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
