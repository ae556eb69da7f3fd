"""What the broker's AMQP links share (shovels, federation links): the I/O shell's side.

* `LocalEndpoint`: how a link reaches this broker (its own listener, the internal user);
* `Backoff`: the delay before a failed link reconnects (doubling, capped, reset after a
  stable run);
* `Acker`: settles deliveries of a source channel with few ``basic.ack(multiple=true)``;
* `close_quietly`, `closing`, `closed_reason`, `reason_of`, `LinkFailed`: closing
  connections and turning failures into the reason a status shows.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from contextlib import suppress
from typing import Any, Final
from urllib.parse import quote, urlsplit, urlunsplit

import aiormq
import aiormq.abc

__all__ = [
    "Acker",
    "Backoff",
    "LinkFailed",
    "LocalEndpoint",
    "close_quietly",
    "closed_reason",
    "closing",
    "reason_of",
]

MAX_BACKOFF: Final = 30.0  # seconds between reconnection attempts, at most
STABLE_AFTER: Final = 10.0  # a run this long resets the back-off
CLOSE_TIMEOUT: Final = 5.0  # seconds a connection may take to close
HEARTBEAT: Final = 10  # seconds, unless the URI says (amqp_client's default)


class LocalEndpoint:
    """How the links reach the local broker: its listener and the internal credentials."""

    def __init__(self, host: str, port: int, user: str, secret: str) -> None:
        self.host = "127.0.0.1" if host in ("", "0.0.0.0") else host
        self.port = port
        self.user = user
        self.secret = secret

    def resolve(self, uri: str) -> str:
        """The URI to connect to: a host-less URI becomes the local listener; a URI without
        ``heartbeat`` gets RabbitMQ's client default (10 s), so a link whose peer vanished
        without closing the TCP connection (a network partition) is noticed."""
        parts = urlsplit(uri)
        if "heartbeat=" not in parts.query:
            query = (
                f"{parts.query}&heartbeat={HEARTBEAT}" if parts.query else f"heartbeat={HEARTBEAT}"
            )
            parts = parts._replace(query=query)
            uri = urlunsplit(parts)
        if parts.hostname:
            return uri
        vhost = parts.path[1:] if parts.path.startswith("/") else ""
        path = "/" + quote(vhost, safe="") if vhost else "/"
        query = f"?{parts.query}" if parts.query else ""
        return (
            f"amqp://{quote(self.user, safe='')}:{quote(self.secret, safe='')}"
            f"@{self.host}:{self.port}{path}{query}"
        )


class Backoff:
    """Reconnection delays: ``base`` after a run that lasted `STABLE_AFTER` seconds,
    doubled after each run that failed sooner, never more than `MAX_BACKOFF` (nor less
    than ``base``)."""

    def __init__(self, base: float) -> None:
        self.base = base
        self._delay = base
        self._started = time.monotonic()

    def started(self) -> None:
        """A run (connection attempt) starts now."""
        self._started = time.monotonic()

    def next_delay(self) -> float:
        """The delay before the next attempt, after the run that just ended."""
        if time.monotonic() - self._started >= STABLE_AFTER:
            self._delay = self.base
        delay = self._delay
        self._delay = min(max(delay * 2, self.base), MAX_BACKOFF)
        return delay


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


async def close_quietly(connection: aiormq.abc.AbstractConnection) -> None:
    """Close a connection (unacked source deliveries go back to their queue), bounded."""
    with suppress(Exception):
        async with asyncio.timeout(CLOSE_TIMEOUT):
            await connection.close()


def closing(thing: Any) -> asyncio.Future[Any]:
    """A future that completes when a connection or channel closes (cancel it when done)."""
    future: asyncio.Future[Any] = asyncio.ensure_future(thing.closing)
    return future


def closed_reason(*things: Any) -> str:
    """Why the first of ``things`` (connections, channels) that closed with an error did."""
    for thing in things:
        closing = thing.closing
        if closing.done():
            exc = None if closing.cancelled() else closing.exception()
            if exc is not None:
                return reason_of(exc)
    return "connection closed"


def reason_of(exc: BaseException | None) -> str:
    """A failure as a link's status shows it."""
    if exc is None:
        return "unknown"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if not isinstance(exc, LinkFailed) else text
