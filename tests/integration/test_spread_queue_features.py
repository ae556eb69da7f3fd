"""Queue features across the workers of a spread vhost (``--workers 2 --spread-vhosts /``).
Dead-lettering: a message that expires (per-message and per-queue TTL), overflows a
length limit or is rejected on one worker's queue reaches the dead-letter queue on the
other worker, with RabbitMQ's x-death entry and x-first-death headers, as on one process.
Policies and operator policies set on the running node apply to the queues of every
worker (the stricter of the two, as RabbitMQ merges them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pika
import pika.exceptions

from tests.integration.test_spread_vhosts import _count, _node, _queues_on, _two_workers
from tests.integration.test_workers import _ctl, _wait_for

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


def _policies(data: Path) -> dict[str, str]:
    """Each queue's policy, as ``amqpd ctl list-queues`` shows the node's queues."""
    rows = json.loads(_ctl(data, "list-queues", "name", "policy", "--format", "json", "-q"))
    return {row["name"]: row["policy"] for row in rows}


def _publish_confirmed(channel: Any, queue: str, bodies: range) -> None:
    for i in bodies:
        channel.basic_publish("", queue, b"%d" % i)  # confirmed: enqueued when it returns


def test_policies_and_operator_policies_apply_on_every_worker(tmp_path: Path) -> None:
    with _node(tmp_path) as (broker, data):
        here, there = _two_workers(broker.port)
        queues = {"capped-here": here.channel(), "capped-there": there.channel()}
        for name, channel in queues.items():
            channel.queue_declare(name)
            channel.confirm_delivery()
        assert len(_queues_on(data, 0) & set(queues)) == 1  # one on each worker
        _ctl(data, "set-operator-policy", "ops-cap", "^capped-", '{"max-length": 2}')
        _ctl(data, "set-policy", "cap", "^capped-", '{"max-length": 3}')
        # applied in order on each worker: once the policy shows, so has the operator's
        both = {name: "cap" for name in queues}
        _wait_for(lambda: _policies(data) == both, "the policy on both workers' queues")
        for name, channel in queues.items():  # each publisher on its queue's own worker
            _publish_confirmed(channel, name, range(5))
        assert {name: _count(broker.port, name) for name in queues} == dict.fromkeys(queues, 2)

        _ctl(data, "clear-operator-policy", "ops-cap")
        _ctl(data, "set-policy", "cap-later", "^capped-", '{"max-length": 3}', "--priority", "1")
        later = {name: "cap-later" for name in queues}
        _wait_for(lambda: _policies(data) == later, "the later policy on both workers")
        for name, channel in queues.items():
            _publish_confirmed(channel, name, range(5, 10))
        assert {name: _count(broker.port, name) for name in queues} == dict.fromkeys(queues, 3)
        here.close()
        there.close()
