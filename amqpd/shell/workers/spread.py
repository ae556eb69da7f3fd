"""A worker's side of its spread vhosts (issue 26 stage 2; amqpd/model/replica.py): topology
changes and publishes for other workers' queues go out on the forwarding links, and the
replies and confirms that wait for them come back.

Theory of operation. `SpreadLinks` is the `ReplicaPort` of every spread vhost of this
worker. It owns the worker's `Forwarder` (amqpd/shell/workers/forward_outbox.py: one link
to each other worker, written once per flush). A change (`changed`) is kept until the next
`flush`, `hold` or `forward`, then pickled once and appended to every link as a TOPOLOGY
record, so it is ordered with the publishes around it. `hold` puts a decision (a held
topology reply) at the end of a FIFO with, per link, the publish id of the last record
written so far; every SETTLED answer raises that link's "applied through" mark, and the
FIFO's head is released while every link it waits for is through (a link lost counts as
through: the worker at its other end gets everything again as a snapshot when it comes
back). Releasing in FIFO order keeps a channel's held replies in the order sent. A hold
whose own change a peer refused (the SETTLED answer names its id: a queue that worker
declared at the same moment, differently; amqpd/model/replica_apply.py) is decided not ok,
so its channel gets RabbitMQ's 406 instead of the -ok.

`forward` sends one copy of a publish to each worker owning some of its target queues
(amqpd/model/outbound.py `Forwarding`, compiled: the per-publish part); a
confirm waiting for them is joined by the forwarder's `ShardConfirms` (a nack as soon as
one copy is refused). Decisions reach their `Decision` (a channel's `RemoteConfirm`), then
the server's ``after_core`` flushes what they produced.

When a link comes up, this worker's `snapshot` of each spread vhost is written first, so a
peer that (re)started learns this worker's exchanges, queues and bindings before anything
else from it. A worker starting takes no connection before `ready`: every link of its own
is up and every other worker's snapshot has arrived (or READY_TIMEOUT passed: a worker
that is down sends it when it is back), so none of its connections routes without the
queues of the others.

The same links carry consuming across workers (amqpd/engine/remote_consumers.py): this
worker's requests to the owners go out with every flush, the owners' deliveries and events
reach `consuming` once per chunk, then ``after_core`` sends what they produced.
"""

from __future__ import annotations

import logging
import pickle
from collections import deque
from collections.abc import Callable, Hashable
from typing import cast

import anyio

from amqpd.engine.remote_consumers import RemoteConsumers
from amqpd.model.broker import Broker
from amqpd.model.replica import Change, Decision
from amqpd.model.replica_apply import SNAPSHOT_END, snapshot
from amqpd.shell.workers.forward_outbox import Forwarder, _Outbox
from amqpd.shell.workers.role import WorkerRole
from amqpd.wire.forwarding import Control, Delivery

log = logging.getLogger(__name__)

READY_TIMEOUT = 10.0  # seconds a starting worker waits for the others' links and snapshots


class _Hold:
    """A decision waiting for the links: per link, the id of the last record it waits for;
    ``own``: those are its own change's (written by its `hold`), so a refusal of that id is
    its refusal."""

    __slots__ = ("decision", "own", "refused", "waits")

    def __init__(self, waits: dict[int, int], decision: Decision, own: bool) -> None:
        self.waits = waits
        self.decision = decision
        self.own = own
        self.refused = False


