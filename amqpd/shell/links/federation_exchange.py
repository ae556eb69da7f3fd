"""One federated exchange's link to one upstream: aiormq clients on the broker's loop.

Theory of operation
-------------------
`ExchangeLink.run` loops through the states its `FederationLinkStatus` shows (RabbitMQ's
names)::

    starting --declared, bound, consuming--> running --failure--> error
        ^                                                           |
        +------- after reconnect-delay (doubling, capped) ---------+

* **starting**: connect to the upstream (the URIs in turn, one per attempt) and to this
  broker (the local endpoint, in the downstream exchange's vhost). On the upstream:
  declare the upstream exchange if it is missing (a passive declare first, then one like
  the downstream exchange's), the durable upstream queue (``x-expires`` /
  ``x-message-ttl`` from the upstream's ``expires`` / ``message-ttl``), the helper
  exchange (``x-federation-upstream`` with ``x-max-hops``, ``x-downstream-name`` and
  ``x-downstream-vhost``; declared over a connection of its own, since a broker that
  does not know the type closes the connection, and then a fanout instead), bind the
  queue to it, bind the upstream exchange to it once per distinct binding of the
  downstream exchange (model/federation_exchange.py computes names, arguments, hops),
  delete the helper of the previous start, set ``basic.qos(prefetch-count)`` and consume.
* **running**: each delivery is published into the downstream exchange with its routing
  key and an ``x-received-from`` entry prepended, in delivery order; ``on-confirm`` acks
  the upstream once this broker confirmed the publish (after storing a persistent
  message in a durable queue), ``on-publish`` once written, ``no-ack`` consumes without
  acks. A delivery that already made ``max-hops`` hops or came from this cluster is
  acked and dropped. When the downstream exchange's bindings change (the supervisor calls
  `bindings_changed`), the upstream bindings follow on the command channel.
* **error**: any failure closes both connections (the upstream requeues every unacked
  delivery: duplicates are possible, losses are not) and shows the reason until the next
  attempt.

A link stopped because its configuration went away (`stop` with ``cleanup``) deletes the
upstream queue and helper exchange, unless ``resource-cleanup-mode`` is ``never``; a
broker shutdown keeps them, so messages wait upstream (bounded by expires / message-ttl).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, Final, cast
from urllib.parse import quote

import aiormq
import aiormq.abc
from pamqp import commands as spec

from amqpd.model.federation import redact_uri
from amqpd.model.federation_exchange import (
    SUFFIXES,
    helper_exchange,
    queue_name,
    received_from,
    should_forward,
    upstream_bindings,
    with_received_from,
)
from amqpd.shell.links.backoff import Backoff
from amqpd.shell.links.client import (
    CLOSE_TIMEOUT,
    Acker,
    LinkFailed,
    LongLong,
    close_connection,
    closed_reason,
    closing,
    error_text,
    reason_of,
)
from amqpd.shell.links.federation_status import FederationLinkStatus
from amqpd.shell.links.link_specs import ExchangeLinkSpec, LocalEndpoint

__all__ = ["ExchangeLink"]

log = logging.getLogger(__name__)

MIN_DELAY: Final = 0.1  # reconnect-delay 0 retries, but not in a busy loop
PURPOSE: Final = {"x-internal-purpose": "federation"}

Bindings = Callable[[], list[tuple[str, dict[str, Any]]]]


@dataclass(slots=True)
class _Session:
    """One connected run's upstream facts."""

    commands: aiormq.abc.AbstractChannel
    upstream_exchange: str
    upstream_cluster: str | None
    upstream_vhost: str
    suffix: str
    helper: str
    bound: dict[tuple[str, Any], tuple[str, dict[str, Any]]] = field(default_factory=dict)


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


