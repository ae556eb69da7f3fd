"""Reading a SQLite store back at startup: the definitions (exchanges, queues, bindings),
every message in ``seq`` order per queue (optionally with bodies only for the head of each
queue, or only the keys of some queues) and the deduplication ids. :meth:`Store.load`
(persistence/store.py) runs :func:`load_state` inside one read transaction (a snapshot)."""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterable
from itertools import groupby
from operator import itemgetter
from typing import Any

import aiosqlite

from persistence import fieldcodec
from persistence.records import (
    BindingDef,
    ExchangeDef,
    MessageRecord,
    QueueDef,
    QueueKey,
    RecoveredState,
)

log = logging.getLogger(__name__)

_LOAD_DEDUP_IDS = "SELECT queue_id, pos, id FROM dedup_ids ORDER BY queue_id, pos"

_MESSAGE_COLUMNS = (
    "seq, exchange, routing_key, header, body, redelivered, delivery_count, expires_at"
)
# {}: the WHERE clause that leaves out the queues loaded as keys only
_LOAD_MESSAGES = f"SELECT queue_id, {_MESSAGE_COLUMNS} FROM messages{{}} ORDER BY queue_id, seq"
_LOAD_KEYS = "SELECT seq FROM messages WHERE queue_id = ? ORDER BY seq"
# The same, with the body only for the first ?1 messages of each queue (the rest: its size).
_LOAD_MESSAGES_WINDOWED = (
    "SELECT queue_id, seq, exchange, routing_key, header,"
    " CASE WHEN row_number() OVER (PARTITION BY queue_id ORDER BY seq) <= ?1"
    " THEN body ELSE length(body) END,"
    " redelivered, delivery_count, expires_at FROM messages{} ORDER BY queue_id, seq"
)
_FETCH_ROWS = 8192  # rows per fetchmany while loading
_DEDUP_LIMIT = 65536  # entries in the load-time string/header dedup cache before it resets
_FIRST = itemgetter(0)


async def load_state(
    db: aiosqlite.Connection, body_window: int | None, load_messages: bool, keys_only: str
) -> RecoveredState:
    """Everything stored, read with ``db`` (in a transaction the caller opened): see
    :meth:`persistence.store.Store.load` for the arguments."""
    exchanges = [
        ExchangeDef(vhost, name, type_name, bool(auto_delete), bool(internal), _args(args))
        for vhost, name, type_name, auto_delete, internal, args in await db.execute_fetchall(
            "SELECT vhost, name, type, auto_delete, internal, arguments FROM exchanges"
            " ORDER BY vhost, name"
        )
    ]
    queue_rows = list(
        await db.execute_fetchall(
            "SELECT id, vhost, name, auto_delete, arguments FROM queues ORDER BY vhost, name"
        )
    )
    queues = [
        QueueDef(vhost, name, bool(auto_delete), _args(args))
        for _, vhost, name, auto_delete, args in queue_rows
    ]
    keys: dict[int, QueueKey] = {row[0]: (row[1], row[2]) for row in queue_rows}
    bindings = [
        BindingDef(vhost, source, kind, destination, routing_key, _args(args))
        for vhost, source, kind, destination, routing_key, args in await db.execute_fetchall(
            "SELECT vhost, source, destination_kind, destination, routing_key, arguments"
            " FROM bindings ORDER BY vhost, source, destination_kind, destination,"
            " routing_key, arguments"
        )
    ]
    messages: dict[QueueKey, list[tuple[int, MessageRecord]]] = {}
    if not load_messages:
        return RecoveredState(exchanges, queues, bindings, messages)
    key_ids = [row[0] for row in queue_rows if keys_only and row[2].startswith(keys_only)]
    message_keys: dict[QueueKey, list[int]] = {}
    for queue_id in key_ids:  # the primary key's index alone: no row is read
        rows = await db.execute_fetchall(_LOAD_KEYS, (queue_id,))
        message_keys[keys[queue_id]] = [row[0] for row in rows]
    # ids are integers from the database itself: safe to put into the statement
    skip = f" WHERE queue_id NOT IN ({','.join(map(str, key_ids))})" if key_ids else ""
    gc_was_enabled = gc.isenabled()
    gc.disable()  # the records are long-lived; collecting while building them is wasted
    try:
        if body_window is None:
            cursor = await db.execute(_LOAD_MESSAGES.format(skip))
        else:
            cursor = await db.execute(_LOAD_MESSAGES_WINDOWED.format(skip), (body_window,))
        dedup: dict[Any, Any] = {}
        while rows := await cursor.fetchmany(_FETCH_ROWS):
            if len(dedup) > _DEDUP_LIMIT:
                dedup.clear()
            for queue_id, group in groupby(rows, _FIRST):
                key = keys.get(queue_id)
                if key is None:  # cannot happen through apply(); keep loading the rest
                    log.warning("ignoring messages of unknown queue id %d", queue_id)
                    continue
                out = messages.get(key)
                if out is None:
                    out = messages[key] = []
                out += _records(group, dedup)
        await cursor.close()
    finally:
        if gc_was_enabled:
            gc.enable()
    dedup_ids: dict[QueueKey, list[tuple[int, bytes]]] = {}
    for queue_id, pos, dedup_id in await db.execute_fetchall(_LOAD_DEDUP_IDS):
        key = keys.get(queue_id)
        if key is not None:
            dedup_ids.setdefault(key, []).append((pos, bytes(dedup_id)))
    return RecoveredState(exchanges, queues, bindings, messages, dedup_ids, message_keys)


def _records(rows: Iterable[Any], dedup: dict[Any, Any]) -> list[tuple[int, MessageRecord]]:
    """Turn message rows into ``(seq, record)`` pairs.

    ``rows`` hold the queue id, then the ``_MESSAGE_COLUMNS`` (a paged-out body: its size).
    Equal exchange names, routing keys and headers are shared through ``dedup`` (a million
    messages usually carry a handful of distinct ones).
    """
    d = dedup.setdefault
    return [
        (
            seq,
            MessageRecord(d(ex, ex), d(rk, rk), d(hd, hd), body, red == 1, count, exp)
            if type(body) is bytes
            else MessageRecord(d(ex, ex), d(rk, rk), d(hd, hd), b"", red == 1, count, exp, body),
        )
        for _, seq, ex, rk, hd, body, red, count, exp in rows
    ]


def _args(blob: bytes) -> dict[str, Any]:
    return fieldcodec.decode(blob)
