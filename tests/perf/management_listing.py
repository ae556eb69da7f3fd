"""How long the management API takes to list 1,000 queues while 1,000 connections are open
(issue 13: "well under a second"). Not part of the pytest run.

Starts amqpd (``python -m amqpd``, memory only) on free ports, opens CONNECTIONS pika
connections (one channel each; 10 of them consume, so channels, consumers and unacked
messages are listed too), declares QUEUES queues with a message each, then times
``GET /api/queues`` (and the other big listings) REPS times each and prints the median
and the slowest, in milliseconds, the response size and the broker's CPU time per request
(from /proc: what polling costs the broker's one core, whatever the machine's load).

    .venv/bin/python tests/perf/management_listing.py [--queues 1000] [--connections 1000]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pika


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_port(port: int, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"amqpd did not open port {port}")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=1000)
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=10)
    args = parser.parse_args()
    amqp_port, http_port = _free_port(), _free_port()
    data_dir = tempfile.mkdtemp(prefix="mgmt-perf-")
    broker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "amqpd",
            "--port",
            str(amqp_port),
            "--data-dir",
            data_dir,
            "--management-port",
            str(http_port),
            "--no-prometheus",
            "--log-level",
            "warning",
        ],
        env={**os.environ, "AMQPD_HEARTBEAT": "0"},
    )
    connections: list[pika.BlockingConnection] = []
    try:
        _wait_port(amqp_port, time.monotonic() + 60)
        _wait_port(http_port, time.monotonic() + 60)
        params = pika.ConnectionParameters("127.0.0.1", amqp_port, heartbeat=0)
        for _ in range(args.connections):
            conn = pika.BlockingConnection(params)
            conn.channel()
            connections.append(conn)
        ch = connections[0].channel()
        for i in range(args.queues):
            ch.queue_declare(f"q-{i:05d}")
            ch.basic_publish("", f"q-{i:05d}", b"x" * 100)
        for i, conn in enumerate(connections[1:11]):
            consumer = conn.channel()
            consumer.basic_qos(prefetch_count=1)
            consumer.basic_consume(f"q-{i:05d}", lambda *a: None)
            conn.process_data_events(time_limit=0.1)
        with httpx.Client(
            base_url=f"http://127.0.0.1:{http_port}", auth=("guest", "guest"), timeout=60
        ) as client:
            print(f"{args.queues} queues, {len(connections)} connections (amqpd pid {broker.pid})")
            for path in (
                "/api/queues",
                "/api/queues?page=1&page_size=100&sort=messages&sort_reverse=true",
                "/api/connections",
                "/api/channels",
                "/api/overview",
            ):
                times, size = [], 0
                cpu_before = _cpu_seconds(broker.pid)
                for _ in range(args.reps):
                    started = time.perf_counter()
                    answer = client.get(path)
                    times.append((time.perf_counter() - started) * 1000)
                    answer.raise_for_status()
                    size = len(answer.content)
                cpu_ms = (_cpu_seconds(broker.pid) - cpu_before) * 1000 / args.reps
                print(
                    f"GET {path}: median {statistics.median(times):.0f} ms, "
                    f"slowest {max(times):.0f} ms, {size / 1024:.0f} KiB, "
                    f"broker CPU {cpu_ms:.0f} ms per request"
                )
    finally:
        for conn in connections:
            with contextlib.suppress(Exception):  # the broker may already be gone
                conn.close()
        broker.terminate()
        broker.wait(30)


if __name__ == "__main__":
    main()
