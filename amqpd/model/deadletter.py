"""Dead-lettering: the header a dead-lettered message carries, and RabbitMQ's cycle rule.

RabbitMQ semantics (rabbit_dead_letter): the message keeps its properties, gains an
``x-death`` array with one table per (queue, reason) — count, reason, queue, time, exchange,
routing-keys, original-expiration — newest first (a repeated (queue, reason) has its count
incremented and moves to the front), ``x-first-death-reason/queue/exchange`` set once, and
loses its ``expiration`` property. Reasons: rejected, expired, maxlen, delivery_limit.
A dead-lettered message that would return to a queue it already died in is dropped for that
queue unless a rejection happened since its latest death there (a client decision breaks the
cycle). :func:`dead_lettered_message` builds the message that `VirtualHost.dead_letter`
(model/vhost.py) routes from the dead-letter exchange.
"""

from __future__ import annotations

import datetime
from typing import Any

from amqpd.model.message import Message
from amqpd.model.sender_selected import sender_selected_keys
from amqpd.wire.codec import encode_shortstr
from amqpd.wire.content_header import peek_header
from amqpd.wire.properties import EXPIRATION, RawProperties


def dead_letter_header(
    header: bytes,
    queue: str,
    reason: str,
    exchange: str,
    routing_keys: list[str],
    now: float,
    drop_cc: bool = False,
) -> tuple[bytes, list[dict[str, Any]]]:
    """The dead-lettered content header and its x-death list (``drop_cc``: remove the CC
    header, as RabbitMQ does when x-dead-letter-routing-key replaces the routing keys)."""
    props = RawProperties(header)
    deaths = props.header_value("x-death")
    deaths = [dict(d) for d in deaths if isinstance(d, dict)] if isinstance(deaths, list) else []
    expiration = props.get_shortstr(EXPIRATION)
    for index, death in enumerate(deaths):
        if death.get("queue") == queue and death.get("reason") == reason:
            entry = deaths.pop(index)
            entry["count"] = int(entry.get("count", 0)) + 1
            break
    else:
        entry = {
            "count": 1,
            "reason": reason,
            "queue": queue,
            "time": datetime.datetime.fromtimestamp(int(now), tz=datetime.UTC),
            "exchange": exchange,
            "routing-keys": list(routing_keys),
        }
        if expiration is not None:
            entry["original-expiration"] = expiration
    deaths.insert(0, entry)
    updates: dict[str, Any] = {"x-death": deaths}
    if props.header_value("x-first-death-reason") is None:
        updates["x-first-death-reason"] = reason
        updates["x-first-death-queue"] = queue
        updates["x-first-death-exchange"] = exchange
    props.edit_headers(updates, remove=("CC",) if drop_cc else ())
    props.set_shortstr(EXPIRATION, None)
    return props.encode(), deaths


def is_cycle(deaths: list[dict[str, Any]], target_queue: str) -> bool:
    """True if delivering to ``target_queue`` closes a fully automatic dead-letter cycle:
    the deaths since (and including) the latest one in ``target_queue`` contain no
    rejection (rabbit_dead_letter:is_cycle; older deaths do not matter)."""
    for death in deaths:  # newest first
        if death.get("reason") == "rejected":
            return False
        if death.get("queue") == target_queue:
            return True
    return False


def dead_lettered_message(
    message: Message,
    queue: str,
    reason: str,
    exchange: str,
    fixed_key: str | None,
    now: float,
) -> tuple[Message, list[dict[str, Any]]]:
    """The copy of ``message`` that leaves ``queue`` for dead-letter ``exchange`` (routed on
    ``fixed_key``, x-dead-letter-routing-key, when set), and its x-death list (for the
    cycle check)."""
    routing_keys = [message.routing_key, *sender_selected_keys(message, bcc=False)]
    header, deaths = dead_letter_header(
        message.header,
        queue,
        reason,
        message.exchange,
        routing_keys,
        now,
        drop_cc=fixed_key is not None,  # RabbitMQ drops CC when the key is replaced
    )
    key = fixed_key if fixed_key is not None else message.routing_key
    peek = peek_header(header)
    dead = Message(
        exchange,
        key,
        encode_shortstr(exchange),
        encode_shortstr(key),
        header,
        message.body,
        message.persistent,
        peek.priority,
        None,
        peek.headers_raw,
    )
    return dead, deaths
