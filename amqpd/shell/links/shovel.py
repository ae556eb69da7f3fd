"""One dynamic shovel: an AMQP 0-9-1 client pair (aiormq) on the broker's event loop.

Theory of operation
-------------------
`ShovelLink.run` is the shovel's supervisor loop, a small state machine whose state is
what ``/api/shovels`` and ``amqpd ctl list-shovels`` show (RabbitMQ's names)::

    starting --connected, consuming--> running --error / link cut--> terminated
        ^                                                               |
        +----------- after the reconnect delay (doubling, capped) -----+

* **starting**: connect to the destination (publisher confirms on unless ``no-ack`` /
  ``on-publish`` need none), declare its queue if one is named (passive first, then
  durable, as RabbitMQ), connect to the source, declare the source queue the same way
  (or an exclusive queue bound to ``src-exchange`` with ``src-exchange-key``), set
  ``basic.qos(src-prefetch-count)`` and consume (``no_ack`` for ack-mode no-ack).
* **running**: every delivery is published to the destination at once, in delivery order
  (aiormq runs each delivery callback as a task and serialises publishes on the channel
  lock, FIFO). ``on-confirm``: the source delivery is acked only when the destination
  confirmed the publish (nacked with requeue if the destination nacked it); a confirm
  that never comes (the destination died) means no ack, so the source requeues the
  message when our source connection goes: duplicates are possible, losses are not.
  ``on-publish``: acked once the publish was written. ``no-ack``: nothing to ack.
* **terminated**: any failure (a connection lost, a channel closed by an error, a refused
  declaration) closes both connections (the source requeues whatever was not acked) and
  records the reason; after ``reconnect-delay`` seconds (doubled after each failure that
  came before the shovel ran for a while, up to 30 s: links/backoff.py) the loop starts again.
  ``reconnect-delay`` 0 means: stay terminated (RabbitMQ). ``src-delete-after`` (a count,
  or the queue's length at start) ends the shovel: the loop returns and the supervisor
  clears the parameter, as RabbitMQ does.

A URI without a host (``amqp://``, ``amqp:///vhost``) is the local broker: the link
connects to the broker's own AMQP listener as the internal user (amqpd/model/auth.py
INTERNAL_USER), so local and remote endpoints take the same, ordinary path.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any, Final, cast

import aiormq
import aiormq.abc
from pamqp import commands as spec
from pamqp.common import Arguments

from amqpd.model.shovels import ShovelSpec, redact_uri
from amqpd.shell.links.backoff import Backoff
from amqpd.shell.links.client import (
    Acker,
    LinkFailed,
    close_connection,
    closed_reason,
    closing,
    reason_of,
)
from amqpd.shell.links.link_specs import LocalEndpoint

__all__ = ["ShovelLink"]

log = logging.getLogger(__name__)

_PROPERTY_NAMES: Final = {"type": "message_type"}  # publish-properties key -> pamqp name


class ShovelLink:
    """Runs one shovel until cancelled (or until ``src-delete-after`` is reached)."""

    def __init__(self, spec_: ShovelSpec, local: LocalEndpoint, node: str) -> None:
        self.spec = spec_
        self.local = local
        self.node = node
        self.state = "starting"
        self.reason: str | None = None
        self.timestamp = time.time()
        self.src_uri = ""
        self.dest_uri = ""
        self._attempt = 0
        self.stopped = False  # set by `stop`: never start again, even if a cancel is lost

    # -- status ---------------------------------------------------------------------------
    def _set(self, state: str, reason: str | None = None) -> None:
        self.state, self.reason, self.timestamp = state, reason, time.time()

    def status(self) -> dict[str, Any]:
        """The shovel as RabbitMQ's ``/api/shovels`` lists it."""
        spec_ = self.spec
        item: dict[str, Any] = {
            "node": self.node,
            "timestamp": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.timestamp)),
            "name": spec_.name,
            "vhost": spec_.vhost,
            "type": "dynamic",
            "state": self.state,
        }
        if self.state == "running":
            item.update(
                src_uri=redact_uri(self.src_uri),
                src_protocol="amqp091",
                dest_protocol="amqp091",
                dest_uri=redact_uri(self.dest_uri),
            )
            item.update(self.details())
        if self.state == "terminated" and self.reason is not None:
            item["reason"] = self.reason
        return item

    def details(self) -> dict[str, Any]:
        """src_queue / src_exchange(_key) / dest_queue / dest_exchange(_key), as given."""
        spec_ = self.spec
        fields = {
            "src_queue": spec_.src_queue,
            "src_exchange": spec_.src_exchange,
            "src_exchange_key": spec_.src_exchange_key if spec_.src_exchange else None,
            "dest_queue": spec_.dest_queue,
            "dest_exchange": spec_.dest_exchange,
            "dest_exchange_key": spec_.dest_exchange_key,
        }
        return {key: value for key, value in fields.items() if value is not None}

    def stop(self, task: asyncio.Task[None]) -> None:
        """Stop the shovel: cancel its task (which closes its connections)."""
        self.stopped = True
        task.cancel()

    # -- the supervisor loop ----------------------------------------------------------------
    async def run(self) -> None:
        """Connect, shovel, reconnect after failures; returns when ``src-delete-after`` is
        reached (the caller then clears the parameter). Cancel it to stop the shovel."""
        backoff = Backoff(self.spec.reconnect_delay)
        while not self.stopped:
            self._set("starting")
            backoff.started()
            try:
                finished = await self._run_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                reason = reason_of(exc)
                self._set("terminated", reason)
                log.warning(
                    "shovel '%s' in vhost '%s' failed: %s", self.spec.name, self.spec.vhost, reason
                )
            else:
                if finished:
                    self._set("terminated", "shutdown, autodelete")
                    return
            if self.spec.reconnect_delay <= 0 or self.stopped:
                return  # RabbitMQ: reconnect-delay 0 means do not restart
            await asyncio.sleep(backoff.next_delay())

    def _pick(self, uris: tuple[str, ...]) -> str:
        return uris[self._attempt % len(uris)]

    async def _run_once(self) -> bool:
        """One connected run; True when src-delete-after was reached."""
        spec_ = self.spec
        self._attempt += 1
        self.src_uri, self.dest_uri = self._pick(spec_.src_uris), self._pick(spec_.dest_uris)
        loop = asyncio.get_running_loop()
        failure: asyncio.Future[None] = loop.create_future()
        dest = await aiormq.connect(self.local.resolve(self.dest_uri))
        try:
            source = await aiormq.connect(self.local.resolve(self.src_uri))
            try:
                return await self._shovel(source, dest, failure)
            finally:
                await close_connection(source)
        finally:
            await close_connection(dest)

    async def _shovel(
        self,
        source: aiormq.abc.AbstractConnection,
        dest: aiormq.abc.AbstractConnection,
        failure: asyncio.Future[None],
    ) -> bool:
        spec_ = self.spec
        confirms = spec_.ack_mode == "on-confirm"
        # aiormq.Channel: its basic_publish takes ``wait`` (the abstract class omits it)
        out = cast(aiormq.Channel, await dest.channel(publisher_confirms=confirms))
        if spec_.dest_queue is not None:
            await _ensure_queue(dest, spec_.dest_queue, spec_.dest_queue_args)
        inbound = await source.channel(publisher_confirms=False)
        queue, length = await self._source_queue(source, inbound)
        remaining: int | None = None
        if isinstance(spec_.delete_after, int):
            remaining = spec_.delete_after
        elif spec_.delete_after == "queue-length":
            remaining = length
        if remaining is not None and remaining <= 0:
            return True
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        acker = Acker(inbound)
        forward = self._forwarder(out, inbound, acker, failure, done, remaining)
        if spec_.prefetch_count:
            await inbound.basic_qos(prefetch_count=min(spec_.prefetch_count, 65535))
        await inbound.basic_consume(queue, forward, no_ack=spec_.ack_mode == "no-ack")
        self._set("running")
        log.info("shovel '%s' in vhost '%s' running", spec_.name, spec_.vhost)
        watched = [
            failure,
            done,
            closing(source),
            closing(dest),
            closing(out),
            closing(inbound),
        ]
        try:
            await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for observer in watched[2:]:
                observer.cancel()
        if done.done():
            await acker.flush()  # the last acks, before the connections close
            return True
        if failure.done() and failure.exception() is not None:
            raise LinkFailed(reason_of(failure.exception()))
        raise LinkFailed(closed_reason(source, dest, out, inbound))

    async def _source_queue(
        self, source: aiormq.abc.AbstractConnection, inbound: aiormq.abc.AbstractChannel
    ) -> tuple[str, int]:
        spec_ = self.spec
        if spec_.src_queue is not None:
            length = await _ensure_queue(source, spec_.src_queue, spec_.src_queue_args)
            return spec_.src_queue, length
        declared = await inbound.queue_declare("", exclusive=True)
        queue = declared.queue or ""
        await inbound.queue_bind(
            queue, spec_.src_exchange or "", routing_key=spec_.src_exchange_key
        )
        return queue, 0

    def _forwarder(
        self,
        out: aiormq.Channel,
        inbound: aiormq.abc.AbstractChannel,
        acker: Acker,
        failure: asyncio.Future[None],
        done: asyncio.Future[None],
        remaining: int | None,
    ) -> Callable[[aiormq.abc.DeliveredMessage], Any]:
        spec_ = self.spec
        ack_mode = spec_.ack_mode
        confirms = ack_mode == "on-confirm"
        received = 0
        left = remaining

        async def forward(message: aiormq.abc.DeliveredMessage) -> None:
            nonlocal received, left
            received += 1
            if remaining is not None and received > remaining and ack_mode != "no-ack":
                return  # beyond src-delete-after: requeued when the source channel closes
            # (no-ack: the source already forgot it, so it is forwarded rather than dropped)
            delivery = message.delivery
            assert isinstance(delivery, spec.Basic.Deliver)
            tag = delivery.delivery_tag or 0
            if ack_mode != "no-ack":
                acker.received(tag)
            try:
                exchange, key = self._target(delivery)
                properties = self._properties(message.header.properties)
                confirmation = await out.basic_publish(
                    message.body,
                    exchange=exchange,
                    routing_key=key,
                    properties=properties,
                    wait=not confirms,  # on-confirm waits for the confirm, not the write
                )
                nacked = isinstance(confirmation, spec.Basic.Nack)
                if nacked:  # only with on-confirm: the destination refused it
                    await inbound.basic_nack(tag, multiple=False, requeue=True)
                if ack_mode != "no-ack":
                    await acker.settled(tag, nacked)
            except Exception as exc:  # the run fails; the source requeues what is unacked
                if not failure.done():
                    failure.set_exception(exc)
                return
            if left is not None:
                left -= 1
                if left == 0 and not done.done():
                    done.set_result(None)

        return forward

    def _target(self, delivery: spec.Basic.Deliver) -> tuple[str, str]:
        """RabbitMQ's publish fields: dest-queue via the default exchange, else
        dest-exchange / dest-exchange-key where given, else the message's own."""
        spec_ = self.spec
        if spec_.dest_queue is not None:
            return "", spec_.dest_queue
        exchange = spec_.dest_exchange if spec_.dest_exchange is not None else delivery.exchange
        key = (
            spec_.dest_exchange_key if spec_.dest_exchange_key is not None else delivery.routing_key
        )
        return exchange or "", key or ""

    def _properties(self, properties: spec.Basic.Properties) -> spec.Basic.Properties:
        spec_ = self.spec
        for key, value in (spec_.publish_properties or {}).items():
            if key == "timestamp":
                value = datetime.datetime.fromtimestamp(value, datetime.UTC)
            setattr(properties, _PROPERTY_NAMES.get(key, key), value)
        if not (spec_.add_forward_headers or spec_.add_timestamp_header):
            return properties
        headers = dict(properties.headers or {})
        if spec_.add_forward_headers:
            table: dict[str, Any] = {
                "shovelled-by": self.node,
                "shovel-type": "dynamic",
                "shovel-name": spec_.name,
                "shovel-vhost": spec_.vhost,
                "src-uri": redact_uri(self.src_uri),
                "dest-uri": redact_uri(self.dest_uri),
            }
            table.update({key.replace("_", "-"): value for key, value in self.details().items()})
            previous = headers.get("x-shovelled")
            headers["x-shovelled"] = [table, *(previous if isinstance(previous, list) else [])]
        if spec_.add_timestamp_header:
            headers["x-shovelled-timestamp"] = int(time.time())
        properties.headers = headers
        return properties


async def _ensure_queue(
    connection: aiormq.abc.AbstractConnection, queue: str, arguments: Any
) -> int:
    """RabbitMQ's ensure_queue: a passive declare, and a durable declare if the queue is
    missing (the 404 closed the first channel). Returns the queue's message count."""
    channel = await connection.channel(publisher_confirms=False)
    try:
        declared = await channel.queue_declare(queue, passive=True)
    except aiormq.exceptions.ChannelNotFoundEntity:
        channel = await connection.channel(publisher_confirms=False)
        args: Arguments = dict(arguments) if arguments else None
        declared = await channel.queue_declare(queue, durable=True, arguments=args)
    count = declared.message_count or 0
    with suppress(Exception):
        await channel.close()
    return count
