"""Routing cost per message in amqpd's core: direct against x-consistent-hash and
x-modulus-hash (sans-IO, no sockets).

Not a test. Four queues; N messages. Two workloads, each against a direct exchange as the
baseline:

- *distinct keys*: every message a new routing key (``order-<i>``). The direct exchange has
  each key bound to one of the 4 queues (N bindings: one dict lookup per message); the
  hashing exchanges have the 4 queues bound with weight 1 and hash every key (their key
  cache never hits).
- *4 keys*: keys cycling over 4 values (direct: each bound to its queue; hashing: the key
  cache answers).

Two measures: ``VirtualHost.route`` alone (ns per message), and a publish through the
sans-IO engine (frames in: parse, route, enqueue; no consumers; µs per message), which is
what a publisher pays. Cases run interleaved (A B C A B C ...), best of ``--reps``, timed in
CPU seconds of this process (``time.process_time``), so that time spent waiting for a core
on a busy machine does not count.

    .venv/bin/python tests/perf/hash_routing.py            # N = 50,000, 5 reps
    .venv/bin/python tests/perf/hash_routing.py -n 20000 --reps 3
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from pamqp import commands

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from amqpd.model.broker import Broker
from amqpd.model.exchange import Exchange
from amqpd.model.message import Message
from amqpd.model.vhost import VirtualHost
from amqpd.wire.codec import encode_shortstr
from tests.unit.engine_driver import Client

HEADER = bytes.fromhex("003c000000000000000000640000")  # class 60, body 100, no properties
Case = tuple[str, str, list[str]]


def _bindings(type_name: str, keys: list[str]) -> list[tuple[str, str]]:
    """(queue, binding key) pairs: direct binds every key, hashing binds each queue once."""
    if type_name == "direct":
        return [(f"q{i % 4}", key) for i, key in enumerate(dict.fromkeys(keys))]
    return [(f"q{i}", "1") for i in range(4)]


def _route_ns(type_name: str, keys: list[str]) -> float:
    vhost = VirtualHost("/")
    exchange: Exchange = vhost.declare_exchange("x", type_name, False, False, False, False, {})
    for i in range(4):
        vhost.declare_queue(f"q{i}", False, False, False, False, {}, None)
    for queue, key in _bindings(type_name, keys):
        vhost.bind(exchange, vhost.queues[queue], key, {})
    messages = [
        Message("x", key, encode_shortstr("x"), encode_shortstr(key), HEADER, b"m", False)
        for key in keys
    ]
    route = vhost.route
    start = time.process_time()
    for message in messages:
        route(exchange, message)
    return (time.process_time() - start) / len(keys) * 1e9


def _publish_us(type_name: str, keys: list[str]) -> float:
    client = Client(Broker())
    client.handshake()
    client.open_channel()
    client.send(1, commands.Exchange.Declare(exchange="x", exchange_type=type_name))
    for i in range(4):
        client.send(1, commands.Queue.Declare(queue=f"q{i}"))
    binds = [
        commands.Queue.Bind(queue=queue, exchange="x", routing_key=key)
        for queue, key in _bindings(type_name, keys)
    ]
    for i in range(0, len(binds), 1000):
        client.send(1, *binds[i : i + 1000])
    client.received()
    chunk = 1000
    frames = [
        b"".join(Client.encode_publish(1, key, b"m" * 100, "x") for key in keys[i : i + chunk])
        for i in range(0, len(keys), chunk)
    ]
    start = time.process_time()
    for data in frames:
        client.feed(data)
    elapsed = time.process_time() - start
    queues = client.broker.vhosts["/"].queues.values()
    assert sum(queue.message_count for queue in queues) == len(keys)
    return elapsed / len(keys) * 1e6


def _best(cases: list[Case], reps: int, timer: object) -> dict[str, float]:
    best = {label: float("inf") for label, _kind, _keys in cases}
    for _ in range(reps):
        for label, kind, keys in cases:
            best[label] = min(best[label], timer(kind, keys))  # type: ignore[operator]
    return best


def _table(title: str, unit: str, cases: list[Case], best: dict[str, float]) -> None:
    print(f"| {title} | {unit} | vs direct, same keys |")
    print("| --- | ---: | ---: |")
    for label, _kind, _keys in cases:
        base = best[f"direct, {label.split(', ', 1)[1]}"]
        print(f"| {label} | {best[label]:,.2f} | {best[label] / base:.2f}x |")
    print()


def main(argv: list[str] | None = None) -> int:
    """Print markdown tables of the cost per message."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=50_000, help="messages per run")
    parser.add_argument("--reps", type=int, default=5, help="runs; the best is shown")
    opts = parser.parse_args(argv)
    distinct = [f"order-{i}" for i in range(opts.n)]
    four = [f"k{i % 4}" for i in range(opts.n)]
    cases: list[Case] = [
        ("direct, distinct keys", "direct", distinct),
        ("x-consistent-hash, distinct keys", "x-consistent-hash", distinct),
        ("x-modulus-hash, distinct keys", "x-modulus-hash", distinct),
        ("direct, 4 keys", "direct", four),
        ("x-consistent-hash, 4 keys", "x-consistent-hash", four),
    ]
    title = f"{opts.n:,} messages, best of {opts.reps}"
    _table(f"VirtualHost.route, {title}", "ns / message", cases, _best(cases, opts.reps, _route_ns))
    _table(
        f"publish through the engine, {title}",
        "µs / message",
        cases,
        _best(cases, opts.reps, _publish_us),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
