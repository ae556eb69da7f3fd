"""Routing cost per message in amqpd's core: direct against x-consistent-hash and
x-modulus-hash (sans-IO: ``VirtualHost.route`` only, no sockets).

Not a test. Four queues bound to each exchange (direct: keys q0..q3; hashing: weight 1), N
messages routed in turn, the best of ``--reps`` runs, in ns per message:

- ``direct``: routing keys cycling over the 4 bound keys (the direct exchange's usual case);
- ``consistent-hash, distinct keys``: every message a new key (``order-<i>``): each one
  hashed onto the ring (its key cache never hits);
- ``consistent-hash, 4 keys``: keys cycling over 4 values (the cache answers);
- ``modulus-hash, distinct keys``.

The second table publishes the same messages through the sans-IO engine (frames in: parse,
route, enqueue into 4 queues; no sockets, no consumers), in µs per message: the routing
step's share of a publish.

    .venv/bin/python tests/perf/hash_routing.py            # N = 200,000
    .venv/bin/python tests/perf/hash_routing.py -n 50000 --reps 3
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from amqpd.model.broker import Broker
from amqpd.model.message import Message
from amqpd.model.vhost import Exchange, VirtualHost
from amqpd.wire.codec import encode_shortstr

HEADER = bytes.fromhex("003c0000000000000000006400000000")[:12] + b"\x00\x00"


def _messages(keys: list[str]) -> list[Message]:
    return [
        Message("x", key, encode_shortstr("x"), encode_shortstr(key), HEADER, b"m", False)
        for key in keys
    ]


def _setup(type_name: str) -> tuple[VirtualHost, Exchange]:
    vhost = VirtualHost("/")
    exchange = vhost.declare_exchange("x", type_name, False, False, False, False, {})
    for i in range(4):
        queue = vhost.declare_queue(f"q{i}", False, False, False, False, {}, None)
        key = f"q{i}" if type_name == "direct" else "1"
        vhost.bind(exchange, queue, key, {})
    return vhost, exchange


def _time(type_name: str, messages: list[Message]) -> float:
    vhost, exchange = _setup(type_name)
    route = vhost.route
    start = time.perf_counter()
    for message in messages:
        route(exchange, message)
    return (time.perf_counter() - start) / len(messages) * 1e9


def _best(cases: list[tuple[str, str, Any]], reps: int, timer: Any) -> list[tuple[str, float]]:
    """The best of ``reps`` runs per case, the cases interleaved (A B C A B C ...) so that a
    busy spell on the machine does not fall on one case only."""
    best = {label: float("inf") for label, _kind, _arg in cases}
    for _ in range(reps):
        for label, kind, arg in cases:
            best[label] = min(best[label], timer(kind, arg))
    return [(label, best[label]) for label, _kind, _arg in cases]


def _engine_time(type_name: str, keys: list[str]) -> float:
    from pamqp import commands

    from tests.unit.engine_driver import Client

    chunk = 1000
    frames = [
        b"".join(Client.encode_publish(1, key, b"m" * 100, "x") for key in keys[i : i + chunk])
        for i in range(0, len(keys), chunk)
    ]
    client = Client(Broker())
    client.handshake()
    client.open_channel()
    client.send(1, commands.Exchange.Declare(exchange="x", exchange_type=type_name))
    for i in range(4):
        client.send(1, commands.Queue.Declare(queue=f"q{i}"))
        key = f"q{i}" if type_name == "direct" else "1"
        client.send(1, commands.Queue.Bind(queue=f"q{i}", exchange="x", routing_key=key))
    client.received()
    start = time.perf_counter()
    for data in frames:
        client.feed(data)
    elapsed = time.perf_counter() - start
    assert sum(q.message_count for q in client.broker.vhosts["/"].queues.values()) == len(keys)
    return elapsed / len(keys) * 1e6


def main(argv: list[str] | None = None) -> int:
    """Print a markdown table of ns per routed message."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=200_000, help="messages per run")
    parser.add_argument("--reps", type=int, default=5, help="runs; the best is shown")
    opts = parser.parse_args(argv)
    n = opts.n
    four = _messages([f"q{i % 4}" for i in range(n)])
    distinct = _messages([f"order-{i}" for i in range(n)])
    cases = [
        ("direct, 4 bound keys", "direct", four),
        ("consistent-hash, distinct keys", "x-consistent-hash", distinct),
        ("consistent-hash, 4 keys", "x-consistent-hash", four),
        ("modulus-hash, distinct keys", "x-modulus-hash", distinct),
    ]
    results = _best(cases, opts.reps, _time)
    base = results[0][1]
    print(f"| routing ({n:,} messages, best of {opts.reps}) | ns / message | vs direct |")
    print("| --- | ---: | ---: |")
    for label, ns in results:
        print(f"| {label} | {ns:,.0f} | {ns / base:.2f}x |")
    four_keys = [f"q{i % 4}" for i in range(n)]
    distinct_keys = [f"order-{i}" for i in range(n)]
    publishes = [
        ("direct, 4 bound keys", "direct", four_keys),
        ("consistent-hash, distinct keys", "x-consistent-hash", distinct_keys),
        ("modulus-hash, distinct keys", "x-modulus-hash", distinct_keys),
    ]
    timed = _best(publishes, opts.reps, _engine_time)
    base = timed[0][1]
    print()
    print(f"| publish through the engine ({n:,} x 100 B) | µs / message | vs direct |")
    print("| --- | ---: | ---: |")
    for label, us in timed:
        print(f"| {label} | {us:.2f} | {us / base:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
