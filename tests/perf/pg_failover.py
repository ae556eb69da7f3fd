"""Failover time on a shared PostgreSQL store: kill -9 of the active to the standby serving.

Starts a private PostgreSQL cluster (tests/pg_cluster.py, fsync on) and two brokers on one
database; stores N persistent messages (1 KiB) through the active, confirmed; then, for each
round, kills the active with SIGKILL and measures until the standby (a) accepts a TCP
connection and (b) completes an AMQP handshake and reports the queue with all N messages.
The killed broker is restarted as the new standby before the next round.

    PYTHONPATH=$PWD .venv/bin/python tests/perf/pg_failover.py --messages 100000 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=3)
    opts = p.parse_args()
    cluster = PgCluster(fsync=True)
    work = Path(tempfile.mkdtemp(prefix="amqpd-failover-"))
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        url = cluster.create_database("failover")
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


if __name__ == "__main__":
    sys.exit(main())
