"""What the links (shovels, federation) share as AMQP 0-9-1 clients (aiormq).

`Acker` coalesces source acks; `close_connection`, `closing`, `closed_reason` and
`reason_of` close connections and name why a link stopped (the reason its status shows);
`error_text` is a federation link's error as RabbitMQ words the common ones.

`LongLong` is an ``int`` that pamqp encodes as an AMQP long-long (``l``) in a field
table. pamqp picks the smallest integer type for a value; RabbitMQ's federation refuses
an ``x-federation-upstream`` exchange whose ``x-max-hops`` is not of type long ("Argument
x-max-hops must be of type long"), so the federation links declare it as a `LongLong`.
Importing this module teaches pamqp's table encoder that one type; every other value is
encoded as before.

pamqp also checks queue and exchange names against the spec's grammar when it builds or
encodes a method (``^[a-zA-Z0-9-_.:@#,/+ ]*$``); RabbitMQ accepts any UTF-8 short string,
and federation's own names contain ``>`` (``federation: x -> cluster``). Importing this
module widens pamqp's two name patterns to anything (its length check stays); the broker
itself never relies on them (amqpd/wire/codec.py encodes without pamqp's validation).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import re
from collections import deque
from contextlib import suppress
from typing import Any, Final

import aiormq.abc
import pamqp.constants
import pamqp.encode

__all__ = [
    "CLOSE_TIMEOUT",
    "Acker",
    "LinkFailed",
    "LongLong",
    "close_connection",
    "closed_reason",
    "closing",
    "error_text",
    "reason_of",
]

log = logging.getLogger(__name__)

CLOSE_TIMEOUT: Final = 5.0  # seconds a connection may take to close


class LongLong(int):
    """An integer a field table carries as an AMQP long-long (``l``)."""


_table_integer = pamqp.encode.table_integer


def _typed_table_integer(value: int) -> bytes:
    if type(value) is LongLong:
        return b"l" + pamqp.encode.long_long_int(value)
    return _table_integer(value)


setattr(pamqp.encode, "table_integer", _typed_table_integer)  # noqa: B010 - see the top


for _domain in ("queue-name", "exchange-name"):
    pamqp.constants.DOMAIN_REGEX[_domain] = re.compile(r".*", re.DOTALL)


class LinkFailed(Exception):
    """A running link stopped; the message is the reason shown in its status."""


class Acker:
    """Settles source deliveries in few frames: a delivery is settled once forwarded (or
    nacked back); the longest settled run of delivery tags from the oldest is acked with
    one ``basic.ack(multiple=true)`` per event-loop turn (the destination confirms many
    publishes with one frame, so their forwards finish in the same turn)."""

    def __init__(self, channel: aiormq.abc.AbstractChannel) -> None:
        self._channel = channel
        self._pending: deque[int] = deque()  # tags received and not yet acked, in order
        self._settled: set[int] = set()
        self._nacked: set[int] = set()  # settled by a nack already: never the ack's tag
        self._flushing = False

    def received(self, tag: int) -> None:
        self._pending.append(tag)

    async def settled(self, tag: int, nacked: bool = False) -> None:
        self._settled.add(tag)
        if nacked:
            self._nacked.add(tag)
        if self._flushing:
            return  # the forward that started the flush acks this one too
        self._flushing = True
        try:
            await asyncio.sleep(0)  # let the other forwards settled by the same frame run
        finally:
            self._flushing = False
        await self.flush()

    async def flush(self) -> None:
        """Ack the settled run of deliveries now."""
        pending, settled = self._pending, self._settled
        last = None
        while pending and pending[0] in settled:
            tag = pending.popleft()
            settled.discard(tag)
            if tag in self._nacked:
                self._nacked.discard(tag)
            else:
                last = tag
        if last is not None:
            await self._channel.basic_ack(last, multiple=True)


async def close_connection(connection: aiormq.abc.AbstractConnection) -> None:
    """Close a connection (unacked source deliveries go back to their queue), bounded."""
    with suppress(Exception):
        async with asyncio.timeout(CLOSE_TIMEOUT):
            await connection.close()


def closing(thing: Any) -> asyncio.Future[Any]:
    future: asyncio.Future[Any] = asyncio.ensure_future(thing.closing)
    return future


def closed_reason(*things: Any) -> str:
    for thing in things:
        closing = thing.closing
        if closing.done():
            exc = None if closing.cancelled() else closing.exception()
            if exc is not None:
                return reason_of(exc)
    return "connection closed"


def reason_of(exc: BaseException | None) -> str:
    """The text a link's status shows for the exception that stopped it."""
    if exc is None:
        return "unknown"
    text = str(exc) or type(exc).__name__
    return text if isinstance(exc, LinkFailed) else f"{type(exc).__name__}: {text}"


def error_text(exc: BaseException) -> str:
    """A federation link's error as its status shows it: RabbitMQ's ``econnrefused`` when the
    upstream refused the connection, a sentence when it refused the vhost (aiormq keeps
    only the repr of the broker's Connection.Close), else the exception's text."""
    seen: BaseException | None = exc
    visited: set[int] = set()
    while seen is not None and id(seen) not in visited:  # chains can loop
        visited.add(id(seen))
        if getattr(seen, "errno", None) == errno.ECONNREFUSED or (
            f"[Errno {errno.ECONNREFUSED}]" in str(seen)
        ):
            return "econnrefused"
        if "'Connection.OpenOk'], got <Connection.Close" in str(seen):  # aiormq's words
            return "the upstream refused Connection.Open (no such vhost, or no access to it)"
        seen = seen.__cause__ or seen.__context__
    return reason_of(exc)
