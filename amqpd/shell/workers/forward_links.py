"""The owner's side of the forwarding links between workers (issue 26 stage 2,
docs/multicore.md "Build plan" step 3): worker K takes publishes other workers routed to
queues it holds, and answers each link once they are settled.

Theory of operation. Every worker listens on ``wK.forward`` in the node's runtime directory
(amqpd/shell/workers/role.py), a Unix stream socket. A peer connects once and writes
records (amqpd/wire/forwarding.py): VHOST and FORWARD records in, SETTLED records back on
the same socket. Per connection, `_serve_link` reads a chunk, hands every FORWARD record to
its `InboundLink` (amqpd/model/forwarded.py: enqueued under a local publish's rules), then
calls the server's ``after_core`` (the group committer is woken, consumers' writers too),
exactly as after a chunk from a client, and wakes the link's answer writer when the
peer waits for an answer (a promised publish, a topology change). The server's
``after_core`` also calls `ForwardInbox.wake` after every committed batch, since that is
what settles persistent messages. Each link's writer sends at most one SETTLED record per
wake-up, so the answers cost one write per chunk or batch, not per message.

A CONTROL record is a request of the peer's consumers of this worker's queues (consuming
across workers, amqpd/engine/served_consumers.py: one `ServedConsumers` per link); their
deliveries and events go back on the same socket, after the SETTLED answers, and when the
link ends its consumers go and what they had not settled is requeued.

A TOPOLOGY record (a spread vhost's change, amqpd/model/replica.py) is applied at once and
settled with the records around it. A record for a vhost this worker does not have (deleted
meanwhile) finds no queue, so it is settled and confirmed, as RabbitMQ confirms a publish
whose queues were deleted. A corrupt stream, a SETTLED record sent to the owner, or
publish ids that do not ascend close that link only (logged); the peer treats the link as
lost and nacks what waited on it (confirms/shards.py).
"""

from __future__ import annotations

import logging
import pickle
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

import anyio
import anyio.abc

from amqpd.engine.flood_watch import CHECK_EVERY, FloodWatch
from amqpd.engine.served_consumers import ServedConsumers
from amqpd.model.broker import Broker
from amqpd.model.forwarded import InboundLink
from amqpd.model.queue import Queue
from amqpd.model.replica_apply import SNAPSHOT_END, apply_change
from amqpd.model.vhost import VirtualHost
from amqpd.wire.forwarding import (
    Control,
    ForwardingError,
    RecordReader,
    TopologyChange,
)

log = logging.getLogger(__name__)

READ_SIZE = 262144


class _Link:
    """One peer's connection: its `InboundLink`, the consumers it holds on this worker's
    queues, and the event that wakes its writer."""

    __slots__ = ("flooding", "floods", "inbound", "served", "wake")

    def __init__(self) -> None:
        self.inbound = InboundLink()
        self.served = ServedConsumers(self._wake)
        self.floods = FloodWatch()  # which of this worker's queues the peer must spare
        self.flooding = anyio.Event()  # set when the peer was told of a new one
        self.wake = anyio.Event()

    def _wake(self) -> None:
        self.wake.set()


