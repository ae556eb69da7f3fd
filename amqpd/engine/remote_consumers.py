"""The consuming worker's side of consuming across workers (issue 26 stage 2,
docs/multicore.md): this worker's consumers and basic.gets on queues other workers own.

Theory of operation
-------------------
A connection of a spread vhost that cannot move (it published, consumes, or moved twice)
and consumes from another worker's queue gets a `Consumer` on that queue's stub
(amqpd/model/replica.py) in its channel, as any consumer; `RemoteConsumers` (the stubs'
`ConsumingPort`, one per worker) gives it a consumer id and asks the owner to serve it
(amqpd/engine/served_consumers.py). The consume-ok is sent when the owner accepted (a
refusal, 403 for an exclusive consumer, closes the channel as it would on one worker).

The owner's deliveries arrive as DELIVER records (`delivered`): each becomes a
`QueueEntry` on the stub, marked ``stored`` when the owner waits for its settlement and
numbered with the owner's tag, and is handed to the channel's ``deliver`` like a local one,
so delivery tags, qos counts, statistics, transactions and recover are the channel's own.
Settling it calls the stub's methods, which come back here as requests to the owner
(`settle`, `cancel`); requests are kept per owner, consecutive settlements of one kind
merged, and sent by `flush` once per chunk (the shell's ``after_core``).

Credit: for each delivery handed to a client this worker owes the owner one credit
(amqpd/engine/served_consumers.py WINDOW), returned with the next flush, or, while the
client's connection does not read (``output_full``), when its channel may deliver again
(the stub's ``dispatch``, `resume`).

A delivery for a consumer that is gone (cancelled while it crossed) is requeued on the
owner. A lost owner (`lost`: the link broke) cancels its consumers as RabbitMQ cancels the
consumers of a queue whose node went down (basic.cancel to clients that take it); the
deliveries it had sent are forgotten here (settling them later sends nothing: the owner
requeued them, or restarts with them from its store), a basic.get waiting for it is
answered get-empty, a count it was asked for 0, and a browser waiting for it gets no
copies (consume-ok, then basic.cancel).

Global qos: the owner counts a channel's limit per consumer (it knows of no other), so a
channel consuming on several workers may get more than its limit allows unacked. As
RabbitMQ's limiter blocks a queue's consumer when the channel is full and unblocks it when
an ack frees room (rabbit_limiter), a delivery that finds no room here goes back *unsent*
(`RemoteQueue.requeue`: at its place in the owner's queue, its redelivered flag and
delivery count as they were, so the owner's other consumers can have it), which blocks the
consumer there (served_consumers.py). Per consumer here: BLOCKED (every delivery arriving
goes back unsent: those the owner sent before it blocked) --room again (`resume`): an
"unblock" request--> UNBLOCKING (still sent back) --the owner's "unblocked" event, sent
once every delivery it had sent came back or was credited, so none is out of order-->
gone (deliveries handed out). A stream's deliveries (a log: taking one deprives nobody)
are kept here instead, per consumer, in order, not counted as handed out (no credit back
for them), and handed out as acks free room; cancelling the consumer drops them.

`browse` is an ``x-browse`` consumer: the owner answers with copies of the ready messages
its selector matches, sent as deliveries between the consume-ok and a server-side
basic.cancel, as engine/consuming.py does for a queue of this worker.

`ask` is a request answered by two counts: a queue's message and consumer counts for a
queue.declare, what a queue.purge or queue.delete removed (engine/topology.py), the
reply held until the owner answered, or refused (404, 406) as the owner would.
"""

from __future__ import annotations

import pickle
from collections import deque
from collections.abc import Callable
from typing import Any, cast

from pamqp import commands as spec

from amqpd.engine.channel import Channel, ChannelState
from amqpd.model.message import Message, QueueEntry
from amqpd.model.queue import Consumer, ConsumerSink
from amqpd.model.replica import RemoteQueue
from amqpd.wire import codec
from amqpd.wire.errors import AMQPError
from amqpd.wire.forwarding import ACK_REQUIRED, REDELIVERED, Delivery

__all__ = ["RemoteConsumers"]

Send = Callable[[int, bytes], None]  # owner worker, a pickled request
Answer = Callable[[int, int], None]
Refuse = Callable[[int, str], None]


