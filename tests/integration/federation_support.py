"""Helpers for the federation tests: configure brokers through ``amqpd ctl``, watch link
status, publish with confirms (continuously, across broker crashes), and collect what
arrived until a marker message."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from pathlib import Path
from typing import Any

import pika
import pika.exceptions

from tests.integration.shovel_support import ctl, wait_for

PERSISTENT = pika.BasicProperties(delivery_mode=2)


def ok(data_dir: Path, *args: str) -> str:
    """``amqpd ctl ARGS`` that must succeed; its stdout."""
    done = ctl(data_dir, *args)
    assert done.returncode == 0, f"amqpd ctl {args}: {done.stderr}"
    return done.stdout


def federate(data_dir: Path, name: str, upstream: dict[str, Any], pattern: str = "^fed") -> None:
    """One upstream ``up-NAME`` and a policy federating the exchanges matching ``pattern``
    from it (``federation-upstream``)."""
    ok(data_dir, "set-parameter", "federation-upstream", name, json.dumps(upstream))
    definition = json.dumps({"federation-upstream": name})
    ok(data_dir, "set-policy", "--apply-to", "exchanges", f"fed-{name}", pattern, definition)


def links(data_dir: Path) -> list[dict[str, Any]]:
    """``amqpd ctl list-federation-links --format json`` ([] if the broker is away)."""
    done = ctl(data_dir, "list-federation-links", "--format", "json")
    return list(json.loads(done.stdout)) if done.returncode == 0 else []


def wait_running(data_dir: Path, count: int = 1) -> None:
    """Until ``count`` links run on the broker of ``data_dir``."""

    def running() -> bool:
        found = links(data_dir)
        return len(found) == count and all(item["status"] == "running" for item in found)

    wait_for(running, f"{count} running federation link(s)")


def upstream_bindings(data_dir: Path, exchange: str = "fed") -> set[str]:
    """The routing keys the upstream exchange is bound with to federation helpers."""
    out = ok(data_dir, "list-bindings", "source_name", "destination_name", "routing_key")
    keys = set()
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[0] == exchange and parts[1].startswith("federation: "):
            keys.add(parts[2])
    return keys


def declare(url: str, exchange: str = "fed", queues: dict[str, list[str]] | None = None) -> None:
    """A durable topic ``exchange`` and durable queues bound to it with the given keys."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = conn.channel()
        channel.exchange_declare(exchange, "topic", durable=True)
        for queue, keys in (queues or {}).items():
            channel.queue_declare(queue, durable=True)
            for key in keys:
                channel.queue_bind(queue, exchange, key)
    finally:
        conn.close()


def publish(url: str, items: list[tuple[str, str]], exchange: str = "fed") -> None:
    """Publish (routing key, body) pairs, persistent, with confirms."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = conn.channel()
        channel.confirm_delivery()
        for key, body in items:
            channel.basic_publish(exchange, key, body.encode(), PERSISTENT)
    finally:
        conn.close()


def collect(url: str, queue: str, *markers: str) -> list[tuple[str, dict[str, Any]]]:
    """Consume ``queue`` until every message whose body is one of ``markers`` arrived;
    every other body with its headers (messages from one upstream keep their order, so
    what was published before a marker and routed here has arrived by then)."""
    got: list[tuple[str, dict[str, Any]]] = []
    waiting = set(markers)
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = conn.channel()
        deadline = time.monotonic() + 120
        for method, properties, body in channel.consume(queue, inactivity_timeout=1):
            if method is None:
                assert time.monotonic() < deadline, f"no {waiting} in {queue}: {got}"
                continue
            channel.basic_ack(method.delivery_tag)
            if body.decode() in waiting:
                waiting.discard(body.decode())
                if not waiting:
                    break
                continue
            got.append((body.decode(), dict(properties.headers or {})))
        channel.cancel()
    finally:
        conn.close()
    return got


class ContinuousPublisher(threading.Thread):
    """Publishes numbered persistent messages with confirms to ``exchange`` / ``key`` on
    whatever broker ``url()`` names, reconnecting while that broker is down; ``confirmed``
    holds the numbers the broker confirmed."""

    def __init__(self, url: Any, exchange: str = "fed", key: str = "t.x") -> None:
        super().__init__(daemon=True)
        self.url = url
        self.exchange = exchange
        self.key = key
        self.confirmed: set[int] = set()
        self.halt = threading.Event()
        self.failures = 0
        self._next = 0

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                conn = pika.BlockingConnection(pika.URLParameters(self.url()))
            except (pika.exceptions.AMQPError, OSError):
                self.failures += 1
                self.halt.wait(0.2)  # the broker is restarting: try again shortly
                continue
            try:
                channel = conn.channel()
                channel.confirm_delivery()
                while not self.halt.is_set():
                    number = self._next
                    channel.basic_publish(self.exchange, self.key, str(number).encode(), PERSISTENT)
                    self.confirmed.add(number)
                    self._next += 1
            except (pika.exceptions.AMQPError, OSError):
                self.failures += 1  # not confirmed: published again under the same number
            finally:
                if conn.is_open:
                    with contextlib.suppress(pika.exceptions.AMQPError, OSError):
                        conn.close()

    def wait_confirmed(self, more: int) -> None:
        """Until ``more`` further messages were confirmed."""
        target = len(self.confirmed) + more
        wait_for(lambda: len(self.confirmed) >= target, f"{target} confirmed publishes")

    def finish(self) -> set[int]:
        self.halt.set()
        self.join(60)
        return set(self.confirmed)