class SpreadLinks:
    """The `ReplicaPort` of this worker's spread vhosts."""

    def __init__(
        self,
        role: WorkerRole,
        broker: Broker,
        spread: Callable[[str], bool],
        after_core: Callable[[], None],
    ) -> None:
        self.worker = role.index
        self.workers = role.count
        self.rejoining = role.rejoining  # until `ready` (amqpd/model/replica_apply.py)
        self._broker = broker
        self._spread = spread
        self._after_core = after_core
        peers = {k: role.forward_socket(k) for k in range(role.count) if k != role.index}
        self.forwarder = Forwarder(
            peers, self._decided, self._settled, self._connected, self._served
        )
        self.consuming = RemoteConsumers(self._request)
        self._changes: list[tuple[str, Change]] = []
        self._copies = self.forwarder.copies
        self._copies.write_changes = self._write_changes
        # the engine calls the compiled copier directly (amqpd/model/outbound.py)
        self.forward = self._copies.forward
        self._through = dict.fromkeys(peers, 0)  # per link: every id up to it applied
        self._holds: deque[_Hold] = deque()
        self._snapshots: set[int] = set()  # the workers whose snapshot arrived here
        self._progress = anyio.Event()  # set (and replaced) when a link or snapshot came

    async def ready(self) -> None:
        """Wait until every link is up and every other worker's snapshot arrived here (at
        most READY_TIMEOUT: see the module's docstring)."""
        peers = set(self.forwarder.outboxes)
        with anyio.move_on_after(READY_TIMEOUT) as scope:
            while not (
                self._snapshots >= peers
                and all(outbox.connected for outbox in self.forwarder.outboxes.values())
            ):
                await self._progress.wait()
                self._progress = anyio.Event()
        if scope.cancelled_caught:
            log.warning("worker %d starts without every other worker's topology", self.worker)
        self.rejoining = False  # what arrives from now on is merged, as at a node's start

    def snapshot_applied(self, worker: int) -> None:
        """Worker ``worker``'s snapshot was applied here (amqpd/shell/workers/
        forward_links.py)."""
        self._snapshots.add(worker)
        self._progress.set()

    # -- ReplicaPort -----------------------------------------------------------------------
    def changed(self, vhost: str, change: Change) -> None:
        self._changes.append((vhost, change))
        self._copies.changes_pending = True
        self._copies.forget_plans()

    def hold(self, decision: Decision) -> None:
        own = bool(self._changes)
        self._write_changes()
        waits = {  # the peer answers every TOPOLOGY record (forward_links.py)
            peer: outbox.last_change_id
            for peer, outbox in self.forwarder.outboxes.items()
            if outbox.last_change_id > self._through[peer]
        }
        self._holds.append(_Hold(waits, decision, own))
        self._release(wake=False)  # called by the engine: its caller flushes

    def local_done(self, decision: Decision, ok: bool) -> None:
        # called by the engine (a storage batch reported): its caller flushes
        decided = self.forwarder.joins.local_done(cast(Hashable, decision), ok)
        self._decided(decided, wake=False)

    # -- the shell's side --------------------------------------------------------------------
    def flush(self) -> None:
        """Write what was changed and forwarded since the last flush (once per chunk)."""
        self._write_changes()
        self.consuming.flush()
        self.forwarder.flush()

    def _request(self, worker: int, payload: bytes) -> None:
        """A request of this worker's consumers of ``worker``'s queues."""
        self._write_changes()  # a consume after the declare that made its queue
        self.forwarder.outboxes[worker].append_control(payload)

    def _served(self, peer: int, records: list[Delivery | Control]) -> None:
        """What worker ``peer`` sent this worker's consumers of its queues."""
        consuming = self.consuming
        for record in records:
            if isinstance(record, Delivery):
                consuming.delivered(peer, record)
                continue
            event = pickle.loads(record.payload)
            if event[0] == "flow":  # engine/flood_watch.py
                self._flooding(event[1], event[2], event[3])
            else:
                consuming.event(peer, event)
        self._after_core()

    def _flooding(self, vhost_name: str, queue_name: str, flooding: bool) -> None:
        """Its owner says another worker's queue is (or no longer is) far behind."""
        vhost = self._broker.vhosts.get(vhost_name)
        stub = None if vhost is None else vhost.remote.get(queue_name)
        if stub is not None:
            stub.flooding = flooding

    def _floods_lost(self, peer: int) -> None:
        """A lost link: nothing of ``peer``'s is flooding any more (its snapshot, when it
        comes back, makes new stubs)."""
        for vhost in self._broker.vhosts.values():
            for stub in vhost.remote.values():
                if stub.worker == peer:
                    stub.flooding = False

    def _write_changes(self) -> None:
        self._copies.changes_pending = False
        if not self._changes:
            return
        changes, self._changes = self._changes, []
        for vhost, change in changes:
            payload = pickle.dumps(change)
            for outbox in self.forwarder.outboxes.values():
                outbox.append_change(vhost, payload)

    def _connected(self, outbox: _Outbox) -> None:
        """A link came up: this worker's part of every spread vhost goes first."""
        for name, vhost in self._broker.vhosts.items():
            if self._spread(name):
                described = snapshot(vhost, self.worker, outbox.peer, self.rejoining)
                outbox.append_change(name, pickle.dumps(described))
        # the end of this worker's snapshots: the peer may take connections
        outbox.append_change("", pickle.dumps((SNAPSHOT_END, self.worker)))
        outbox.wake()
        self._progress.set()

    def _settled(self, peer: int, through: int | None, refused: list[int]) -> None:
        if through is None:  # the link was lost: nothing held waits for it (module doc)
            self.consuming.lost(peer)
            self._floods_lost(peer)
            self._through[peer] = 0  # the next connection starts again at id 1
            for hold in self._holds:
                hold.waits.pop(peer, None)
        else:
            self._through[peer] = through
            if refused:
                no = set(refused)
                for hold in self._holds:
                    if hold.own and hold.waits.get(peer) in no:
                        hold.refused = True
        self._release(wake=True)

    def _release(self, wake: bool) -> None:
        released = False
        holds = self._holds
        while holds:
            hold = holds[0]
            if any(self._through[peer] < last for peer, last in hold.waits.items()):
                break
            holds.popleft()
            hold.decision.decided(not hold.refused)
            released = True
        if released and wake:
            self._after_core()

    def _decided(self, decided: list[tuple[Hashable, bool]], wake: bool = True) -> None:
        woke = False
        for key, ok in decided:
            if key is not None:
                cast(Decision, key).decided(ok)
                woke = True
        if woke and wake:
            self._after_core()