def _entry(
    tag: int,
    flags: int,
    delivery_count: int,
    exchange_raw: bytes,
    routing_key_raw: bytes,
    header: bytes,
    body: bytes,
) -> QueueEntry:
    """The stub's entry for a message the owner handed out under ``tag``."""
    message = Message(
        exchange_raw[1:].decode(),
        routing_key_raw[1:].decode(),
        exchange_raw,
        routing_key_raw,
        header,
        body,
        False,
        None,
        None,
        None,
    )
    entry = QueueEntry(message, tag)
    entry.redelivered = bool(flags & REDELIVERED)
    entry.stored = bool(flags & ACK_REQUIRED)
    entry.delivery_count = delivery_count
    return entry


class RemoteConsumers:
    """The `ConsumingPort` of this worker's stubs."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._next_id = 1
        self._consumers: dict[int, tuple[Consumer, Channel, bool]] = {}  # id: .., nowait
        self._ids: dict[Consumer, int] = {}
        self._gets: dict[int, tuple[Channel, RemoteQueue]] = {}
        self._browses: dict[int, tuple[Channel, RemoteQueue, str, bool]] = {}  # .., tag, nowait
        self._asks: dict[int, tuple[int, Answer, Refuse]] = {}  # request id: worker, ..
        self._owed: dict[int, int] = {}  # consumer id -> credit not yet given back
        self._requests: dict[int, list[list[Any]]] = {}  # per owner, in order
        self._live: dict[int, set[QueueEntry]] = {}  # per owner: deliveries it waits for
        # per consumer id: a stream's deliveries held here while the global qos is full
        self._held: dict[int, deque[QueueEntry]] = {}
        # per consumer id blocked on its owner: whether "unblock" was sent (module doc)
        self._blocked: dict[int, bool] = {}

    def __len__(self) -> int:
        return len(self._consumers)

    # -- ConsumingPort (the engine's side) -------------------------------------------------
    def consume(self, channel: ConsumerSink, consumer: Consumer, nowait: bool) -> None:
        stub = cast(RemoteQueue, consumer.queue)
        consumer_id = self._next_id
        self._next_id = consumer_id + 1
        self._consumers[consumer_id] = (consumer, cast(Channel, channel), nowait)
        self._ids[consumer] = consumer_id
        vhost = stub.vhost_name
        request = ["consume", vhost, stub.name, consumer_id, consumer.tag, consumer.no_ack]
        request += [consumer.exclusive, consumer.prefetch, consumer.arguments]
        self._request(stub.worker, request)

    def get(self, channel: ConsumerSink, stub: RemoteQueue, no_ack: bool) -> None:
        request_id = self._next_id
        self._next_id = request_id + 1
        self._gets[request_id] = (cast(Channel, channel), stub)
        self._request(stub.worker, ["get", request_id, stub.vhost_name, stub.name, no_ack])

    def browse(
        self,
        channel: ConsumerSink,
        stub: RemoteQueue,
        tag: str,
        arguments: dict[str, Any],
        nowait: bool,
    ) -> None:
        request_id = self._next_id
        self._next_id = request_id + 1
        self._browses[request_id] = (cast(Channel, channel), stub, tag, nowait)
        request = ["browse", request_id, stub.vhost_name, stub.name, arguments]
        self._request(stub.worker, request)

    def ask(
        self,
        stub: RemoteQueue,
        request: tuple[Any, ...],
        answer: Callable[[int, int], None],
        refuse: Callable[[int, str], None],
    ) -> None:
        request_id = self._next_id
        self._next_id = request_id + 1
        self._asks[request_id] = (stub.worker, answer, refuse)
        self._request(stub.worker, ["ask", request_id, stub.vhost_name, stub.name, *request])

    def settle(self, worker: int, kind: str, entries: list[QueueEntry]) -> None:
        live = self._live.get(worker)
        tags = []
        for entry in entries:
            tags.append(entry.seq)
            if live is not None:
                live.discard(entry)
        requests = self._requests.setdefault(worker, [])
        if requests and requests[-1][0] == kind:
            requests[-1][1] += tags
        else:
            requests.append([kind, tags])

    def cancel(self, consumer: Consumer) -> None:
        consumer_id = self._ids.pop(consumer, None)
        if consumer_id is None:
            return
        del self._consumers[consumer_id]
        self._owed.pop(consumer_id, None)
        self._blocked.pop(consumer_id, None)
        stub = cast(RemoteQueue, consumer.queue)
        held = self._held.pop(consumer_id, None)
        if held:  # never handed out: back to the owner's queue
            stub.requeue(held)
        self._request(stub.worker, ["cancel", consumer_id])

    def resume(self, stub: RemoteQueue) -> None:
        for consumer_id in list(self._held):
            self._hand_held(consumer_id)
        for consumer_id, unblocking in list(self._blocked.items()):
            consumer, channel, _nowait = self._consumers[consumer_id]
            if not unblocking and channel.unacked.has_credit(consumer):
                self._blocked[consumer_id] = True
                self._request(cast(RemoteQueue, consumer.queue).worker, ["unblock", consumer_id])
        for consumer_id in list(self._owed):
            consumer, channel, _nowait = self._consumers[consumer_id]
            if consumer.queue is stub and not channel.conn.output_full:
                self._give_back(consumer_id, stub.worker)

    def _hand_held(self, consumer_id: int) -> None:
        """Hand out what was held for ``consumer_id`` while its channel has credit."""
        consumer, channel, _nowait = self._consumers[consumer_id]
        held = self._held[consumer_id]
        while held and channel.unacked.has_credit(consumer):
            self._hand(consumer_id, consumer, channel, held.popleft())
        if not held:
            del self._held[consumer_id]

    def _request(self, worker: int, request: list[Any]) -> None:
        self._live.setdefault(worker, set())
        self._requests.setdefault(worker, []).append(request)

    def _give_back(self, consumer_id: int, worker: int) -> None:
        count = self._owed.pop(consumer_id)
        self._request(worker, ["credit", consumer_id, count])

    # -- the shell's side --------------------------------------------------------------------
    def flush(self) -> None:
        """Send every request kept since the last flush (once per chunk)."""
        if self._owed:
            for consumer_id in list(self._owed):
                consumer, channel, _nowait = self._consumers[consumer_id]
                if not channel.conn.output_full:
                    self._give_back(consumer_id, cast(RemoteQueue, consumer.queue).worker)
        if not self._requests:
            return
        requests, self._requests = self._requests, {}
        for worker, kept in requests.items():
            for request in kept:
                self._send(worker, pickle.dumps(tuple(request)))

    def delivered(self, worker: int, record: Delivery) -> None:
        """A DELIVER record from ``worker``."""
        entry = _entry(
            record.tag,
            record.flags,
            record.delivery_count,
            record.exchange_raw,
            record.routing_key_raw,
            record.header,
            record.body,
        )
        found = self._consumers.get(record.consumer_id)
        if found is None:  # cancelled while it crossed
            if entry.stored:
                self.settle(worker, "requeue", [entry])
            return
        consumer, channel, _nowait = found
        if entry.stored:
            self._live.setdefault(worker, set()).add(entry)
        consumer_id = record.consumer_id
        stub = cast(RemoteQueue, consumer.queue)
        if (
            entry.stored
            and stub.settings.queue_type != "stream"
            and (consumer_id in self._blocked or not channel.unacked.has_credit(consumer))
        ):
            # the channel's global qos is full (its other consumers hold it): back to the
            # owner, which blocks the consumer until room frees (see the module's docstring)
            self._blocked.setdefault(consumer_id, False)
            stub.requeue([entry], unsent=True)
            return
        held = self._held.get(consumer_id)
        if held is not None or not (consumer.no_ack or channel.unacked.has_credit(consumer)):
            # a stream's: kept here until an ack frees room, not counted as handed out
            if held is None:
                held = self._held[consumer_id] = deque()
            held.append(entry)
            return
        self._hand(consumer_id, consumer, channel, entry)

    def _hand(
        self, consumer_id: int, consumer: Consumer, channel: Channel, entry: QueueEntry
    ) -> None:
        channel.deliver(consumer, consumer.queue, entry)
        self._owed[consumer_id] = self._owed.get(consumer_id, 0) + 1

    def event(self, worker: int, event: tuple[Any, ...]) -> None:
        """A CONTROL record from ``worker``, unpickled: an answer or event
        (served_consumers.py)."""
        kind = event[0]
        if kind == "consume-ok":
            found = self._consumers.get(event[1])
            if found is not None and not found[2] and found[1].state is ChannelState.OPEN:
                consumer, channel, _nowait = found
                channel.send_method(codec.build(spec.Basic.ConsumeOk, consumer_tag=consumer.tag))
        elif kind == "refused":
            found = self._consumers.pop(event[1], None)
            if found is not None:
                consumer, channel, _nowait = found
                self._ids.pop(consumer, None)
                channel.consumers.pop(consumer.tag, None)
                if channel.state is ChannelState.OPEN:
                    channel.fail_later(AMQPError(event[2], event[3], 60, 20))
        elif kind == "cancelled":
            self._cancelled(event[1])
        elif kind == "unblocked":
            self._blocked.pop(event[1], None)
        elif kind == "answer":
            asked = self._asks.pop(event[1], None)
            if asked is not None:
                asked[1](event[2], event[3])
        elif kind == "ask-refused":
            asked = self._asks.pop(event[1], None)
            if asked is not None:
                asked[2](event[2], event[3])
        elif kind in ("browse-ok", "browse-refused"):
            self._answer_browse(kind, event)
        else:
            self._answer_get(worker, kind, event)

    def _cancelled(self, consumer_id: int) -> None:
        found = self._consumers.pop(consumer_id, None)
        if found is None:
            return
        consumer, channel, _nowait = found
        self._ids.pop(consumer, None)
        self._owed.pop(consumer_id, None)
        self._blocked.pop(consumer_id, None)
        held = self._held.pop(consumer_id, None)
        if held:  # the owner cancelled it (it requeued them) or is gone (they are lost)
            cast(RemoteQueue, consumer.queue).requeue(held)
        channel.cancel_by_broker(consumer)

    def _answer_get(self, worker: int, kind: str, event: tuple[Any, ...]) -> None:
        waiting = self._gets.pop(event[1], None)
        if waiting is None:
            return
        channel, stub = waiting
        if kind == "get-refused":
            if channel.state is ChannelState.OPEN:
                channel.fail_later(AMQPError(event[2], event[3], 60, 70))
            return
        open_ = channel.state is ChannelState.OPEN
        if kind == "get-empty":
            if open_:
                channel.conn.send(codec.encode_get_empty(channel.number))
            return
        _, _, tag, flags, count, exchange_raw, routing_key_raw, header, body, left = event
        entry = _entry(tag, flags, count, exchange_raw, routing_key_raw, header, body)
        if not open_:  # closed meanwhile: back to the owner
            if entry.stored:
                self.settle(worker, "requeue", [entry])
            return
        if entry.stored:
            self._live.setdefault(worker, set()).add(entry)
        no_ack = not entry.stored
        client_tag, header = channel.hand_out(stub, entry, None, no_ack)
        first = codec.encode_get_ok(
            channel.number, client_tag, entry.redelivered, exchange_raw, routing_key_raw, left
        )
        channel.send_content(first, header, body)

    def _answer_browse(self, kind: str, event: tuple[Any, ...]) -> None:
        """The owner's copies for an ``x-browse`` consumer (engine/consuming.py `_browse`
        does the same for a queue of this worker), or its refusal."""
        waiting = self._browses.pop(event[1], None)
        if waiting is None:
            return
        channel, stub, tag, nowait = waiting
        if channel.state is not ChannelState.OPEN:
            return
        if kind == "browse-refused":
            channel.fail_later(AMQPError(event[2], event[3], 60, 20))
            return
        if not nowait:
            channel.send_method(codec.build(spec.Basic.ConsumeOk, consumer_tag=tag))
        tag_raw = codec.encode_shortstr(tag)
        for flags, count, exchange_raw, routing_key_raw, header, body in event[2]:
            entry = _entry(0, flags, count, exchange_raw, routing_key_raw, header, body)
            first = codec.encode_deliver(
                channel.number,
                tag_raw,
                channel.unacked.issue(stub, entry, None, False),
                entry.redelivered,
                exchange_raw,
                routing_key_raw,
            )
            channel.send_content(first, header, body)
        channel.send_method(spec.Basic.Cancel(consumer_tag=tag, nowait=True))

    def lost(self, worker: int) -> None:
        """The link to ``worker`` broke (see the module's docstring)."""
        live = self._live.pop(worker, set())
        for entry in live:
            entry.stored = False  # settling it later sends nothing
        self._requests.pop(worker, None)
        for consumer_id, (consumer, _channel, _nowait) in list(self._consumers.items()):
            if cast(RemoteQueue, consumer.queue).worker == worker:
                self._cancelled(consumer_id)
        for request_id, (owner, answer, _refuse) in list(self._asks.items()):
            if owner == worker:  # its counts are gone with it
                del self._asks[request_id]
                answer(0, 0)
        for request_id, (channel, stub) in list(self._gets.items()):
            if stub.worker == worker:
                del self._gets[request_id]
                if channel.state is ChannelState.OPEN:
                    channel.conn.send(codec.encode_get_empty(channel.number))
        for request_id, (_channel, stub, _tag, _nowait) in list(self._browses.items()):
            if stub.worker == worker:  # nothing to browse there now: a browse of nothing
                self._answer_browse("browse-ok", ("browse-ok", request_id, []))