class ForwardInbox:
    """Worker K's end of every other worker's forwarding link."""

    def __init__(
        self,
        broker: Broker,
        after_core: Callable[[], None],
        on_snapshot: Callable[[int], None] | None = None,
    ) -> None:
        self._broker = broker
        self.on_snapshot = on_snapshot  # a spread vhost's snapshot from that worker applied
        self._after_core = after_core
        self._links: set[_Link] = set()
        self._flow: set[Queue] = set()  # flow control pauses clients, not another worker
        self._gone = VirtualHost("")  # stands in for a vhost deleted meanwhile: no queues

    def wake(self) -> None:
        """Something may have settled (a chunk enqueued, a batch committed): every link
        that owes an answer looks for one to send."""
        for link in self._links:
            if link.inbound.answer_due:
                link.wake.set()

    async def serve(
        self, path: Path, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Take links on ``path`` until cancelled; ``started`` once it listens."""
        with suppress(FileNotFoundError):
            path.unlink()  # a previous run of this worker, killed
        listener = await anyio.create_unix_listener(path)
        try:
            task_status.started()
            await listener.serve(self._serve_link)
        finally:
            await listener.aclose()
            with suppress(OSError):
                path.unlink()

    async def _serve_link(self, stream: anyio.abc.SocketStream) -> None:
        link = _Link()
        self._links.add(link)
        try:
            async with stream, anyio.create_task_group() as group:
                group.start_soon(self._answer, link, stream)
                group.start_soon(self._watch_floods, link)
                await self._read(link, stream)
                group.cancel_scope.cancel()
        except* (ForwardingError, ValueError, anyio.BrokenResourceError) as exc:
            # ValueError: InboundLink.accept refused a publish id that does not ascend
            log.warning("forwarding link closed: %s", exc.exceptions[0])
        finally:
            self._links.discard(link)
            link.served.lost()  # its consumers go, their deliveries are requeued
            self._after_core()

    async def _read(self, link: _Link, stream: anyio.abc.SocketStream) -> None:
        reader = RecordReader()
        broker = self._broker
        while True:
            try:
                chunk = await stream.receive(READ_SIZE)
            except anyio.EndOfStream:
                return
            reader.feed(chunk)
            inbound = link.inbound
            while (
                record := inbound.accept_run(
                    reader,
                    broker.vhosts,
                    self._gone,
                    broker.journal,
                    broker.batch_waits,
                    self._flow,
                    broker.reply_queues,
                )
            ) is not None:
                if isinstance(record, TopologyChange):
                    inbound.accept_change(record.publish_id)
                    if self._apply(reader.vhost, record.payload):
                        inbound.refuse_change(record.publish_id)
                elif isinstance(record, Control):
                    self._serve(link, record.payload)
                else:
                    raise ForwardingError("a SETTLED or DELIVER record sent to the owner")
            floods = link.floods
            if self._flow and floods.note(self._flow):
                link.flooding.set()
                link.wake.set()
            self._flow.clear()
            if floods.reported and floods.check():
                link.wake.set()
            self._after_core()
            if link.inbound.answer_due:
                link.wake.set()

    async def _watch_floods(self, link: _Link) -> None:
        """While the peer is told some queues here are flooding, look every CHECK_EVERY s
        whether they caught up: a paused publisher sends nothing that would show it."""
        floods, clock = link.floods, self._broker.clock
        while True:
            await link.flooding.wait()
            link.flooding = anyio.Event()
            while floods.reported:
                await anyio.sleep(CHECK_EVERY)
                clock.now = max(clock.now, time.time())
                if floods.check():
                    link.wake.set()

    def _apply(self, name: str, payload: bytes) -> bool:
        """Make another worker's change to the spread vhost ``name`` here; whether it is
        refused (model/replica_apply.py)."""
        try:
            change = pickle.loads(payload)
            if change[0] == SNAPSHOT_END:  # that worker's snapshots are all here (spread.py)
                if self.on_snapshot is not None:
                    self.on_snapshot(change[1])
                return False
            vhost = self._broker.vhosts.get(name)
            if vhost is not None:  # else deleted meanwhile
                return apply_change(vhost, change)
        except Exception:  # a bug, not the peer's fault: the link and the others go on
            log.exception("cannot apply a topology change of vhost %r", name)
        return False

    def _serve(self, link: _Link, payload: bytes) -> None:
        """A request of the peer's consumers of this worker's queues."""
        try:
            request = pickle.loads(payload)
            link.served.handle(self._broker.vhosts, request)
        except Exception:  # a bug, not the peer's fault: the link and the others go on
            log.exception("cannot serve a consuming request of another worker")

    async def _answer(self, link: _Link, stream: anyio.abc.SocketStream) -> None:
        while True:
            await link.wake.wait()
            link.wake = anyio.Event()
            out = bytearray()
            link.inbound.take_answer(out)
            link.served.take(out)
            link.floods.take(out)
            if out:
                await stream.send(bytes(out))
