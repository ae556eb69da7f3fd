"""A confirmed publish with copies on other workers (a spread vhost, amqpd/model/replica.py).

Theory of operation. The channel routes and enqueues as usual; when the queues include
other workers' (`RemoteQueue`), `forward_confirmed` tracks the confirm as waiting and hands
the copies to the vhost's `ReplicaPort` with a `RemoteConfirm`: the port joins the answers
of every worker holding a copy (an ack once all are settled, a nack at the first refusal)
and decides it. When the local copy waits for a storage batch too, the join also waits for
that part: the channel keeps the decision (``joined``) and, once the batch is reported,
`settle_joined` hands its verdict to the port instead of confirming at once.

A connection that may still move (engine/moving.py) and publishes, for the first time, to
queues that all live on one other worker moves there instead (`publish_destination`):
then none of its messages has to cross. The guess routes the routing key alone (a CC
header or a headers exchange may route elsewhere: the worker it moved to forwards those).
"""

from __future__ import annotations

from typing import Any, Protocol

from amqpd.engine.reply_to import REPLY_TO_PREFIX
from amqpd.engine.transaction import BufferedPublish
from amqpd.model.batches import BatchWaiter
from amqpd.model.broker import Broker
from amqpd.model.exchange import Exchange
from amqpd.model.message import Message
from amqpd.model.queue import Queue
from amqpd.model.replica import Decision, RemoteQueue
from amqpd.model.vhost import VirtualHost
from amqpd.wire.codec import PublishArgs
from confirms.tracker import ConfirmTracker


class _Host(Protocol):
    @property
    def broker(self) -> Broker: ...
    def confirms_pending(self, channel: Any) -> None: ...


class JoiningChannel(BatchWaiter, Protocol):
    """What this module uses of a `Channel` (amqpd/engine/channel.py)."""

    vhost: VirtualHost
    confirm: ConfirmTracker | None

    @property
    def conn(self) -> _Host: ...
    def remote_decided(self, seq: int, ok: bool) -> None: ...


class RemoteConfirm:
    """A confirm that waits for copies on other workers (model/replica.py `Decision`)."""

    __slots__ = ("channel", "seq")

    def __init__(self, channel: JoiningChannel, seq: int) -> None:
        self.channel = channel
        self.seq = seq

    def decided(self, ok: bool) -> None:
        self.channel.remote_decided(self.seq, ok)


def forward_confirmed(
    channel: JoiningChannel,
    publish: BufferedPublish,
    queues: list[Queue],
    seq: int,
    batch: int | None,
) -> Decision | None:
    """Confirm publish ``seq`` once every copy is settled (and ``batch``, the local copy's
    storage batch, if any, is written); the decision the channel keeps for that batch."""
    vhost = channel.vhost
    assert channel.confirm is not None and vhost.replica is not None
    channel.confirm.track(seq, waiting=True)
    decision = RemoteConfirm(channel, seq)
    if batch is not None:
        channel.conn.broker.batch_waits.confirm(batch, channel, seq)
    message = publish.message
    expiration_ms = publish.expiration_ms
    vhost.replica.forward(
        vhost.name, message, expiration_ms, True, queues, decision, batch is not None
    )
    channel.conn.confirms_pending(channel)
    return decision if batch is not None else None


def publish_destination(vhost: VirtualHost, exchange: Exchange, args: PublishArgs) -> int | None:
    """The other worker that owns every queue a publish to ``exchange`` with ``args``'s
    routing key goes to, if one does (None: some or all are here, or none routes)."""
    if exchange.delayed is not None or exchange.router.uses_headers:
        return None
    if exchange.is_default and args.routing_key.startswith(REPLY_TO_PREFIX):
        return None
    probe = Message(
        args.exchange, args.routing_key, args.exchange_raw, args.routing_key_raw, b"", b"", False
    )
    worker: int | None = None
    for queue in vhost.route(exchange, probe):
        if not isinstance(queue, RemoteQueue) or (worker is not None and queue.worker != worker):
            return None
        worker = queue.worker
    return worker


def settle_joined(
    vhost: VirtualHost, joined: dict[int, Decision], confirms: list[int], ok: bool
) -> list[int]:
    """A storage batch was written (``ok``) or failed: the local part of each joined
    confirm goes to its join; the other confirms are returned, to settle as usual."""
    replica = vhost.replica
    rest: list[int] = []
    for seq in confirms:
        decision = joined.pop(seq, None)
        if decision is None:
            rest.append(seq)
        elif replica is not None:
            replica.local_done(decision, ok)
    return rest
