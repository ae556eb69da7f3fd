"""The sending side of the forwarding links between workers (issue 26 stage 2,
docs/multicore.md "Stage 2: what is left", step 3): publishes this worker routed to queues
that other workers own go out as records, and the owners' answers come back as confirms.

Theory of operation. A `Forwarder` holds one `_Outbox` per other worker and the worker's
`ShardConfirms` (confirms/shards.py), shared by every link because one publish may have
copies on several workers (and one here). The engine's side calls `Forwarder.copies`
(amqpd/model/outbound.py `Forwarding`, compiled) once per publish routed to other workers'
queues: each owner's record is appended to that worker's `OutboundRecords` (with a VHOST
record first when the vhost changes) under the link's next publish id, and the join learns
which key waits for it. `flush` (once per chunk read
from clients, from the server's ``after_core``) wakes the writers, so a chunk of publishes
costs one write per peer, not one per message.

Each `_Outbox.run` keeps its link up: it connects to the peer's ``wK.forward`` socket
(amqpd/shell/workers/forward_links.py), retrying while the peer is not listening (starting,
or being restarted by the supervisor); a reader task turns SETTLED records into decisions
(`ShardConfirms.settled`), handed to ``on_decided``. When the link breaks (the peer died,
or sent garbage), everything that waited on it is refused at once (`ShardConfirms.lost`:
nacks, as RabbitMQ nacks what a crashed queue had not confirmed), the buffer is dropped
(those publishes are among the refused), and the next connection starts again at publish
id 1, since ids are per connection (the peer's `InboundLink` is too). A publish forwarded
while the link is down is refused at the next attempt to write it, never kept silently.

A spread vhost's topology changes (amqpd/model/replica.py) travel the same links as
TOPOLOGY records (`append_change`), in order with the publishes. Each time a link comes up,
``on_connected`` gives the shell the chance to write this worker's snapshot first; every
SETTLED answer (and a lost link, as None) is reported to ``on_settled``, which releases the
topology replies held for it (amqpd/shell/workers/spread.py). Consuming across workers uses
the same links: requests go out as CONTROL records (`append_control`), the owner's
deliveries and events come back as DELIVER and CONTROL records, handed to ``on_served``
once per chunk (amqpd/engine/remote_consumers.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from pathlib import Path

import anyio
import anyio.abc

from amqpd.model.outbound import Forwarding, OutboundRecords
from amqpd.wire.forwarding import Control, Delivery, ForwardingError, RecordReader, Settled
from confirms.shards import ShardConfirms

log = logging.getLogger(__name__)

READ_SIZE = 65536
RETRY_S = 0.1  # between attempts to reach a peer that is not listening (yet)

Decided = Callable[[list[tuple[Hashable, bool]]], None]
# peer, through (None: the link was lost), the refused ids up to it
SettledThrough = Callable[[int, int | None, list[int]], None]
Served = Callable[[int, list[Delivery | Control]], None]  # peer, a chunk's consuming records


def _ignore_settled(peer: int, through: int | None, refused: list[int]) -> None:
    return None


def _ignore_connected(outbox: _Outbox) -> None:
    return None


def _ignore_served(peer: int, records: list[Delivery | Control]) -> None:
    return None


class _Outbox:
    """This worker's end of the link to worker ``peer``."""

    def __init__(
        self,
        peer: int,
        path: Path,
        joins: ShardConfirms,
        on_decided: Decided,
        on_settled: SettledThrough = _ignore_settled,
        on_connected: Callable[[_Outbox], None] = _ignore_connected,
        on_served: Served = _ignore_served,
    ) -> None:
        self.peer = peer
        self._path = path
        self._joins = joins
        self._on_decided = on_decided
        self._on_settled = on_settled
        self._on_connected = on_connected
        self._on_served = on_served
        self.records = OutboundRecords(peer)  # what is not written yet (compiled)
        self._wake = anyio.Event()
        self.connected = False

    @property
    def buffer(self) -> bytearray:
        """The records not written yet."""
        return self.records.buffer

    @property
    def last_change_id(self) -> int:
        """The id of the last TOPOLOGY record on this connection."""
        return self.records.last_change_id

    def append_change(self, vhost: str, payload: bytes) -> int:
        """A TOPOLOGY record of ``vhost``; its publish id (settled once applied)."""
        return self.records.append_change(vhost, payload)

    def append_control(self, payload: bytes) -> None:
        """A CONTROL record: a request of consuming across workers (no publish id)."""
        self.records.append_control(payload)

    def wake(self) -> None:
        if self.buffer:
            self._wake.set()

    async def run(self) -> None:
        """Keep the link up until cancelled."""
        while True:
            try:
                stream = await anyio.connect_unix(self._path)
            except OSError:
                if self.buffer:
                    self._lost()  # nothing may wait for a link that is not there
                await anyio.sleep(RETRY_S)
                continue
            if self.buffer:
                self._lost()  # appended while the link was down: refused, never sent late
            self.connected = True
            self._on_connected(self)
            try:
                async with stream, anyio.create_task_group() as group:
                    group.start_soon(self._read, stream, group.cancel_scope)
                    await self._write(stream)
            except* (ForwardingError, anyio.BrokenResourceError, OSError) as exc:
                log.warning("forwarding link to worker %d lost: %s", self.peer, exc.exceptions[0])
            finally:
                self.connected = False
                self._lost()

    async def _write(self, stream: anyio.abc.SocketStream) -> None:
        while True:
            if not self.buffer:
                await self._wake.wait()
                self._wake = anyio.Event()
                continue
            buffer = self.records.buffer
            data = bytes(buffer)
            buffer.clear()
            await stream.send(data)

    async def _read(self, stream: anyio.abc.SocketStream, scope: anyio.CancelScope) -> None:
        reader = RecordReader()
        try:
            while True:
                reader.feed(await stream.receive(READ_SIZE))
                served: list[Delivery | Control] = []
                while (record := reader.next_record()) is not None:
                    if isinstance(record, Delivery | Control):
                        served.append(record)
                        continue
                    if not isinstance(record, Settled):
                        raise ForwardingError("a FORWARD record sent back by the owner")
                    if served:  # in the order they came
                        self._on_served(self.peer, served)
                        served = []
                    decided = self._joins.settled(self.peer, record.through, record.refused)
                    if decided:
                        self._on_decided(decided)
                    self._on_settled(self.peer, record.through, record.refused)
                if served:
                    self._on_served(self.peer, served)
        except (anyio.EndOfStream, anyio.BrokenResourceError, ForwardingError) as exc:
            log.warning("forwarding link to worker %d lost: %s", self.peer, exc or "closed")
            scope.cancel()

    def _lost(self) -> None:
        self.records.reset()
        decided = self._joins.lost(self.peer)
        if decided:
            self._on_decided(decided)
        self._on_settled(self.peer, None, [])


class Forwarder:
    """Every link from this worker to the others, and the confirms that wait on them."""

    def __init__(
        self,
        peers: dict[int, Path],
        on_decided: Decided,
        on_settled: SettledThrough = _ignore_settled,
        on_connected: Callable[[_Outbox], None] = _ignore_connected,
        on_served: Served = _ignore_served,
    ) -> None:
        self.joins = ShardConfirms()
        self.outboxes = {
            peer: _Outbox(peer, path, self.joins, on_decided, on_settled, on_connected, on_served)
            for peer, path in peers.items()
        }
        # the copies of publishes, written to the outboxes' records (compiled)
        self.copies = Forwarding(
            {peer: outbox.records for peer, outbox in self.outboxes.items()}, self.joins
        )

    def connected(self, peer: int) -> bool:
        """Whether the link to ``peer`` is up now."""
        return self.outboxes[peer].connected

    def flush(self) -> None:
        """Send what was forwarded since the last flush (once per chunk of input)."""
        for outbox in self.outboxes.values():
            outbox.wake()

    async def run(self) -> None:
        """Keep every link up until cancelled."""
        async with anyio.create_task_group() as group:
            for outbox in self.outboxes.values():
                group.start_soon(outbox.run)
