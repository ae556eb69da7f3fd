"""Helpers for the federated-queue tests: configure federation with ``amqpd ctl``, list the
links, and a publisher and a consumer that keep going across broker crashes."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pika
import pika.exceptions

from tests.integration.shovel_support import ctl

RETRY = 0.2  # seconds between reconnection attempts while a broker is down


def federate(data_dir: Path, upstream: str, uri: str, pattern: str = "^fq", **keys: Any) -> None:
    """On the broker of ``data_dir``: upstream ``upstream`` at ``uri`` (more keys: the
    parameter's, e.g. prefetch_count=10) and a policy federating queues matching
    ``pattern`` from every upstream of the vhost."""
    value = {"uri": uri, **{key.replace("_", "-"): v for key, v in keys.items()}}
    done = ctl(data_dir, "set-parameter", "federation-upstream", upstream, json.dumps(value))
    assert done.returncode == 0, done.stderr
    definition = json.dumps({"federation-upstream-set": "all"})
    done = ctl(data_dir, "set-policy", "--apply-to", "queues", "fq", pattern, definition)
    assert done.returncode == 0, done.stderr


def links(data_dir: Path) -> list[dict[str, Any]]:
    """``amqpd ctl list-federation-links`` (empty if the broker does not answer)."""
    done = ctl(data_dir, "list-federation-links", "--format", "json")
    if done.returncode != 0:
        return []
    found: list[dict[str, Any]] = json.loads(done.stdout)
    return found


def link_running(data_dir: Path) -> bool:
    found = links(data_dir)
    return bool(found) and all(item["status"] == "running" for item in found)


def consumers(data_dir: Path, queue: str) -> list[dict[str, Any]]:
    """``amqpd ctl list-consumers`` rows of ``queue``."""
    columns = ("queue_name", "consumer_tag", "arguments")
    done = ctl(data_dir, "list-consumers", *columns, "--format", "json")
    assert done.returncode == 0, done.stderr
    rows: list[dict[str, Any]] = json.loads(done.stdout)
    return [row for row in rows if row["queue_name"] == queue]


class Publisher(threading.Thread):
    """Publishes persistent messages 0..count-1 with confirms to a durable queue, one at a
    time, reconnecting while the broker is down; a number is in ``confirmed`` once the
    broker confirmed it (an unconfirmed one is published again)."""

    def __init__(self, url: str, queue: str, count: int) -> None:
        super().__init__(name=f"publisher-{queue}", daemon=True)
        self.url, self.queue, self.count = url, queue, count
        self.confirmed: list[int] = []
        self.failures = 0

    def run(self) -> None:
        number = 0
        persistent = pika.BasicProperties(delivery_mode=2)
        while number < self.count:
            try:
                conn = pika.BlockingConnection(pika.URLParameters(self.url))
            except (pika.exceptions.AMQPError, OSError):
                self.failures += 1
                time.sleep(RETRY)  # the broker is down: nothing to wait on but time
                continue
            try:
                channel = conn.channel()
                channel.confirm_delivery()
                channel.queue_declare(self.queue, durable=True)
                while number < self.count:
                    channel.basic_publish("", self.queue, str(number).encode(), persistent)
                    self.confirmed.append(number)
                    number += 1
                conn.close()
            except (pika.exceptions.AMQPError, OSError):
                self.failures += 1


class Collector(threading.Thread):
    """Consumes a durable queue (declaring it), records each body and acks it, reconnecting
    while the broker is down, until `finish` is called."""

    def __init__(self, url: str, queue: str, prefetch: int = 50) -> None:
        super().__init__(name=f"collector-{queue}", daemon=True)
        self.url, self.queue, self.prefetch = url, queue, prefetch
        self.bodies: list[int] = []
        self._done = threading.Event()

    def finish(self) -> None:
        self._done.set()
        self.join(timeout=60)

    def run(self) -> None:
        while not self._done.is_set():
            try:
                conn = pika.BlockingConnection(pika.URLParameters(self.url))
            except (pika.exceptions.AMQPError, OSError):
                time.sleep(RETRY)  # the broker is down: nothing to wait on but time
                continue
            try:
                channel = conn.channel()
                channel.queue_declare(self.queue, durable=True)
                channel.basic_qos(prefetch_count=self.prefetch)
                for method, _props, body in channel.consume(self.queue, inactivity_timeout=0.2):
                    if self._done.is_set():
                        break
                    if body is None:
                        continue
                    self.bodies.append(int(body))
                    channel.basic_ack(method.delivery_tag)
                conn.close()
            except (pika.exceptions.AMQPError, OSError):
                continue
