"""W1 (1 producer, 1 consumer, transient 100-byte messages) with and without the management
API polled every second, interleaved A B A B; 1,000 extra queues and 1,000 idle connections
are there all along, so each poll lists them. Not part of the pytest run.

    .venv/bin/python tests/perf/management_polling.py [--reps 3] [--duration 10]

Prints W1's received msgs/s and the broker's CPU seconds per 100k messages (polling
included) per run, the medians with and without polling and their ratios, and the poll
latencies (median / slowest) of GET /api/queues, /api/overview and
/api/connections while W1 ran.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import httpx

POLLED = ("/api/queues", "/api/overview", "/api/connections")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_port(port: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"amqpd did not open port {port}")


class Poller(threading.Thread):
    """GETs every POLLED path once a second until stopped; keeps the latencies."""

    def __init__(self, base_url: str) -> None:
        super().__init__(daemon=True)
        self.base_url = base_url
        self.stop = threading.Event()
        self.latencies: dict[str, list[float]] = {path: [] for path in POLLED}

    def run(self) -> None:
        with httpx.Client(base_url=self.base_url, auth=("guest", "guest"), timeout=60) as client:
            while not self.stop.is_set():
                started = time.monotonic()
                for path in POLLED:
                    t0 = time.perf_counter()
                    client.get(path).raise_for_status()
                    self.latencies[path].append((time.perf_counter() - t0) * 1000)
                self.stop.wait(max(0.0, 1.0 - (time.monotonic() - started)))


def w1(amqp_port: int, broker_pid: int, duration: int) -> tuple[float, float]:
    """One W1 run: received msgs/s and the broker's CPU seconds per 100k messages."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "amqpd",
            "perf",
            "-u",
            f"amqp://guest:guest@127.0.0.1:{amqp_port}/",
            "-x",
            "1",
            "-y",
            "1",
            "-q",
            "100",
            "-A",
            "50",
            "-s",
            "100",
            "-z",
            str(duration),
            "--warmup",
            "2",
            "--json",
            "--broker-pid",
            str(broker_pid),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    summary = json.loads(out.stdout)
    return float(summary["consumed_rate"]), float(summary["broker"]["cpu_s_per_100k"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--duration", type=int, default=10)
    args = parser.parse_args()
    amqp_port, http_port = _free_port(), _free_port()
    broker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "amqpd",
            "--port",
            str(amqp_port),
            "--data-dir",
            tempfile.mkdtemp(prefix="mgmt-poll-"),
            "--management-port",
            str(http_port),
            "--no-prometheus",
            "--log-level",
            "warning",
        ],
        env={**os.environ, "AMQPD_HEARTBEAT": "0"},
    )
    idle: subprocess.Popen[str] | None = None
    try:
        _wait_port(amqp_port)
        _wait_port(http_port)
        base = f"http://127.0.0.1:{http_port}"
        with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=60) as client:
            for i in range(1000):
                client.put(f"/api/queues/%2F/extra-{i:04d}", json={"durable": False})
        total = args.reps * 2 * (args.duration + 5) + 60
        idle = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "amqpd",
                "perf",
                "-u",
                f"amqp://guest:guest@127.0.0.1:{amqp_port}/",
                "--idle-connections",
                "1000",
                "-z",
                str(total),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=60) as client:
            deadline = time.monotonic() + 120
            while len(client.get("/api/connections?columns=name").json()) < 1000:
                if time.monotonic() > deadline:
                    raise SystemExit("the idle connections did not open")
                time.sleep(0.5)
        rates: dict[bool, list[float]] = {False: [], True: []}
        cpu: dict[bool, list[float]] = {False: [], True: []}
        poll_latencies: dict[str, list[float]] = {path: [] for path in POLLED}
        for rep in range(args.reps):
            for polled in (False, True):
                poller = Poller(base) if polled else None
                if poller is not None:
                    poller.start()
                rate, cpu_per_100k = w1(amqp_port, broker.pid, args.duration)
                if poller is not None:
                    poller.stop.set()
                    poller.join()
                    for path, values in poller.latencies.items():
                        poll_latencies[path] += values
                rates[polled].append(rate)
                cpu[polled].append(cpu_per_100k)
                print(
                    f"rep {rep + 1} {'polled' if polled else 'quiet '}: W1 {rate:,.0f} msgs/s, "
                    f"broker CPU {cpu_per_100k:.2f} s per 100k"
                )
        quiet, polled_median = statistics.median(rates[False]), statistics.median(rates[True])
        print(
            f"W1 median: quiet {quiet:,.0f} msgs/s, polled every second {polled_median:,.0f} "
            f"msgs/s ({polled_median / quiet:.1%})"
        )
        quiet_cpu, polled_cpu = statistics.median(cpu[False]), statistics.median(cpu[True])
        print(
            f"broker CPU per 100k messages (polling included): quiet {quiet_cpu:.2f} s, "
            f"polled {polled_cpu:.2f} s ({polled_cpu / quiet_cpu:.1%})"
        )
        for path, values in poll_latencies.items():
            print(
                f"GET {path} during W1: median {statistics.median(values):.0f} ms, "
                f"slowest {max(values):.0f} ms ({len(values)} polls)"
            )
    finally:
        if idle is not None:
            idle.terminate()
            idle.wait(30)
        broker.terminate()
        broker.wait(30)


if __name__ == "__main__":
    main()
