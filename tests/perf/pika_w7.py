"""W7: pika's BlockingConnection, publish with confirm_delivery, then basic_get + ack.

Not part of the pytest run; tests/perf/compare.py runs it as a subprocess:
    python tests/perf/pika_w7.py --url amqp://guest:guest@127.0.0.1:5672/ [--seconds 5]
        [--size 100] [--persistent] [--broker-pid PID]
Prints one JSON object: publish and get rates and, with --broker-pid, the broker's CPU
seconds per 100k operations in each phase.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import pika

from interop.perf.procstat import ProcessSample

QUEUE = "perf-w7"


def _phase(pid: int | None) -> ProcessSample | None:
    return ProcessSample.take(pid) if pid is not None else None


def run(url: str, seconds: float, size: int, persistent: bool, pid: int | None) -> dict[str, Any]:
    """Publish for ``seconds`` (each publish waits for its confirm), then get them back."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.queue_declare(QUEUE, durable=persistent)
    channel.queue_purge(QUEUE)
    channel.confirm_delivery()
    body = b"x" * size
    props = pika.BasicProperties(delivery_mode=2 if persistent else 1)
    before = _phase(pid)
    published = 0
    began = time.perf_counter()
    deadline = began + seconds
    while time.perf_counter() < deadline:
        channel.basic_publish("", QUEUE, body, props)
        published += 1
    publish_s = time.perf_counter() - began
    middle = _phase(pid)
    got = 0
    began = time.perf_counter()
    deadline = began + seconds
    while time.perf_counter() < deadline:
        method, _props, _body = channel.basic_get(QUEUE)
        if method is None:
            break
        channel.basic_ack(method.delivery_tag)
        got += 1
    get_s = time.perf_counter() - began
    after = _phase(pid)
    channel.queue_delete(QUEUE)
    connection.close()
    out: dict[str, Any] = {
        "published": published,
        "publish_rate": published / publish_s,
        "got": got,
        "get_rate": got / get_s if get_s else 0.0,
    }
    if before is not None and middle is not None and after is not None:
        out["broker"] = {
            "publish_cpu_s_per_100k": (middle.cpu_s - before.cpu_s) / max(published, 1) * 1e5,
            "get_cpu_s_per_100k": (after.cpu_s - middle.cpu_s) / max(got, 1) * 1e5,
            "rss_kb": after.rss_kb,
            "hwm_kb": after.hwm_kb,
        }
    return out


def main() -> None:
    """Command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default="amqp://guest:guest@127.0.0.1:5672/")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--persistent", action="store_true")
    parser.add_argument("--broker-pid", type=int)
    args = parser.parse_args()
    print(json.dumps(run(args.url, args.seconds, args.size, args.persistent, args.broker_pid)))


if __name__ == "__main__":
    main()
