"""What this worker writes to the other workers of its spread vhosts (issue 26 stage 2,
docs/multicore.md "Stage 2"): each link's records not sent yet, and the copies of the
publishes routed to other workers' queues. The receiving side is amqpd/model/forwarded.py;
the shell (amqpd/shell/workers/forward_outbox.py) owns the sockets, writes each link's
`OutboundRecords.buffer` once per flush and calls `OutboundRecords.reset` when a link is
lost. Compiled: a crossing publish costs one `Forwarding.forward`, with no interpreted
frame below the shell's one call (session 20: writing a FORWARD record went from 1.4 to
0.8 µs; docs/multicore.md).

Theory of operation
-------------------
Publish ids are per link *connection*: the peer's `InboundLink` expects them ascending from
1, so `reset` starts again at 1 when the shell reconnects. A FORWARD, TOPOLOGY or CONTROL
record names no vhost: a VHOST record goes before the first record of a vhost other than
the previous one's.

`Forwarding.forward` works out once per routing result where its copies go (the *plan*:
per owning worker, how many of its queues and their names as a FORWARD record carries them)
and keeps PLANS_KEPT plans; `forget_plans` drops them at each topology change of this
worker (a queue another worker deleted or moved gets a new stub here, so a kept plan never
names a stale one). A publish whose publisher waits (``key`` is not None) is joined in the
`ShardConfirms`: with one copy on one other worker and nothing here it is that copy's
*sole* wait (no count kept), else it expects one answer per copy plus the local one.

Topology changes go first: the shell sets ``changes_pending`` when this worker changed a
spread vhost, and `forward` calls ``write_changes`` (the shell's) before the copy, so a
peer applies a declare or bind before the publishes routed with it. The engine calls
`forward` itself (the shell's `ReplicaPort.forward` is this bound method): no interpreted
frame per crossing publish.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from amqpd.model.message import Message
from amqpd.model.queue import Queue
from amqpd.model.replica import remote_by_worker
from amqpd.wire.forwarding import (
    NO_EXPIRY,
    NO_PRIORITY,
    PERSISTENT,
    PROMISED,
    encode_control,
    encode_forward,
    encode_topology,
    encode_vhost,
    queue_names,
)
from confirms.shards import ShardConfirms

PLANS_KEPT: Final = 256  # routing results whose plan is kept (then all are forgotten)

# Where a routing result's copies go: (owner worker, how many of its queues, their names as
# a FORWARD record carries them), per owner.
Plan = list[tuple[int, int, bytes]]


class OutboundRecords:
    """The records for worker ``peer`` not written yet, and the ids of the link's
    connection."""

    __slots__ = ("_vhost", "buffer", "last_change_id", "next_id", "peer")

    def __init__(self, peer: int) -> None:
        self.peer = peer
        self.buffer = bytearray()
        self.next_id = 1
        self.last_change_id = 0  # the id of the last TOPOLOGY record on this connection
        self._vhost: str | None = None

    def append_forward(
        self,
        vhost: str,
        message: Message,
        expiration_ms: int | None,
        promised: bool,
        count: int,
        names: bytes,
    ) -> int:
        """A FORWARD record of ``message`` for ``count`` queues (``names``: `queue_names`);
        its publish id."""
        if vhost != self._vhost:
            self._use_vhost(vhost)
        publish_id = self.next_id
        self.next_id = publish_id + 1
        priority = message.priority
        encode_forward(
            self.buffer,
            publish_id,
            (PERSISTENT if message.persistent else 0) | (PROMISED if promised else 0),
            NO_PRIORITY if priority is None else priority,
            NO_EXPIRY if expiration_ms is None else expiration_ms,
            count,
            names,
            message.exchange_raw,
            message.routing_key_raw,
            message.expiration,
            message.headers_raw,
            message.header,
            message.payload,
        )
        return publish_id

    def append_change(self, vhost: str, payload: bytes) -> int:
        """A TOPOLOGY record of ``vhost``; its publish id (settled once applied)."""
        if vhost != self._vhost:
            self._use_vhost(vhost)
        publish_id = self.next_id
        self.next_id = publish_id + 1
        encode_topology(self.buffer, publish_id, payload)
        self.last_change_id = publish_id
        return publish_id

    def append_control(self, payload: bytes) -> None:
        """A CONTROL record: a request of consuming across workers (no publish id)."""
        encode_control(self.buffer, payload)

    def reset(self) -> None:
        """The link's connection is gone: nothing unsent goes, ids start again at 1."""
        self.buffer.clear()
        self.next_id = 1
        self.last_change_id = 0
        self._vhost = None

    def _use_vhost(self, vhost: str) -> None:
        encode_vhost(self.buffer, vhost)
        self._vhost = vhost


class Forwarding:
    """The copies of this worker's publishes for other workers' queues."""

    __slots__ = (
        "_last_plan",
        "_last_targets",
        "_plans",
        "changes_pending",
        "joins",
        "links",
        "write_changes",
    )

    def __init__(self, links: dict[int, OutboundRecords], joins: ShardConfirms) -> None:
        self.links = links
        self.joins = joins
        self._plans: dict[tuple[Queue, ...], Plan] = {}
        # the last routing result and its plan: a stream of publishes routed alike (a
        # fanout, one routing key) compares a few references instead of hashing a tuple
        self._last_targets: list[Queue] = []
        self._last_plan: Plan = []
        self.changes_pending = False  # the shell has topology changes to write first
        self.write_changes: Callable[[], None] = _nothing

    def forward(
        self,
        vhost: str,
        message: Message,
        expiration_ms: int | None,
        promised: bool,
        targets: list[Queue],
        key: object,
        local: bool,
    ) -> None:
        """One copy of ``message`` (routed to ``targets`` in ``vhost``) for each worker
        owning some of them; ``key`` (None: nobody waits) is joined in `joins`, with a part
        of its own when ``local`` (a copy here waits for its storage batch)."""
        if self.changes_pending:
            self.write_changes()
        plan = self._plan(targets)
        sole = key is None or (len(plan) == 1 and not local)
        if not sole:
            self.joins.expect(key, len(plan) + (1 if local else 0))
        links = self.links
        for peer, count, names in plan:
            publish_id = links[peer].append_forward(
                vhost, message, expiration_ms, promised, count, names
            )
            if key is not None:  # else nobody waits: the owner does not answer it on its own
                self.joins.forwarded(peer, publish_id, key, sole)

    def forget_plans(self) -> None:
        """This worker's topology changed: work every plan out again."""
        self._plans.clear()
        self._last_targets = []
        self._last_plan = []

    def _plan(self, targets: list[Queue]) -> Plan:
        if targets == self._last_targets and targets:  # Queue compares by identity
            return self._last_plan
        plan = self._planned(targets)
        self._last_targets = list(targets)  # a copy: the caller's list may change
        self._last_plan = plan
        return plan

    def _planned(self, targets: list[Queue]) -> Plan:
        key = tuple(targets)
        plan = self._plans.get(key)
        if plan is None:
            if len(self._plans) >= PLANS_KEPT:
                self._plans.clear()
            plan = [
                (peer, len(names), queue_names(names))
                for peer, names in remote_by_worker(targets).items()
            ]
            self._plans[key] = plan
        return plan


def _nothing() -> None:
    """No topology changes to write (the shell sets `Forwarding.write_changes`)."""
