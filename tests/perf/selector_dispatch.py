"""Dispatch cost in amqpd's queue model with and without a consumer selector (sans-IO).

Not a test. Fills a classic queue with N messages (headers ``kind``), then times
``Queue.dispatch`` handing messages to one consumer, one credit at a time:

- ``plain``: no selector, takes the head;
- ``selector, all match``: ``kind = 'a'`` on messages that all match;
- ``selector, matches at the tail``: N messages that do not match, then 100 that do; the
  consumer takes the 100 (its cursor means the N are examined once, not per delivery).

    .venv/bin/python tests/perf/selector_dispatch.py            # N = 100,000
    .venv/bin/python tests/perf/selector_dispatch.py -n 20000
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from pamqp import commands
from pamqp.header import ContentHeader

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from amqpd.model.message import Message, QueueEntry
from amqpd.model.queue import Consumer, Queue
from amqpd.model.selective import consumer_selector
from amqpd.wire.codec import encode_shortstr
from amqpd.wire.content_header import peek_header


class _Sink:
    def __init__(self) -> None:
        self.credit = 0
        self.delivered = 0

    def has_credit(self, _consumer: Consumer) -> bool:
        return self.credit > 0

    def deliver(self, _consumer: Consumer, queue: Queue, entry: QueueEntry) -> None:
        self.credit -= 1
        self.delivered += 1
        queue.delivered(entry)

    def cancel_by_broker(self, _consumer: Consumer) -> None:
        pass


def _message(kind: str) -> Message:
    payload = ContentHeader(0, 3, commands.Basic.Properties(headers={"kind": kind})).marshal()
    peek = peek_header(payload)
    return Message(
        "", "q", encode_shortstr(""), encode_shortstr("q"), payload, b"abc", False,
        headers_raw=peek.headers_raw,
    )  # fmt: skip


def _run(kinds: list[str], selector: str | None, take: int) -> float:
    queue = Queue("q", "/", False, None, False, {})
    for kind in kinds:
        queue.enqueue(_message(kind))
    sink = _Sink()
    arguments = {"x-selector": selector} if selector else {}
    consumer = Consumer(sink, "c", encode_shortstr("c"), queue, False, False, 0, arguments)
    consumer.selector = consumer_selector(arguments, queue)
    queue.add_consumer(consumer)
    start = time.perf_counter()
    for _ in range(take):
        sink.credit = 1
        queue.dispatch()
    elapsed = time.perf_counter() - start
    assert sink.delivered == take
    return elapsed / take * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=100_000)
    args = parser.parse_args()
    n = args.n
    cases = [
        ("plain", ["a"] * n, None, n),
        ("selector, all match", ["a"] * n, "kind = 'a'", n),
        ("selector, 100 matches behind N misses", ["b"] * n + ["a"] * 100, "kind = 'a'", 100),
    ]
    print(f"| case (queue of {n:,}) | µs per delivery | deliveries |")
    print("| --- | --- | --- |")
    for name, kinds, selector, take in cases:
        print(f"| {name} | {_run(kinds, selector, take):.1f} | {take:,} |")


if __name__ == "__main__":
    main()