class ExchangeLink:
    """Runs one (downstream exchange, upstream) link until cancelled."""

    def __init__(self, spec_: ExchangeLinkSpec, local: LocalEndpoint, bindings: Bindings):
        self.spec = spec_
        self.local = local
        self._bindings = bindings  # the downstream exchange's (key, arguments) now
        upstream = spec_.upstream
        self.status = FederationLinkStatus(
            "exchange",
            spec_.vhost,
            spec_.exchange,
            upstream.name,
            upstream.upstream_exchange(spec_.exchange),
        )
        self.stopped = False
        self.cleanup = False
        self._attempt = 0
        self._changed = asyncio.Event()
        self._queue: str | None = None  # upstream resources, for the cleanup
        self._helper: str | None = None

    def bindings_changed(self) -> None:
        """The downstream exchange's bindings may have changed: follow them upstream."""
        self._changed.set()

    def stop(self, task: asyncio.Task[None], cleanup: bool) -> None:
        """Stop the link (cancel its task); ``cleanup``: its configuration went away, so
        the upstream queue and helper exchange go too (unless resource-cleanup-mode is
        never)."""
        self.stopped = True
        self.cleanup = cleanup and self.spec.upstream.resource_cleanup_mode != "never"
        task.cancel()

    # -- the supervisor loop ------------------------------------------------------------
    async def run(self) -> None:
        """Connect, federate, reconnect after failures, until cancelled."""
        try:
            await self._loop()
        except asyncio.CancelledError:
            if self.cleanup and self._queue is not None:  # stopped between two runs
                await self._cleanup_later()
            raise

    async def _loop(self) -> None:
        backoff = Backoff(self.spec.upstream.reconnect_delay)
        while not self.stopped:
            backoff.started()
            try:
                await self._run_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                reason = error_text(exc)
                self.status.set("error", reason)
                log.warning(
                    "federation link %s (upstream '%s') failed: %s",
                    self._what(),
                    self.spec.upstream.name,
                    reason,
                )
            if self.stopped:
                return
            await asyncio.sleep(max(backoff.next_delay(), MIN_DELAY))

    def _what(self) -> str:
        return f"for exchange '{self.spec.exchange}' in vhost '{self.spec.vhost}'"

    async def _run_once(self) -> None:
        upstream_spec = self.spec.upstream
        if not upstream_spec.uris:
            raise LinkFailed("no URI to connect to")
        uri = upstream_spec.uris[self._attempt % len(upstream_spec.uris)]
        self._attempt += 1
        self.status.set("starting", uri=uri)
        name = f"Federation link (upstream: {upstream_spec.name}, policy: {self.spec.policy})"
        properties: dict[str, Any] = {"connection_name": name}
        local_uri = self.local.resolve("amqp:///" + quote(self.spec.vhost, safe=""))
        downstream = await aiormq.connect(local_uri, client_properties=properties)
        try:
            upstream = await aiormq.connect(self.local.resolve(uri), client_properties=properties)
            try:
                await self._federate(upstream, downstream, uri, name)
            finally:
                if self.stopped and self.cleanup:
                    await self._delete_upstream(upstream)
                await close_connection(upstream)
        finally:
            await close_connection(downstream)

    async def _federate(
        self,
        upstream: aiormq.abc.AbstractConnection,
        downstream: aiormq.abc.AbstractConnection,
        uri: str,
        name: str,
    ) -> None:
        up = self.spec.upstream
        confirms = up.ack_mode == "on-confirm"
        # aiormq.Channel: its basic_publish takes ``wait`` (the abstract class omits it)
        out = cast(aiormq.Channel, await downstream.channel(publisher_confirms=confirms))
        inbound = await upstream.channel(publisher_confirms=False)
        commands = inbound
        if up.channel_use_mode != "single":
            commands = await upstream.channel(publisher_confirms=False)
        session = await self._declare(upstream, inbound, commands, uri)
        self._changed.clear()
        await self._sync_bindings(session)
        old = helper_exchange(self._queue or "", _other(session.suffix))
        await _disposable(upstream, lambda ch: ch.exchange_delete(old))
        failure: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        acker = Acker(inbound)
        forward = self._forwarder(out, inbound, acker, failure, redact_uri(uri), session)
        if up.ack_mode != "no-ack" and up.prefetch_count:
            await inbound.basic_qos(prefetch_count=min(up.prefetch_count, 65535))
        await inbound.basic_consume(self._queue or "", forward, no_ack=up.ack_mode == "no-ack")
        self.status.local_connection = name
        self.status.set("running")
        log.info("federation link %s (upstream '%s') running", self._what(), up.name)
        follower = asyncio.ensure_future(self._follow(session, failure))
        watched = [
            failure,
            follower,
            closing(upstream),
            closing(downstream),
            closing(out),
            closing(inbound),
            closing(commands),
        ]
        try:
            await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for observer in watched[1:]:
                observer.cancel()
        if failure.done() and failure.exception() is not None:
            raise LinkFailed(reason_of(failure.exception()))
        raise LinkFailed(closed_reason(upstream, downstream, out, inbound, commands))

    async def _declare(
        self,
        upstream: aiormq.abc.AbstractConnection,
        inbound: aiormq.abc.AbstractChannel,
        commands: aiormq.abc.AbstractChannel,
        uri: str,
    ) -> _Session:
        """The upstream exchange, queue and helper exchange, the queue bound to it."""
        spec_, up = self.spec, self.spec.upstream
        upstream_exchange = up.upstream_exchange(spec_.exchange)
        await self._ensure_upstream_exchange(upstream, inbound, upstream_exchange)
        upstream_vhost = str(getattr(upstream, "vhost", "/"))
        properties = getattr(upstream, "server_properties", None) or {}
        queue = queue_name(
            upstream_exchange, upstream_vhost, spec_.cluster, spec_.vhost, spec_.exchange
        )
        arguments: dict[str, Any] = {}
        if up.expires is not None:
            arguments["x-expires"] = up.expires
        if up.message_ttl is not None:
            arguments["x-message-ttl"] = up.message_ttl
        arguments.update(PURPOSE)
        if up.queue_type != "classic":
            arguments["x-queue-type"] = up.queue_type
        await inbound.queue_declare(queue, durable=True, arguments=arguments)
        self._queue = queue
        # The helper's name alternates: the one that exists now is the previous start's.
        previous = "B" if await _exchange_exists(upstream, helper_exchange(queue, "B")) else "A"
        suffix = _other(previous)
        helper = helper_exchange(queue, suffix)
        await self._declare_helper(upstream, inbound, uri, helper)
        self._helper = helper
        await inbound.queue_bind(queue, helper, routing_key="")
        return _Session(
            commands,
            upstream_exchange,
            _text(properties.get("cluster_name")),
            upstream_vhost,
            suffix,
            helper,
        )

    async def _ensure_upstream_exchange(
        self,
        upstream: aiormq.abc.AbstractConnection,
        inbound: aiormq.abc.AbstractChannel,
        name: str,
    ) -> None:
        if await _exchange_exists(upstream, name):
            return
        spec_ = self.spec
        await inbound.exchange_declare(
            name,
            exchange_type=spec_.type_name,
            durable=spec_.durable,
            auto_delete=spec_.auto_delete,
            internal=spec_.internal,
            arguments=dict(spec_.arguments) or None,
        )

    async def _declare_helper(
        self,
        upstream: aiormq.abc.AbstractConnection,
        inbound: aiormq.abc.AbstractChannel,
        uri: str,
        helper: str,
    ) -> None:
        """Delete then declare the helper exchange; a fanout where the upstream does not
        know the x-federation-upstream type (as RabbitMQ's link does)."""
        await _disposable(upstream, lambda ch: ch.exchange_delete(helper))
        arguments: dict[str, Any] = {
            "x-max-hops": LongLong(self.spec.upstream.max_hops),
            "x-downstream-name": self.spec.cluster,
            "x-downstream-vhost": self.spec.vhost,
            **PURPOSE,
        }
        connection = await aiormq.connect(self.local.resolve(uri))
        try:
            channel = await connection.channel(publisher_confirms=False)
            await channel.exchange_declare(
                helper,
                exchange_type="x-federation-upstream",
                durable=True,
                internal=True,
                auto_delete=True,
                arguments=arguments,
            )
        except aiormq.exceptions.ConnectionCommandInvalid:
            await inbound.exchange_declare(
                helper,
                exchange_type="fanout",
                durable=True,
                internal=True,
                auto_delete=True,
                arguments=dict(PURPOSE),
            )
        finally:
            await close_connection(connection)

    # -- bindings ---------------------------------------------------------------------------
    async def _sync_bindings(self, session: _Session) -> None:
        """Make the upstream exchange's bindings to the helper match the downstream's."""
        spec_, up = self.spec, self.spec.upstream
        wanted = upstream_bindings(
            self._bindings(),
            up.max_hops,
            session.upstream_cluster,
            session.upstream_vhost,
            spec_.cluster,
            spec_.vhost,
            spec_.exchange,
            session.suffix,
        )
        channel = session.commands
        for identity in [i for i in session.bound if i not in wanted]:
            key, arguments = session.bound.pop(identity)
            await _binding(channel, False, session, key, arguments, up.bind_nowait)
        for identity, (key, arguments) in wanted.items():
            if identity not in session.bound:
                await _binding(channel, True, session, key, arguments, up.bind_nowait)
                session.bound[identity] = (key, arguments)

    async def _follow(self, session: _Session, failure: asyncio.Future[None]) -> None:
        """Follow binding changes until the run ends; a failure fails the run."""
        try:
            while True:
                await self._changed.wait()
                self._changed.clear()
                await self._sync_bindings(session)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not failure.done():
                failure.set_exception(exc)

    # -- messages -----------------------------------------------------------------------------
    def _forwarder(
        self,
        out: aiormq.Channel,
        inbound: aiormq.abc.AbstractChannel,
        acker: Acker,
        failure: asyncio.Future[None],
        shown_uri: str,
        session: _Session,
    ) -> Callable[[aiormq.abc.DeliveredMessage], Any]:
        spec_, up = self.spec, self.spec.upstream
        no_ack = up.ack_mode == "no-ack"
        confirms = up.ack_mode == "on-confirm"

        async def forward(message: aiormq.abc.DeliveredMessage) -> None:
            delivery = message.delivery
            assert isinstance(delivery, spec.Basic.Deliver)
            tag = delivery.delivery_tag or 0
            if not no_ack:
                acker.received(tag)
            properties = message.header.properties
            try:
                if not should_forward(properties.headers, up.max_hops, spec_.cluster, spec_.vhost):
                    if not no_ack:
                        await acker.settled(tag)  # dropped: it went far enough
                    return
                entry = received_from(
                    shown_uri,
                    session.upstream_exchange,
                    bool(delivery.redelivered),
                    session.upstream_cluster,
                    session.upstream_vhost,
                )
                properties.headers = with_received_from(properties.headers, entry)
                if not up.trust_user_id:
                    properties.user_id = None
                confirmation = await out.basic_publish(
                    message.body,
                    exchange=spec_.exchange,
                    routing_key=delivery.routing_key or "",
                    properties=properties,
                    wait=not confirms,  # on-confirm waits for the confirm, not the write
                )
                nacked = isinstance(confirmation, spec.Basic.Nack)
                if nacked:
                    await inbound.basic_nack(tag, multiple=False, requeue=True)
                if not no_ack:
                    await acker.settled(tag, nacked)
            except Exception as exc:  # the run fails; the upstream requeues the unacked
                if not failure.done():
                    failure.set_exception(exc)

        return forward

    # -- cleanup ------------------------------------------------------------------------------
    async def _delete_upstream(self, upstream: aiormq.abc.AbstractConnection) -> None:
        """Delete the upstream queue and helper exchange (the link's configuration went)."""
        queue, helper = self._queue, self._helper
        with suppress(Exception):
            async with asyncio.timeout(CLOSE_TIMEOUT):
                if queue is not None:
                    await _disposable(upstream, lambda ch: ch.queue_delete(queue))
                if helper is not None:
                    await _disposable(upstream, lambda ch: ch.exchange_delete(helper))
                self._queue = self._helper = None
                log.info("federation link %s: deleted its upstream queue %r", self._what(), queue)

    async def _cleanup_later(self) -> None:
        """The link was stopped while not connected: connect once more to clean up."""
        uris = self.spec.upstream.uris
        if not uris:
            return
        with suppress(Exception):
            async with asyncio.timeout(CLOSE_TIMEOUT):
                upstream = await aiormq.connect(self.local.resolve(uris[0]))
                try:
                    await self._delete_upstream(upstream)
                finally:
                    await close_connection(upstream)


