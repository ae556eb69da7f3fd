"""A federated exchange's throughput: amqpd -> amqpd beside RabbitMQ's federation plugin
RabbitMQ -> RabbitMQ.

Not part of the pytest run. For each broker kind it starts two brokers (upstream and
downstream; two ``python -m amqpd`` with persistence on; two private RabbitMQ nodes with
rabbitmq_federation enabled on the downstream), declares a durable direct exchange
``fed`` on both and a durable queue bound to it on the downstream, federates ``fed`` from
the upstream (a ``federation-upstream`` with ack-mode on-confirm, prefetch-count 1000,
and a policy) and waits until the link bound the upstream exchange. It then publishes
``--messages`` persistent messages to the upstream exchange (confirmed, 1000 in flight)
and times from the first publish until the downstream queue holds every message
(end to end: publishing and federating overlap). It prints msgs/s and the CPU seconds both
brokers spent per 100k messages (/proc/PID/stat; beam.smp for RabbitMQ), the median of
``--reps`` runs interleaved amqpd, RabbitMQ, amqpd ...

    .venv/bin/python tests/perf/federation_throughput.py --messages 50000 --reps 3
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
from pamqp import commands as spec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from perf_brokers import Amqpd, RabbitMQ

from interop.perf.procstat import cpu_seconds

UPSTREAM = {"ack-mode": "on-confirm", "prefetch-count": 1000, "reconnect-delay": 1}
POLICY = {"federation-upstream": "bench"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def declare(url: str, queue: str | None) -> None:
    connection = await aiormq.connect(url)
    channel = await connection.channel()
    await channel.exchange_declare("fed", exchange_type="direct", durable=True)
    if queue is not None:
        await channel.queue_declare(queue, durable=True)
        await channel.queue_bind(queue, "fed", routing_key="k")
    await connection.close()


async def publish(url: str, messages: int, size: int) -> None:
    """Publish persistent messages to ``fed`` with confirms, 1000 in flight."""
    connection = await aiormq.connect(url)
    channel = await connection.channel()
    body = b"x" * size
    persistent = spec.Basic.Properties(delivery_mode=2)
    sent = 0
    while sent < messages:
        batch = min(1000, messages - sent)
        await asyncio.gather(
            *(
                channel.basic_publish(body, exchange="fed", routing_key="k", properties=persistent)
                for _ in range(batch)
            )
        )
        sent += batch
    await connection.close()


async def wait_full(url: str, queue: str, messages: int, timeout: float) -> float:
    """Poll the downstream queue's depth; the time it reached ``messages``."""
    connection = await aiormq.connect(url)
    channel = await connection.channel()
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


async def transfer(upstream: str, downstream: str, opts: argparse.Namespace) -> float:
    waiting = asyncio.ensure_future(wait_full(downstream, "sink", opts.messages, opts.timeout))
    await publish(upstream, opts.messages, opts.size)
    return await waiting


def run(command: list[str]) -> str:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(done.stdout + done.stderr)
    return done.stdout


def federate_amqpd(upstream: Amqpd, downstream: Amqpd) -> None:
    ctl = [sys.executable, "-m", "amqpd", "ctl"]
    data = ["--data-dir", str(downstream.data_dir)]
    value = json.dumps({"uri": upstream.url + "%2F", **UPSTREAM})
    run([*ctl, "set-cluster-name", *data, "downstream"])
    run([*ctl, "set-parameter", *data, "federation-upstream", "bench", value])
    run(
        [*ctl, "set-policy", *data, "--apply-to", "exchanges", "bench", "^fed$", json.dumps(POLICY)]
    )
    listing = [*ctl, "list-bindings", "--data-dir", str(upstream.data_dir), "source_name"]
    wait(lambda: "fed" in run(listing).split(), "the upstream binding")


def federate_rabbit(upstream: RabbitMQ, downstream: RabbitMQ) -> None:
    value = json.dumps({"uri": upstream.url + "%2F", **UPSTREAM})
    for args in (
        ("set_parameter", "federation-upstream", "bench", value),
        ("set_policy", "--apply-to", "exchanges", "bench", "^fed$", json.dumps(POLICY)),
    ):
        done = downstream.ctl(*args)
        if done.returncode != 0:
            raise RuntimeError(done.stdout + done.stderr)
    wait(
        lambda: "fed\t" in upstream.ctl("list_bindings", "source_name", "routing_key").stdout,
        "the upstream binding",
    )


def wait(condition: Any, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise TimeoutError(what)


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
                node=f"fedbench{i}@localhost",
                plugins=("rabbitmq_federation",) if i == 2 else (),
            )
            for i in (1, 2)
        ]
    for broker in brokers:
        broker.start()
    upstream, downstream = brokers
    try:
        asyncio.run(declare(upstream.url, None))
        asyncio.run(declare(downstream.url, "sink"))
        if kind == "amqpd":
            federate_amqpd(upstream, downstream)
        else:
            federate_rabbit(upstream, downstream)
        before = sum(cpu_seconds(b.pid) for b in brokers)
        started = time.monotonic()
        finished = asyncio.run(transfer(upstream.url, downstream.url, opts))
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
    with tempfile.TemporaryDirectory(prefix="federation-bench-") as tmp:
        work = Path(tmp)
        work.chmod(0o755)  # RabbitMQ runs as the rabbitmq user
        for rep in range(opts.reps):
            for kind in kinds:
                rate, cpu = run_once(kind, opts, work)
                results[kind].append((rate, cpu))
                print(f"rep {rep + 1} {kind}: {rate:,.0f} msgs/s, {cpu:.2f} CPU s / 100k msgs")
    print()
    print(f"{opts.messages} persistent {opts.size}-byte messages, ack-mode on-confirm")
    print("| broker | msgs/s end to end (median) | CPU s / 100k msgs, both brokers (median) |")
    print("|---|---|---|")
    for kind, runs in results.items():
        rate = statistics.median(r for r, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        print(f"| {kind} -> {kind} | {rate:,.0f} | {cpu:.2f} |")


if __name__ == "__main__":
    main()
