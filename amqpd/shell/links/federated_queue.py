"""One upstream of one federated queue: an AMQP client pair (aiormq) on the broker's loop.

Theory of operation
-------------------
RabbitMQ's `rabbit_federation_queue_link`. The link moves messages from the upstream
queue (same name unless the upstream's ``queue`` says otherwise) into the local queue, and
only while the local queue *wants* them (amqpd/model/federated_queues.py: nothing ready
and a consumer of priority >= 0 with credit). Its state, as ``/api/federation-links``
shows it::

    starting --connected, declared--> running --error / link cut / basic.cancel--> error
        ^                                                                          |
        +----------------- after the reconnect delay (doubling, capped) ----------+

* **starting**: connect to this broker (the local endpoint, the downstream vhost; confirms
  on for ``on-confirm``), connect to the upstream (a URI without a vhost means the
  downstream's vhost), refuse an upstream without the ``consumer_priorities`` capability
  (RabbitMQ's ``upstream_lacks_consumer_priorities``), declare the upstream queue with the
  local queue's durable / auto-delete / arguments, and set ``basic.qos(prefetch-count)``.
* **running**: a follower task makes the consumer match the demand: ``basic.consume``
  (consumer tag per ``consumer-tag``, default ``federation-link-<upstream>``,
  ``x-priority: -1`` so the upstream's own consumers win) when the queue starts wanting
  messages, ``basic.cancel`` when it stops; flips that come faster than the round trips
  collapse into the latest state. Each delivery is published to the local queue through
  the default exchange with RabbitMQ's ``x-received-from`` entry (upstream URI without
  credentials, the queue, redelivered, visit-count: a message that comes back to a queue
  it visited gets its count raised rather than a new entry), ``x-original-exchange`` /
  ``x-original-routing-key`` on its first move, ``CC`` renamed ``x-original-cc`` (so the
  copy is not routed elsewhere) and ``user_id`` removed unless ``trust-user-id``.
  ``on-confirm``: acked upstream only once this broker confirmed the publish (`Acker`:
  one ``basic.ack(multiple)`` per run of settled deliveries), nacked with requeue if it
  refused it; ``on-publish``: acked once written; ``no-ack``: consumed with no-ack.
* **error**: any failure (either connection, a channel error, a refused declaration, a
  ``basic.cancel`` from the upstream) closes both connections, so the upstream requeues
  whatever was not acked: duplicates are possible, losses are not. After the reconnect
  delay (``reconnect-delay``, doubled after quick failures, `Backoff`) it starts again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Final, cast
from urllib.parse import quote, urlsplit

import aiormq
import aiormq.abc
from pamqp import commands as spec
from pamqp.common import FieldTable

from amqpd.model.federation import Upstream, redact_uri
from amqpd.shell.links.backoff import Backoff
from amqpd.shell.links.client import (
    Acker,
    LinkFailed,
    close_connection,
    closed_reason,
    closing,
    error_text,
    reason_of,
)
from amqpd.shell.links.federation_status import FederationLinkStatus
from amqpd.shell.links.link_specs import Demand, LocalEndpoint, LocalQueue

__all__ = ["QueueLink", "received_from_headers", "with_default_vhost"]

log = logging.getLogger(__name__)

ROUTING_HEADER: Final = "x-received-from"
LINK_PRIORITY: Final = -1  # upstream consumers of priority >= 0 go first (RabbitMQ)
_VISIT_KEYS: Final = ("uri", "virtual_host", "queue")  # what identifies an earlier visit


def with_default_vhost(uri: str, vhost: str) -> str:
    """RabbitMQ's federation URIs: one without a path means the downstream's vhost."""
    parts = urlsplit(uri)
    if parts.path:
        return uri
    query = f"?{parts.query}" if parts.query else ""
    return f"{parts.scheme}://{parts.netloc}/{quote(vhost, safe='')}{query}"


def received_from_headers(
    headers: dict[str, Any] | None,
    table: dict[str, Any],
    redelivered: bool,
    exchange: str,
    routing_key: str,
) -> dict[str, Any]:
    """The headers of a message moved by a queue link (rabbit_federation_queue_link:
    update_headers): an ``x-received-from`` entry prepended (``table`` plus redelivered and
    visit-count; an earlier entry for the same uri / vhost / queue is replaced and its
    count raised), the original exchange and routing key on the first move, and ``CC``
    renamed ``x-original-cc``."""
    out = dict(headers or {})
    been = out.get(ROUTING_HEADER)
    count = 0
    kept: list[Any] = []
    if isinstance(been, list):
        for item in been:
            if isinstance(item, dict) and all(item.get(k) == table.get(k) for k in _VISIT_KEYS):
                visits = item.get("visit-count")
                if isinstance(visits, int) and not isinstance(visits, bool):
                    count = visits
            else:
                kept.append(item)
    else:  # never moved (or a header a client set: ignored, as RabbitMQ does)
        out["x-original-exchange"] = exchange
        out["x-original-routing-key"] = routing_key
    if "CC" in out:
        out["x-original-cc"] = out.pop("CC")
    entry = {**table, "redelivered": redelivered, "visit-count": count + 1}
    out[ROUTING_HEADER] = [entry, *kept]
    return out


class QueueLink:
    """Runs one upstream of one federated queue until cancelled."""

    def __init__(
        self,
        queue: LocalQueue,
        upstream: Upstream,
        demand: Demand,
        local: LocalEndpoint,
    ) -> None:
        self.queue = queue
        self.upstream = upstream
        self.demand = demand
        self.local = local
        self.upstream_queue = upstream.upstream_queue(queue.name)
        self.status = FederationLinkStatus(
            "queue", queue.vhost, queue.name, upstream.name, self.upstream_queue
        )
        self.consumer_tag = upstream.consumer_tag or f"federation-link-{upstream.name}"
        policy = queue.policy or ""
        self.connection_name = (
            f"Federation link (upstream: {upstream.name}, policy: {policy})"
            if queue.policy
            else "Federation link"
        )
        self._attempt = 0
        self.stopped = False

    def stop(self, task: asyncio.Task[None]) -> None:
        """Stop the link: cancel its task (which closes its connections)."""
        self.stopped = True
        task.cancel()

    def _describe(self) -> str:
        return (
            f"queue '{self.queue.name}' in vhost '{self.queue.vhost}' "
            f"(upstream '{self.upstream.name}')"
        )

    # -- the supervisor loop ----------------------------------------------------------------
    async def run(self) -> None:
        """Connect, follow the demand, reconnect after failures. Cancel it to stop."""
        backoff = Backoff(self.upstream.reconnect_delay)
        while not self.stopped:
            backoff.started()
            try:
                await self._run_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                reason = error_text(exc)
                self.status.set("error", reason)
                log.warning("federation link for %s failed: %s", self._describe(), reason)
            if self.stopped:
                return
            await asyncio.sleep(max(backoff.next_delay(), 0.1))

    def _pick_uri(self) -> str:
        uris = self.upstream.uris
        self._attempt += 1
        return uris[(self._attempt - 1) % len(uris)]

    async def _run_once(self) -> None:
        if not self.upstream.uris:
            raise LinkFailed("the upstream has no uri")
        configured = self._pick_uri()  # shown as configured (status, x-received-from)
        self.status.set("starting", uri=configured)
        uri = with_default_vhost(configured, self.queue.vhost)
        properties: FieldTable = {"connection_name": self.connection_name}
        local_uri = with_default_vhost("amqp://", self.queue.vhost)
        local = await aiormq.connect(self.local.resolve(local_uri), client_properties=properties)
        try:
            remote = await aiormq.connect(self.local.resolve(uri), client_properties=properties)
            try:
                await self._federate(local, remote, redact_uri(configured))
            finally:
                await close_connection(remote)
        finally:
            await close_connection(local)

    async def _federate(
        self,
        local: aiormq.abc.AbstractConnection,
        remote: aiormq.abc.AbstractConnection,
        safe_uri: str,
    ) -> None:
        upstream = self.upstream
        capabilities = (remote.server_properties or {}).get("capabilities") or {}
        if not (isinstance(capabilities, dict) and capabilities.get("consumer_priorities")):
            raise LinkFailed("upstream_lacks_consumer_priorities")
        confirms = upstream.ack_mode == "on-confirm"
        # aiormq.Channel: its basic_publish takes ``wait`` (the abstract class omits it)
        out = cast(aiormq.Channel, await local.channel(publisher_confirms=confirms))
        inbound = await remote.channel(publisher_confirms=False)
        queue = self.queue
        await inbound.queue_declare(
            self.upstream_queue,
            durable=queue.durable,
            auto_delete=queue.auto_delete,
            arguments=dict(queue.arguments) or None,
        )
        if upstream.ack_mode != "no-ack" and upstream.prefetch_count:
            await inbound.basic_qos(prefetch_count=min(upstream.prefetch_count, 65535))
        failure: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def cancelled(_frame: Any) -> None:
            if not failure.done():
                failure.set_exception(LinkFailed("received a 'basic.cancel'"))

        inbound.on_consumer_cancel_callbacks.add(cancelled)
        acker = Acker(inbound)
        forward = self._forwarder(out, inbound, acker, failure, safe_uri)
        follower = asyncio.ensure_future(self._follow(inbound, forward))
        self.status.local_connection = self.connection_name
        self.status.set("running")
        log.info("federation link for %s running", self._describe())
        watched = [
            failure,
            follower,
            closing(local),
            closing(remote),
            closing(out),
            closing(inbound),
        ]
        try:
            await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for observer in watched[1:]:
                observer.cancel()
        if failure.done() and failure.exception() is not None:
            raise LinkFailed(reason_of(failure.exception()))
        if follower.done() and not follower.cancelled() and follower.exception() is not None:
            raise LinkFailed(reason_of(follower.exception()))
        raise LinkFailed(closed_reason(local, remote, out, inbound))

    async def _follow(
        self,
        inbound: aiormq.abc.AbstractChannel,
        forward: Callable[[aiormq.abc.DeliveredMessage], Any],
    ) -> None:
        """Consume while the queue wants messages, cancel when it stops (forever)."""
        demand = self.demand
        wake = demand.watch()
        consuming = False
        no_ack = self.upstream.ack_mode == "no-ack"
        try:
            while True:
                wake.clear()
                wants = demand.wants
                if wants and not consuming:
                    await inbound.basic_consume(
                        self.upstream_queue,
                        forward,
                        no_ack=no_ack,
                        consumer_tag=self.consumer_tag,
                        arguments={"x-priority": LINK_PRIORITY},
                    )
                    consuming = True
                    log.debug("federation link for %s consuming", self._describe())
                elif not wants and consuming:
                    await inbound.basic_cancel(self.consumer_tag)
                    consuming = False
                    log.debug("federation link for %s paused", self._describe())
                else:
                    await wake.wait()
        finally:
            demand.unwatch(wake)

    def _forwarder(
        self,
        out: aiormq.Channel,
        inbound: aiormq.abc.AbstractChannel,
        acker: Acker,
        failure: asyncio.Future[None],
        safe_uri: str,
    ) -> Callable[[aiormq.abc.DeliveredMessage], Any]:
        ack_mode = self.upstream.ack_mode
        confirms = ack_mode == "on-confirm"
        trust_user_id = self.upstream.trust_user_id
        table = {"uri": safe_uri, "queue": self.queue.name}
        target = self.queue.name

        async def forward(message: aiormq.abc.DeliveredMessage) -> None:
            delivery = message.delivery
            assert isinstance(delivery, spec.Basic.Deliver)
            tag = delivery.delivery_tag or 0
            if ack_mode != "no-ack":
                acker.received(tag)
            try:
                properties = message.header.properties
                properties.headers = received_from_headers(
                    properties.headers,
                    table,
                    bool(delivery.redelivered),
                    delivery.exchange or "",
                    delivery.routing_key or "",
                )
                if not trust_user_id:
                    properties.user_id = None
                confirmation = await out.basic_publish(
                    message.body,
                    exchange="",
                    routing_key=target,
                    properties=properties,
                    wait=not confirms,  # on-confirm waits for the confirm, not the write
                )
                nacked = isinstance(confirmation, spec.Basic.Nack)
                if nacked:  # this broker refused it (a full queue): back to the upstream
                    await inbound.basic_nack(tag, multiple=False, requeue=True)
                if ack_mode != "no-ack":
                    await acker.settled(tag, nacked)
            except Exception as exc:  # the run fails; the upstream requeues what is unacked
                if not failure.done():
                    failure.set_exception(exc)

        return forward
