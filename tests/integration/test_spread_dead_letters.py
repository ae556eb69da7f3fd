"""Dead-lettering across the workers of a spread vhost (``--workers 2 --spread-vhosts /``):
a message that expires (per-message and per-queue TTL), overflows a length limit or is
rejected on one worker's queue reaches the dead-letter queue on the other worker, with
RabbitMQ's x-death entry and x-first-death headers, as on one process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pika
import pika.exceptions

from tests.integration.test_spread_vhosts import _count, _node, _queues_on, _two_workers
from tests.integration.test_workers import _wait_for

DEAD = "dead"  # the dead-letter queue, on the other worker


def _dead_lettering(**extra: Any) -> dict[str, Any]:
    return {"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": DEAD, **extra}


def _dead_letter(port: int, channel: Any) -> tuple[bytes, dict[str, Any]]:
    """The next message of the dead-letter queue and its headers (it must arrive)."""
    _wait_for(lambda: _count(port, DEAD) >= 1, "a dead letter on the other worker")
    method, properties, body = channel.basic_get(DEAD, auto_ack=True)
    assert method is not None
    return body, dict(properties.headers or {})


def _death(headers: dict[str, Any]) -> dict[str, Any]:
    (entry,) = headers["x-death"]
    assert isinstance(entry, dict)
    return entry


def test_expired_overflowed_and_rejected_messages_dead_letter_to_another_worker(
    tmp_path: Path,
) -> None:
    with _node(tmp_path) as (broker, data):
        here, there = _two_workers(broker.port)
        source, target = here.channel(), there.channel()
        target.exchange_declare("dlx", "direct")  # every worker routes with it
        target.queue_declare(DEAD)
        target.queue_bind(DEAD, "dlx", DEAD)
        source.queue_declare("ttl", arguments=_dead_lettering(**{"x-message-ttl": 50}))
        source.queue_declare("short", arguments=_dead_lettering(**{"x-max-length": 1}))
        source.queue_declare("picky", arguments=_dead_lettering())
        mine, theirs = _queues_on(data, 0), _queues_on(data, 1)
        dead_worker = 0 if DEAD in mine else 1
        sources = {"ttl", "short", "picky"}
        assert sources <= (theirs if dead_worker == 0 else mine)  # each crossing

        source.basic_publish("", "ttl", b"expired by the queue")
        body, headers = _dead_letter(broker.port, target)
        assert body == b"expired by the queue"
        death = _death(headers)
        assert (death["reason"], death["queue"], death["count"]) == ("expired", "ttl", 1)
        assert death["exchange"] == "" and death["routing-keys"] == ["ttl"]
        assert headers["x-first-death-reason"] == "expired"
        assert headers["x-first-death-queue"] == "ttl"

        per_message = pika.BasicProperties(expiration="0")
        source.basic_publish("", "picky", b"expired by its sender", per_message)
        body, headers = _dead_letter(broker.port, target)
        assert body == b"expired by its sender"
        assert _death(headers)["original-expiration"] == "0"

        source.basic_publish("", "short", b"first")
        source.basic_publish("", "short", b"second")  # the first is dropped from the head
        body, headers = _dead_letter(broker.port, target)
        assert (body, _death(headers)["reason"]) == (b"first", "maxlen")

        source.basic_publish("", "picky", b"refused")
        _wait_for(lambda: _count(broker.port, "picky") == 1, "the message to reject")
        method, _properties, _body = source.basic_get("picky")
        assert method is not None
        source.basic_reject(method.delivery_tag, requeue=False)
        body, headers = _dead_letter(broker.port, target)
        death = _death(headers)
        assert (body, death["reason"], death["queue"]) == (b"refused", "rejected", "picky")

        assert _count(broker.port, DEAD) == 0  # each arrived once
        here.close()
        there.close()
