"""A shovel's throughput: amqpd -> amqpd beside RabbitMQ's shovel plugin RabbitMQ -> RabbitMQ.

Not part of the pytest run. For each broker kind it starts two brokers (source and
destination: two ``python -m amqpd`` with persistence on, --sync full; two private RabbitMQ
nodes with rabbitmq_shovel enabled on the source), fills a durable queue on the source with
``--messages`` persistent messages (confirmed), then defines the same dynamic shovel
(``src-uri`` the local broker, ``dest-uri`` the other one, ack-mode on-confirm,
src-prefetch-count 1000) and times until the destination queue holds every message. It
prints msgs/s and the CPU seconds both brokers spent per 100k messages (/proc/PID/stat;
beam.smp for RabbitMQ), median of ``--reps`` runs interleaved amqpd, RabbitMQ, amqpd ...

    .venv/bin/python tests/perf/shovel_throughput.py --messages 100000 --reps 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Protocol

import aiormq
from pamqp import commands as spec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from perf_brokers import Amqpd, RabbitMQ

from interop.perf.procstat import cpu_seconds


class Broker(Protocol):
    url: str
    pid: int

    def start(self) -> None: ...
    def stop(self) -> None: ...


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def fill(url: str, queue: str, messages: int, size: int) -> None:
    """Publish persistent messages with confirms, 1000 in flight."""
    connection = await aiormq.connect(url)
    channel = await connection.channel()
    await channel.queue_declare(queue, durable=True)
    body = b"x" * size
    persistent = spec.Basic.Properties(delivery_mode=2)
    sent = 0
    while sent < messages:
        batch = min(1000, messages - sent)
        await asyncio.gather(
            *(
                channel.basic_publish(body, routing_key=queue, properties=persistent)
                for _ in range(batch)
            )
        )
        sent += batch
    await connection.close()


async def wait_full(url: str, queue: str, messages: int, timeout: float) -> float:
    """Poll the destination queue's depth; the time it reached ``messages``."""
    connection = await aiormq.connect(url)
    channel = await connection.channel()
    await channel.queue_declare(queue, durable=True)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            declared = await channel.queue_declare(queue, passive=True)
            if (declared.message_count or 0) >= messages:
                return time.monotonic()
            await asyncio.sleep(0.05)
        raise TimeoutError(f"{queue} did not reach {messages} messages in {timeout}s")
    finally:
        await connection.close()


def shovel_value(dest_url: str) -> dict[str, Any]:
    return {
        "src-uri": "amqp://",
        "src-queue": "src",
        "dest-uri": dest_url,
        "dest-queue": "dst",
        "ack-mode": "on-confirm",
        "src-prefetch-count": 1000,
    }


def set_amqpd_shovel(source: Amqpd, dest: Amqpd) -> None:
    done = subprocess.run(
        [
            sys.executable,
            *("-m", "amqpd", "ctl", "set-parameter", "--data-dir", str(source.data_dir)),
            *("shovel", "bench", json.dumps(shovel_value(dest.url + "%2F"))),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr)


def set_rabbit_shovel(source: RabbitMQ, dest: RabbitMQ) -> None:
    value = json.dumps(shovel_value(dest.url + "%2F"))
    done = source.ctl("set_parameter", "shovel", "bench", value)
    if done.returncode != 0:
        raise RuntimeError(done.stdout + done.stderr)


def run_once(kind: str, opts: argparse.Namespace, work: Path) -> tuple[float, float]:
    """One transfer: (msgs/s, CPU s of both brokers per 100k messages)."""
    brokers: list[Any]
    if kind == "amqpd":
        brokers = [Amqpd(free_port(), work / f"amqpd{i}" / "data") for i in (1, 2)]
    else:
        brokers = [
            RabbitMQ(
                free_port(),
                free_port(),
                work / f"rabbit{i}",
                node=f"shovelbench{i}@localhost",
                plugins=("rabbitmq_shovel",) if i == 1 else (),
            )
            for i in (1, 2)
        ]
    for broker in brokers:
        broker.start()
    source, dest = brokers
    try:
        asyncio.run(fill(source.url, "src", opts.messages, opts.size))
        before = sum(cpu_seconds(b.pid) for b in brokers)
        started = time.monotonic()
        if kind == "amqpd":
            set_amqpd_shovel(source, dest)
        else:
            set_rabbit_shovel(source, dest)
        finished = asyncio.run(wait_full(dest.url, "dst", opts.messages, opts.timeout))
        cpu = sum(cpu_seconds(b.pid) for b in brokers) - before
    finally:
        for broker in brokers:
            broker.stop()
    elapsed = finished - started
    return opts.messages / elapsed, cpu * 100_000 / opts.messages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100, help="body bytes (default 100)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--only", choices=["amqpd", "rabbitmq"])
    opts = parser.parse_args()
    kinds = [opts.only] if opts.only else ["amqpd", "rabbitmq"]
    if "rabbitmq" in kinds and not RabbitMQ.installed():
        print("RabbitMQ is not installed: amqpd only")
        kinds = ["amqpd"]
    results: dict[str, list[tuple[float, float]]] = {kind: [] for kind in kinds}
    with tempfile.TemporaryDirectory(prefix="shovel-bench-") as tmp:
        work = Path(tmp)
        work.chmod(0o755)  # RabbitMQ runs as the rabbitmq user
        for rep in range(opts.reps):
            for kind in kinds:
                rate, cpu = run_once(kind, opts, work)
                results[kind].append((rate, cpu))
                print(f"rep {rep + 1} {kind}: {rate:,.0f} msgs/s, {cpu:.2f} CPU s / 100k msgs")
    print()
    print(f"{opts.messages} persistent {opts.size}-byte messages, ack-mode on-confirm")
    print("| broker | msgs/s (median) | CPU s / 100k msgs, both brokers (median) |")
    print("|---|---|---|")
    for kind, runs in results.items():
        rate = statistics.median(r for r, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        print(f"| {kind} -> {kind} | {rate:,.0f} | {cpu:.2f} |")


if __name__ == "__main__":
    main()
