"""Publish throughput: publisher confirms (window N) against one tx.commit per message.

Not part of the pytest run. Start a broker first (``amqpd --port 5699``) or pass any
AMQP 0-9-1 URL:
    python tests/perf/confirm_vs_tx.py --url amqp://guest:guest@127.0.0.1:5699/ [--count N]
"""

from __future__ import annotations

import argparse
import asyncio

from amqpd.loadgen import publish_tx_per_message, publish_with_confirms


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
    c = asyncio.run(
        publish_with_confirms(
            args.url, "perf-confirms", args.count, args.size, args.window, persistent
        )
    )
    t = asyncio.run(
        publish_tx_per_message(args.url, "perf-tx", args.tx_count, args.size, persistent)
    )
    print(
        f"confirms window {args.window}: {c.rate:,.0f} msg/s "
        f"({c.confirm_frames} ack frames for {c.messages} messages)"
    )
    print(f"tx.commit per message:  {t.rate:,.0f} msg/s")
    print(f"ratio confirms/tx:      {c.rate / t.rate:.1f}x")


if __name__ == "__main__":
    main()
