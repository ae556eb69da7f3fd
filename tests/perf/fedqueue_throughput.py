"""A federated queue's throughput: amqpd -> amqpd beside RabbitMQ's federation plugin
RabbitMQ -> RabbitMQ.

Not part of the pytest run. For each broker kind it starts two brokers (the upstream and
the downstream: two ``python -m amqpd`` with persistence on, --sync full; two private
RabbitMQ nodes with rabbitmq_federation enabled on the downstream), fills a durable queue
on the upstream with ``--messages`` persistent messages (confirmed), federates the queue
of the same name on the downstream from it (``federation-upstream`` with prefetch-count
1000, ack-mode on-confirm; a policy with ``federation-upstream-set: all``), then starts a
consumer on the downstream (prefetch 1000, acks) and times until it received every
message: each one moves only because that consumer wants it. It prints msgs/s and the CPU
seconds both brokers spent per 100k messages (/proc/PID/stat; beam.smp for RabbitMQ),
median of ``--reps`` runs interleaved amqpd, RabbitMQ, amqpd ...

    .venv/bin/python tests/perf/fedqueue_throughput.py --messages 50000 --reps 3
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
from typing import Any

import aiormq
import aiormq.abc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from perf_brokers import Amqpd, RabbitMQ
from shovel_throughput import fill

from interop.perf.procstat import cpu_seconds

QUEUE = "fq"
POLICY = json.dumps({"federation-upstream-set": "all"})


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def upstream_value(url: str) -> str:
    return json.dumps({"uri": url, "prefetch-count": 1000, "ack-mode": "on-confirm"})


def federate_amqpd(downstream: Amqpd, upstream: Amqpd) -> None:
    for args in (
        ("set-parameter", "federation-upstream", "up", upstream_value(upstream.url + "%2F")),
        ("set-policy", "--apply-to", "queues", "fq", f"^{QUEUE}$", POLICY),
    ):
        command, *rest = args
        data_dir = str(downstream.data_dir)
        done = subprocess.run(
            [sys.executable, "-m", "amqpd", "ctl", command, "--data-dir", data_dir, *rest],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(done.stderr)


def federate_rabbit(downstream: RabbitMQ, upstream: RabbitMQ) -> None:
    for args in (
        ("set_parameter", "federation-upstream", "up", upstream_value(upstream.url + "%2F")),
        ("set_policy", "--apply-to", "queues", "fq", f"^{QUEUE}$", POLICY),
    ):
        done = downstream.ctl(*args)
        if done.returncode != 0:
            raise RuntimeError(done.stdout + done.stderr)


async def consume_all(url: str, messages: int, timeout: float) -> float:
    """Consume (prefetch 1000, ack each) until ``messages`` arrived; the time they had."""
    connection = await aiormq.connect(url)
    channel = await connection.channel()
    await channel.queue_declare(QUEUE, durable=True)
    await channel.basic_qos(prefetch_count=1000)
    done: asyncio.Future[float] = asyncio.get_running_loop().create_future()
    received = 0

    async def take(message: aiormq.abc.DeliveredMessage) -> None:
        nonlocal received
        received += 1
        await channel.basic_ack(message.delivery.delivery_tag or 0)
        if received >= messages and not done.done():
            done.set_result(time.monotonic())

    await channel.basic_consume(QUEUE, take)
    try:
        return await asyncio.wait_for(done, timeout)
    finally:
        await connection.close()


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
                node=f"fedqbench{i}@localhost",
                plugins=("rabbitmq_federation",) if i == 2 else (),
            )
            for i in (1, 2)
        ]
    for broker in brokers:
        broker.start()
    upstream, downstream = brokers
    try:
        asyncio.run(fill(upstream.url, QUEUE, opts.messages, opts.size))
        if kind == "amqpd":
            federate_amqpd(downstream, upstream)
        else:
            federate_rabbit(downstream, upstream)
        before = sum(cpu_seconds(b.pid) for b in brokers)
        started = time.monotonic()
        finished = asyncio.run(consume_all(downstream.url, opts.messages, opts.timeout))
        cpu = sum(cpu_seconds(b.pid) for b in brokers) - before
    finally:
        for broker in brokers:
            broker.stop()
    elapsed = finished - started
    return opts.messages / elapsed, cpu * 100_000 / opts.messages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=50_000)
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
    with tempfile.TemporaryDirectory(prefix="fedqueue-bench-") as tmp:
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
