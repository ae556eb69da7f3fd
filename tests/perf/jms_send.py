"""interop.jms send rate: synchronous persistent sends against asynchronous ones.

Not a test. Starts amqpd (``python -m amqpd``, persistence on, ``--sync full``) and, when it
is installed, a private RabbitMQ node (tests/perf/perf_brokers.py), then sends N persistent
256-byte messages to a durable queue with one JMS producer in each mode and prints sends/s
(from the first send until every message is confirmed):

- ``sync``: ``producer.send`` waits for each publisher confirm (the default);
- ``async``: ``send(..., completion_listener=…)`` (JMS 2.0), timed until the last
  ``on_completion``;
- ``useAsyncSend``: ``jms.useAsyncSend=true&jms.producerWindowSize=1048576``, timed until
  ``session.close()`` returned (it waits for the outstanding confirms).

    .venv/bin/python tests/perf/jms_send.py              # 2000 messages, 3 rounds
    .venv/bin/python tests/perf/jms_send.py -n 5000 --rounds 5 --no-rabbitmq
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from perf_brokers import Amqpd, RabbitMQ

from interop.jms import ConnectionFactory, Message

BODY = b"x" * 256


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Counter:
    def __init__(self, total: int) -> None:
        self.total = total
        self.done = threading.Event()
        self.count = 0
        self.failed = 0

    def on_completion(self, _message: Message) -> None:
        self._one()

    def on_exception(self, _message: Message, _exception: Exception) -> None:
        self.failed += 1
        self._one()

    def _one(self) -> None:
        self.count += 1
        if self.count == self.total:
            self.done.set()


def _run(url: str, mode: str, count: int, queue: str) -> float:
    if mode == "useAsyncSend":
        factory = ConnectionFactory.from_url(
            f"{url}?jms.useAsyncSend=true&jms.producerWindowSize=1048576"
        )
    else:
        factory = ConnectionFactory(url)
    with factory.create_connection() as connection:
        session = connection.create_session()
        producer = session.create_producer(session.queue(queue))
        producer.send(BODY)  # declare the queue outside the timing
        counter = _Counter(count)
        start = time.perf_counter()
        for _ in range(count):
            if mode == "async":
                producer.send(BODY, completion_listener=counter)
            else:
                producer.send(BODY)
        if mode == "async":
            assert counter.done.wait(300) and counter.failed == 0
        if mode == "useAsyncSend":
            session.close()
        elapsed = time.perf_counter() - start
    return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--count", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-rabbitmq", action="store_true")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="jms-send-"))
    base.chmod(0o755)  # the rabbitmq user must reach its node directory below
    brokers: list[Amqpd | RabbitMQ] = [Amqpd(_free_port(), base / "amqpd" / "data")]
    if not args.no_rabbitmq and RabbitMQ.installed():
        brokers.append(RabbitMQ(_free_port(), _free_port(), base / "rabbit", "jmssend@localhost"))
    modes = ("sync", "async", "useAsyncSend")
    print(f"| broker | {' | '.join(modes)} | async / sync |")
    print("| --- | " + " | ".join("---" for _ in modes) + " | --- |")
    for broker in brokers:
        broker.start()
        try:
            rates: dict[str, list[float]] = {mode: [] for mode in modes}
            for round_ in range(args.rounds):
                for mode in modes:  # interleaved, so drift hits every mode alike
                    rates[mode].append(_run(broker.url, mode, args.count, f"send.{round_}.{mode}"))
            medians = {mode: statistics.median(values) for mode, values in rates.items()}
            cells = " | ".join(f"{medians[mode]:,.0f}" for mode in modes)
            print(f"| {broker.name} | {cells} | {medians['async'] / medians['sync']:.1f}x |")
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
