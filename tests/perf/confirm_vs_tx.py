"""Publish throughput: publisher confirms (window N) against one tx.commit per message.

Not part of the pytest run. Start a broker first (``amqpd --port 5699``) or pass any
AMQP 0-9-1 URL:
    python tests/perf/confirm_vs_tx.py --url amqp://guest:guest@127.0.0.1:5699/ [--count N]

Both runs go through ``amqpd perf`` (the same as
``amqpd perf -y 0 -f -C N -c WINDOW`` and ``amqpd perf -y 0 -f -C N --tx-size 1``).
"""

from __future__ import annotations

import argparse

from interop.perf.options import parse_options
from interop.perf.report import Summary, summarise
from interop.perf.runner import run


def _run(url: str, count: int, size: int, persistent: bool, mode: list[str]) -> Summary:
    argv = ["-u", url, "-y", "0", "-C", str(count), "-s", str(size), "--interval", "0", *mode]
    if persistent:
        argv.append("-f")
    return summarise(run(parse_options(argv), progress=None))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default="amqp://guest:guest@127.0.0.1:5672/")
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--tx-count", type=int, default=5_000)
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--transient", action="store_true")
    args = parser.parse_args()
    persistent = not args.transient
    c = _run(args.url, args.count, args.size, persistent, ["-c", str(args.window)])
    t = _run(args.url, args.tx_count, args.size, persistent, ["--tx-size", "1"])
    print(
        f"confirms window {args.window}: {c.confirmed_rate:,.0f} msg/s "
        f"({c.producers.confirm_frames} ack frames for {c.producers.confirmed} messages)"
    )
    print(f"tx.commit per message:  {t.confirmed_rate:,.0f} msg/s")
    print(f"ratio confirms/tx:      {c.confirmed_rate / t.confirmed_rate:.1f}x")


if __name__ == "__main__":
    main()
