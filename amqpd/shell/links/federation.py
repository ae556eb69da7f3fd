"""Starts, stops and restarts the federated exchanges' links as the configuration and the
topology change.

Part of the I/O shell. The model stores the ``federation-upstream(-set)`` parameters and
the policies, and counts topology changes (`Broker.topology`); the server calls
`ExchangeFederation.reconcile` after every definitions change and whenever that counter
moved after a step of the core. Reconciling computes, for every exchange whose policy
names upstreams (model/federation.py `resolve`), one `ExchangeLinkSpec` per upstream: a
new one starts a link (an asyncio task running `ExchangeLink.run`), a changed one
restarts it, one that went away stops it and deletes its upstream queue (the exchange,
its policy or its upstream is gone). Every running link is then told that bindings may
have changed; it compares the downstream exchange's bindings with what it bound upstream.
Links never start twice for one key, and a link's failure stays in its task.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from amqpd.model.broker import Broker
from amqpd.model.exchange import FEDERATION_UPSTREAM, Exchange
from amqpd.model.federation import UPSTREAM, resolve
from amqpd.shell.links.federation_status import FederationLinkStatus
from amqpd.shell.links.link_specs import ExchangeLinkSpec, LocalEndpoint
from amqpd.shell.links.runs_here import runs_here

if TYPE_CHECKING:  # imported by the first link (link_specs.py: aiormq only when used)
    from amqpd.shell.links.federation_exchange import ExchangeLink

__all__ = ["ExchangeFederation"]

log = logging.getLogger(__name__)

Key = tuple[str, str, str]  # (vhost, exchange, upstream)


def _federated(exchange: Exchange) -> bool:
    return not (
        exchange.is_default
        or exchange.name.startswith("amq.")
        or exchange.type_name == FEDERATION_UPSTREAM
        or exchange.policy is None
    )


class ExchangeFederation:
    """The federated exchanges' links of one broker (a `FederationStatusSource`)."""

    def __init__(self, broker: Broker, local: LocalEndpoint) -> None:
        self._broker = broker
        self._local = local
        self._links: dict[Key, tuple[ExchangeLink, asyncio.Task[None]]] = {}
        self._stopping: set[asyncio.Task[None]] = set()
        self._previous: dict[Key, asyncio.Task[None]] = {}  # a stopping link, per key
        self._seen = -1  # the topology version last reconciled
        self._closed = False

    def topology_changed(self) -> bool:
        """Whether the broker's topology moved since the last reconcile (cheap: the
        server asks after every step of the core)."""
        return self._broker.topology.value != self._seen

    def reconcile(self) -> None:
        """Make the running links match the policies, upstreams and exchanges."""
        if self._closed:
            return
        self._seen = self._broker.topology.value
        wanted = self._wanted()
        for key, (link, _task) in list(self._links.items()):
            spec_ = wanted.get(key)
            if spec_ != link.spec:
                gone = spec_ is None or _queue_arguments_changed(link.spec, spec_)
                self._stop(key, cleanup=gone)
        for key, spec_ in wanted.items():
            if key not in self._links:
                self._start(key, spec_)
            else:
                self._links[key][0].bindings_changed()

    def _wanted(self) -> dict[Key, ExchangeLinkSpec]:
        broker = self._broker
        parameters = broker.access.state.parameters
        cluster = broker.cluster_name
        wanted: dict[Key, ExchangeLinkSpec] = {}
        if not any(component == UPSTREAM for component, _vhost, _name in parameters):
            return wanted  # no upstream anywhere: nothing to look at
        for vhost in broker.vhosts.values():
            for exchange in vhost.exchanges.values():
                if not _federated(exchange) or not runs_here(broker, vhost.name, exchange.name):
                    continue
                policy = exchange.policy
                assert policy is not None
                for upstream in resolve(parameters, vhost.name, policy.definition):
                    wanted[(vhost.name, exchange.name, upstream.name)] = ExchangeLinkSpec(
                        upstream=upstream,
                        vhost=vhost.name,
                        exchange=exchange.name,
                        type_name=exchange.type_name,
                        durable=exchange.durable,
                        auto_delete=exchange.auto_delete,
                        internal=exchange.internal,
                        policy=policy.name,
                        cluster=cluster,
                        arguments=dict(exchange.arguments),
                    )
        return wanted

    def _bindings_of(self, vhost: str, exchange: str) -> list[tuple[str, dict[str, Any]]]:
        """The downstream exchange's bindings now: (key, arguments) of each."""
        found = self._broker.vhosts.get(vhost)
        target = None if found is None else found.exchanges.get(exchange)
        if target is None:
            return []
        return [(key, dict(arguments)) for _dest, key, arguments in target.router.bindings()]

    def _start(self, key: Key, spec_: ExchangeLinkSpec) -> None:
        from amqpd.shell.links.federation_exchange import ExchangeLink

        link = ExchangeLink(spec_, self._local, lambda: self._bindings_of(key[0], key[1]))
        task = asyncio.get_running_loop().create_task(self._run(key, link))
        self._links[key] = (link, task)
        log.info(
            "federation link for exchange '%s' in vhost '%s' (upstream '%s') started",
            key[1],
            key[0],
            key[2],
        )

    async def _run(self, key: Key, link: ExchangeLink) -> None:
        previous = self._previous.get(key)
        try:
            if previous is not None:  # let the link it replaces clean up first
                await asyncio.wait([previous])
            await link.run()
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug in a link must not take the broker down
            log.exception("federation link %s stopped by an error", key)

    def _stop(self, key: Key, cleanup: bool) -> None:
        link, task = self._links.pop(key)
        link.stop(task, cleanup)
        self._stopping.add(task)
        self._previous[key] = task

        def done(finished: asyncio.Task[None]) -> None:
            self._stopping.discard(finished)
            if self._previous.get(key) is finished:
                del self._previous[key]

        task.add_done_callback(done)
        log.info(
            "federation link for exchange '%s' in vhost '%s' (upstream '%s') stopped",
            key[1],
            key[0],
            key[2],
        )

    def federation_status(self) -> list[FederationLinkStatus]:
        """Every link's status, sorted by vhost, exchange and upstream."""
        return [link.status for _key, (link, _task) in sorted(self._links.items())]

    async def aclose(self) -> None:
        """Stop every link (keeping the upstream queues) and wait for their connections."""
        self._closed = True
        for key in list(self._links):
            self._stop(key, cleanup=False)
        for task in list(self._stopping):
            with suppress(asyncio.CancelledError, Exception):
                await task


def _queue_arguments_changed(old: ExchangeLinkSpec, new: ExchangeLinkSpec) -> bool:
    """A restarted link could not redeclare its upstream queue with other arguments."""
    a, b = old.upstream, new.upstream
    return (a.expires, a.message_ttl, a.queue_type) != (b.expires, b.message_ttl, b.queue_type)