async def _binding(
    channel: aiormq.abc.AbstractChannel,
    bind: bool,
    session: _Session,
    key: str,
    arguments: dict[str, Any],
    nowait: bool,
) -> None:
    """exchange.bind / exchange.unbind of the upstream exchange to the helper (``nowait``:
    the upstream's bind-nowait, as RabbitMQ's link sends it)."""
    method = channel.exchange_bind if bind else channel.exchange_unbind
    helper, source = session.helper, session.upstream_exchange
    if nowait:
        await method(helper, source, key, nowait=True, arguments=arguments)
    else:
        await method(helper, source, key, arguments=arguments)


def _other(suffix: str) -> str:
    return SUFFIXES[1] if suffix == SUFFIXES[0] else SUFFIXES[0]


async def _disposable(
    connection: aiormq.abc.AbstractConnection,
    call: Callable[[aiormq.abc.AbstractChannel], Any],
) -> bool:
    """Run one command on a channel of its own (an error closes only that channel); True
    if it succeeded."""
    channel = await connection.channel(publisher_confirms=False)
    try:
        await call(channel)
    except aiormq.exceptions.ChannelClosed:
        return False
    with suppress(Exception):
        await channel.close()
    return True


async def _exchange_exists(connection: aiormq.abc.AbstractConnection, name: str) -> bool:
    return await _disposable(connection, lambda ch: ch.exchange_declare(name, passive=True))
