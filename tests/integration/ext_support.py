"""Helpers shared by the RabbitMQ-extension tests (TTL, dead-lettering, priorities, …)."""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from typing import Any

import pika
import pika.exceptions
import pika.spec

from amqpd.wire.properties import HEADERS, RawProperties

Delivery = tuple[Any, pika.spec.BasicProperties, bytes]


def connect(port: int) -> pika.BlockingConnection:
    """A pika connection to amqpd on 127.0.0.1."""
    return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))


def next_message(conn: pika.BlockingConnection, queue: str, timeout: float = 5.0) -> Delivery:
    """Wait (by consuming, prefetch 1) for the next message in ``queue``; ack it and return
    (method, properties, body). Fails if none arrives within ``timeout``. Nothing else is
    taken from the queue (no spurious redeliveries for the tests that count them)."""
    ch = conn.channel()
    ch.basic_qos(prefetch_count=1)
    delivery: Delivery | None = None
    for method, props, body in ch.consume(queue, inactivity_timeout=timeout):
        if method is not None:
            delivery = (method, props, body)
        break
    ch.cancel()
    assert delivery is not None, f"no message arrived in {queue!r} within {timeout}s"
    ch.basic_ack(delivery[0].delivery_tag)
    ch.close()
    return delivery


def closed_by_broker(action: Callable[[], object]) -> tuple[int, str]:
    """Run ``action``; it must make the broker close the channel: (reply code, text)."""
    try:
        action()
    except pika.exceptions.ChannelClosedByBroker as exc:
        return exc.reply_code, exc.reply_text
    raise AssertionError("the broker did not close the channel")


def wait_until_unroutable(
    conn: pika.BlockingConnection, routing_key: str, deadline_s: float, interval: float = 0.05
) -> float:
    """Publish mandatory messages to ``routing_key`` (confirm mode) until one comes back
    unroutable (the queue is gone); return the seconds that took. Publishing does not count
    as using a queue, so this probe does not renew x-expires."""
    ch = conn.channel()
    ch.confirm_delivery()
    start = time.monotonic()
    while time.monotonic() - start < deadline_s:
        try:
            ch.basic_publish("", routing_key, b"probe", mandatory=True)
        except pika.exceptions.UnroutableError:
            ch.close()
            return time.monotonic() - start
        conn.sleep(interval)
    raise AssertionError(f"{routing_key!r} still routable after {deadline_s}s")


# -- the exact field types of a content header's table (what pika does not show) --------------
def field_table(data: bytes) -> dict[str, tuple[str, Any]]:
    """Decode an AMQP field table to {key: (type letter, value)}, nested for F and A."""
    out: dict[str, tuple[str, Any]] = {}
    pos = 0
    while pos < len(data):
        size = data[pos]
        key = data[pos + 1 : pos + 1 + size].decode()
        kind, value, pos = _field_value(data, pos + 1 + size)
        out[key] = (kind, value)
    return out


def _field_value(data: bytes, pos: int) -> tuple[str, Any, int]:
    kind = chr(data[pos])
    pos += 1
    fixed = {"b": ">b", "B": ">B", "s": ">h", "u": ">H", "I": ">i", "i": ">I"}
    fixed |= {"l": ">q", "T": ">Q", "f": ">f", "d": ">d", "t": ">B"}
    if kind in fixed:
        fmt = fixed[kind]
        return kind, struct.unpack_from(fmt, data, pos)[0], pos + struct.calcsize(fmt)
    if kind in "SxFA":
        (size,) = struct.unpack_from(">I", data, pos)
        raw = data[pos + 4 : pos + 4 + size]
        end = pos + 4 + size
        if kind == "F":
            return kind, field_table(raw), end
        if kind == "A":
            items = []
            inner = 0
            while inner < len(raw):
                item_kind, item, inner = _field_value(raw, inner)
                items.append((item_kind, item))
            return kind, items, end
        return kind, raw, end
    if kind == "V":
        return kind, None, pos
    raise AssertionError(f"unexpected field type {kind!r}")


def header_field_types(content_header_payload: bytes) -> dict[str, tuple[str, Any]]:
    """The typed headers table of a raw content header frame payload."""
    raw = RawProperties(content_header_payload).fields.get(HEADERS)
    assert raw is not None, "the message has no headers table"
    return field_table(raw[4:])
