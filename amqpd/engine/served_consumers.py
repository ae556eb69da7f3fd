"""The owner's side of consuming across workers (issue 26 stage 2, docs/multicore.md): the
consumers and basic.gets another worker's channels hold on this worker's queues.

Theory of operation
-------------------
A connection that cannot move to the worker owning a queue of a spread vhost consumes from
that queue's stub on its own worker (amqpd/model/replica.py, amqpd/engine/
remote_consumers.py), which sends the request to this worker over their forwarding link.
`ServedConsumers` is this worker's end of one such link: the `ConsumerSink` of every
consumer the peer asked for, registered on the real queue like any channel's consumer, so
the queue's own rules decide (single active consumer, priorities, exclusive consumers,
selectors, TTL, delivery limits). It keeps the deliveries that wait for an ack in an
`UnackedStore` (amqpd/engine/unacked.py), as a channel does: the tags sent to the peer
are this store's, per-consumer prefetch is counted here, and acks, requeues and rejects
come back as requests naming those tags. Unknown tags are ignored: the peer may settle a
delivery this link no longer has (requeued when a consumer was cancelled meanwhile).

Requests (`handle`, pickled tuples from the peer):
``("consume", vhost, queue, consumer id, tag, no_ack, exclusive, prefetch, arguments)``,
``("cancel", consumer id)``, ``("credit", consumer id, count)``, ``("ack" | "requeue" |
"discard" | "unsent", [tags])``, ``("unblock", consumer id)``, ``("get", request id,
vhost, queue, no_ack)``, ``("ask", request id, vhost, queue, "count" | "purge" |
"delete", ...)`` (engine/remote_consumers.py `ask`),
``("browse", request id, vhost, queue, arguments)`` (an ``x-browse`` consumer).
Answers and events (`out`, in order with the deliveries): ``("consume-ok", id)``,
``("refused", id, code, text)``, ``("cancelled", id)`` (the queue went away),
``("unblocked", id)``,
``("get-ok", request id, tag, flags, delivery count, exchange, routing key, header, body,
message count)``, ``("get-empty", request id)``, ``("get-refused", request id, code,
text)``, ``("answer", request id, count, count)``, ``("ask-refused", request id, code,
text)``, ``("browse-ok", request id, [(flags, delivery count, exchange, routing key,
header, body), ...])``, ``("browse-refused", request id, code, text)``; deliveries are
DELIVER records (amqpd/wire/forwarding.py).

A stream's consumer is served the same way: this object is also the stream's
`StreamSink` (`credit`, `deliver_run`), sending each run's messages as DELIVER records with
their ``x-stream-offset`` header (model/stream_delivery.py `StreamRun.messages`); its acks
are the stream's credit here.

Flow: besides its prefetch, a consumer has at most WINDOW deliveries in flight to the
peer; the peer gives credit back as it hands them to its client (and holds it while the
client does not read), so a consumer without prefetch cannot flood the peer.

Global qos (RabbitMQ's limiter across workers): a delivery the peer's channel had no room
for comes back ``("unsent", [tags])``: put back at its place as it was (neither redelivered
nor counted), and its consumer is *blocked* (no credit: the queue's other consumers get
what it would have) --``("unblock", id)``: the channel has room--> unblocking --every
delivery sent to it came back or was credited (`_in_flight` 0), so the next is in order-->
served again, and ``("unblocked", id)`` tells the peer where the fresh deliveries start
(engine/remote_consumers.py). `lost`
(the link broke: the peer died) cancels every consumer and requeues what it had not
settled, as RabbitMQ requeues a dead channel's deliveries.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Callable
from typing import Any, Final

from amqpd.engine.unacked import Settlement, Unacked, UnackedStore
from amqpd.model.message import QueueEntry
from amqpd.model.queue import Consumer, Queue
from amqpd.model.selective import browse_entries, consumer_selector
from amqpd.model.stream_delivery import StreamRun
from amqpd.model.vhost import VirtualHost
from amqpd.wire import codec
from amqpd.wire.errors import (
    ACCESS_REFUSED,
    NOT_FOUND,
    PRECONDITION_FAILED,
    AMQPError,
)
from amqpd.wire.forwarding import ACK_REQUIRED, REDELIVERED, encode_control, encode_delivery
from amqpd.wire.properties import with_delivery_count

__all__ = ["WINDOW", "ServedConsumers"]

log = logging.getLogger(__name__)

WINDOW: Final = 1000  # deliveries in flight to the peer per consumer, before it credits
_SETTLEMENTS: Final = {
    "ack": Settlement.ACK,
    "requeue": Settlement.REQUEUE,
    "discard": Settlement.DISCARD,
    "unsent": Settlement.UNSENT,
}


class ServedConsumers:
    """The consumers one other worker holds on this worker's queues (one per link)."""

    def __init__(self, wake: Callable[[], None]) -> None:
        """``wake``: something was appended to `out` (the link's writer sends it)."""
        self.out = bytearray()
        self._wake = wake
        self._unacked = UnackedStore()
        self._consumers: dict[int, tuple[Consumer, VirtualHost]] = {}
        self._ids: dict[Consumer, int] = {}
        self._in_flight: dict[Consumer, int] = {}
        self._blocked: dict[Consumer, bool] = {}  # whether the peer asked to unblock it

    def __len__(self) -> int:
        return len(self._consumers)

    # -- the peer's requests -------------------------------------------------------------
    def handle(self, vhosts: dict[str, VirtualHost], request: tuple[Any, ...]) -> None:
        """Carry out one request of the peer (see the module's docstring)."""
        kind = request[0]
        settlement = _SETTLEMENTS.get(kind)
        if settlement is not None:
            self._settle(settlement, request[1])
        elif kind == "credit":
            self._credit(request[1], request[2])
        elif kind == "unblock":
            found = self._consumers.get(request[1])
            if found is not None and found[0] in self._blocked:
                self._blocked[found[0]] = True
                self._unblocked(found[0])
        elif kind == "consume":
            self._consume(vhosts, *request[1:])
        elif kind == "cancel":
            found = self._consumers.pop(request[1], None)
            if found is not None:
                self._remove(*found)
        elif kind == "get":
            self._get(vhosts, *request[1:])
        elif kind == "ask":
            self._ask(vhosts, *request[1:])
        elif kind == "browse":
            self._browse(vhosts, *request[1:])
        else:
            log.warning("unknown consuming request %r from another worker", kind)

    def _queue(self, vhosts: dict[str, VirtualHost], vhost_name: str, name: str) -> Queue:
        """The queue a request names (404 if it is gone)."""
        vhost = vhosts.get(vhost_name)
        queue = None if vhost is None else vhost.queues.get(name)
        if queue is None:
            raise AMQPError(NOT_FOUND, f"no queue '{name}' in vhost '{vhost_name}'")
        return queue

    def _consume(
        self,
        vhosts: dict[str, VirtualHost],
        vhost_name: str,
        name: str,
        consumer_id: int,
        tag: str,
        no_ack: bool,
        exclusive: bool,
        prefetch: int,
        arguments: dict[str, Any],
    ) -> None:
        try:
            queue = self._queue(vhosts, vhost_name, name)
            if queue.exclusive_consumer is not None or (exclusive and queue.consumers):
                raise AMQPError(
                    ACCESS_REFUSED, f"queue '{name}' in vhost '{vhost_name}' in exclusive use"
                )
            selector = consumer_selector(arguments, queue)
        except AMQPError as exc:
            self._event(("refused", consumer_id, exc.reply_code, exc.text))
            return
        consumer = Consumer(
            self, tag, codec.encode_shortstr(tag), queue, no_ack, exclusive, prefetch, arguments
        )
        consumer.selector = selector
        self._consumers[consumer_id] = (consumer, vhosts[vhost_name])
        self._ids[consumer] = consumer_id
        self._event(("consume-ok", consumer_id))  # before its first delivery
        queue.add_consumer(consumer)

    def _remove(self, consumer: Consumer, vhost: VirtualHost) -> None:
        """Stop serving ``consumer`` (its deliveries stay unacked until settled)."""
        self._ids.pop(consumer, None)
        self._in_flight.pop(consumer, None)
        self._blocked.pop(consumer, None)
        queue = consumer.queue
        queue.remove_consumer(consumer)
        if queue.auto_delete and queue.had_consumer and not queue.consumers and not queue.deleted:
            vhost.delete_queue(queue)

    def _credit(self, consumer_id: int, count: int) -> None:
        found = self._consumers.get(consumer_id)
        if found is None:
            return
        consumer = found[0]
        self._in_flight[consumer] = self._in_flight.get(consumer, 0) - count
        if consumer in self._blocked:
            self._unblocked(consumer)  # (dispatches when it unblocks)
        else:
            consumer.queue.dispatch()

    def _unblocked(self, consumer: Consumer) -> None:
        """Serve a consumer whose unblocking was asked for again once nothing sent to it is
        still on its way (see the module's docstring)."""
        if self._blocked[consumer] and self._in_flight.get(consumer, 0) <= 0:
            del self._blocked[consumer]
            self._event(("unblocked", self._ids[consumer]))
            consumer.queue.dispatch()

    def _settle(self, settlement: Settlement, tags: list[int]) -> None:
        unacked = self._unacked
        records = []
        for tag in tags:
            try:
                records += unacked.take(tag, False)
            except AMQPError:
                continue  # requeued already (see the module's docstring)
        if not records:
            return
        if settlement is Settlement.UNSENT:
            self._unsent(records)  # blocked first: the requeue below dispatches
        unacked.settle(records, settlement, records[0].queue.clock.now)
        if settlement is Settlement.UNSENT:
            for consumer in {record.consumer for record in records}:
                if consumer in self._blocked:
                    self._unblocked(consumer)
        if settlement is not Settlement.REQUEUE:  # (a requeue dispatches itself)
            for queue in {record.queue for record in records}:
                queue.dispatch()

    def _get(
        self,
        vhosts: dict[str, VirtualHost],
        request_id: int,
        vhost_name: str,
        name: str,
        no_ack: bool,
    ) -> None:
        try:
            queue = self._queue(vhosts, vhost_name, name)
            entry = queue.take()  # a stream: 540, as it would be here
        except AMQPError as exc:
            self._event(("get-refused", request_id, exc.reply_code, exc.text))
            return
        if entry is None:
            queue.stats.get_empty += 1
            self._event(("get-empty", request_id))
            return
        tag = self._unacked.issue(queue, entry, None, not no_ack)
        if no_ack:
            queue.stats.get_no_ack += 1
        else:
            queue.stats.get += 1
        flags, count = self._hand_out(queue, entry, no_ack)
        message = entry.message
        self._event(
            (
                "get-ok",
                request_id,
                tag,
                flags,
                count,
                message.exchange_raw,
                message.routing_key_raw,
                message.header,
                message.payload,
                queue.message_count,
            )
        )

    def _browse(
        self,
        vhosts: dict[str, VirtualHost],
        request_id: int,
        vhost_name: str,
        name: str,
        arguments: dict[str, Any],
    ) -> None:
        """Copies of the ready messages an ``x-browse`` consumer's selector matches (the
        queue is left as it is; engine/consuming.py `_browse`)."""
        try:
            queue = self._queue(vhosts, vhost_name, name)
            selector = consumer_selector(arguments, queue)
        except AMQPError as exc:
            self._event(("browse-refused", request_id, exc.reply_code, exc.text))
            return
        copies = []
        for entry in browse_entries(queue, selector):
            message = entry.message
            header = message.header
            if entry.delivery_count:
                header = with_delivery_count(header, entry.delivery_count)
            flags = REDELIVERED if entry.redelivered else 0
            copies.append(
                (
                    flags,
                    entry.delivery_count,
                    message.exchange_raw,
                    message.routing_key_raw,
                    header,
                    message.payload,
                )
            )
        self._event(("browse-ok", request_id, copies))

    def _ask(
        self,
        vhosts: dict[str, VirtualHost],
        request_id: int,
        vhost_name: str,
        name: str,
        *what: Any,
    ) -> None:
        vhost = vhosts.get(vhost_name)
        queue = None if vhost is None else vhost.queues.get(name)
        if vhost is None or queue is None:
            text = f"no queue '{name}' in vhost '{vhost_name}'"
            self._event(("ask-refused", request_id, NOT_FOUND, text))
            return
        if what[0] == "count":
            self._event(("answer", request_id, queue.message_count, len(queue.consumers)))
        elif what[0] == "purge":
            try:
                purged = queue.purge()
            except AMQPError as exc:  # a stream: 540, as it would be here
                self._event(("ask-refused", request_id, exc.reply_code, exc.text))
                return
            self._event(("answer", request_id, purged, 0))
        else:  # ("delete", if_unused, if_empty)
            text = ""
            if what[1] and queue.consumers:
                text = f"queue '{name}' in vhost '{vhost_name}' in use"
            elif what[2] and queue.message_count:
                text = f"queue '{name}' in vhost '{vhost_name}' is not empty"
            if text:
                self._event(("ask-refused", request_id, PRECONDITION_FAILED, text))
            else:
                self._event(("answer", request_id, vhost.delete_queue(queue), 0))

    def _unsent(self, records: list[Unacked]) -> None:
        """Deliveries the peer's channel had no room for: not delivered after all (the
        statistics too), and their consumers blocked (see the module's docstring)."""
        for record in records:
            consumer = record.consumer
            if consumer is None:
                continue
            self._in_flight[consumer] = self._in_flight.get(consumer, 0) - 1
            stats = record.queue.stats
            stats.deliver -= 1
            if record.entry.redelivered:
                stats.redeliver -= 1
            if consumer in self._ids:
                self._blocked.setdefault(consumer, False)

    # -- ConsumerSink ----------------------------------------------------------------------
    def has_credit(self, consumer: Consumer) -> bool:
        if self._in_flight.get(consumer, 0) >= WINDOW or consumer in self._blocked:
            return False
        return consumer.no_ack or self._unacked.has_credit(consumer)

    def deliver(self, consumer: Consumer, queue: Queue, entry: QueueEntry) -> None:
        no_ack = consumer.no_ack
        tag = self._unacked.issue(queue, entry, consumer, not no_ack)
        if no_ack:
            queue.stats.deliver_no_ack += 1
        else:
            queue.stats.deliver += 1
        flags, count = self._hand_out(queue, entry, no_ack)
        if no_ack:
            queue.consumer_progress_at = queue.clock.now
        self._in_flight[consumer] = self._in_flight.get(consumer, 0) + 1
        message = entry.message
        was_empty = not self.out
        encode_delivery(
            self.out,
            self._ids[consumer],
            tag,
            flags,
            count,
            message.exchange_raw,
            message.routing_key_raw,
            message.header,
            message.payload,
        )
        if was_empty:
            self._wake()

    # -- StreamSink (a stream's consumers: runs of deliveries) --------------------------------
    def credit(self, consumer: Consumer) -> int:
        """How many more of a stream's messages ``consumer`` may be sent now."""
        room = WINDOW - self._in_flight.get(consumer, 0)
        return max(0, min(room, self._unacked.credit(consumer)))

    def deliver_run(self, consumer: Consumer, queue: Queue, run: StreamRun) -> None:
        """A run of a stream's messages, as DELIVER records (their tags contiguous)."""
        count = len(run)
        tag = self._unacked.issue_run(queue, run.entries(), consumer)
        queue.stats.deliver += count
        self._in_flight[consumer] = self._in_flight.get(consumer, 0) + count
        consumer_id = self._ids[consumer]
        was_empty = not self.out
        for exchange_raw, routing_key_raw, header, body in run.messages():
            encode_delivery(
                self.out,
                consumer_id,
                tag,
                ACK_REQUIRED,
                0,
                exchange_raw,
                routing_key_raw,
                header,
                body,
            )
            tag += 1
        if was_empty:
            self._wake()

    def _hand_out(self, queue: Queue, entry: QueueEntry, no_ack: bool) -> tuple[int, int]:
        """What a delivery and a get-ok share (as `Channel.hand_out`): the flags and the
        delivery count the peer's client sees."""
        count = entry.delivery_count
        flags = 0 if no_ack else ACK_REQUIRED
        if entry.redelivered:
            flags |= REDELIVERED
            queue.stats.redeliver += 1
        queue.delivered(entry)
        if no_ack:
            queue.settled(entry)
        return flags, count

    def cancel_by_broker(self, consumer: Consumer) -> None:
        consumer_id = self._ids.pop(consumer, None)
        if consumer_id is None:
            return
        self._consumers.pop(consumer_id, None)
        self._in_flight.pop(consumer, None)
        self._blocked.pop(consumer, None)
        self._event(("cancelled", consumer_id))

    # -- the link --------------------------------------------------------------------------
    def _event(self, event: tuple[Any, ...]) -> None:
        was_empty = not self.out
        encode_control(self.out, pickle.dumps(event))
        if was_empty:
            self._wake()

    def take(self, out: bytearray) -> None:
        """Move what waits to be sent into ``out``."""
        if self.out:
            out += self.out
            self.out.clear()

    def lost(self) -> None:
        """The link broke: every consumer goes, every unsettled delivery is requeued."""
        found = list(self._consumers.values())
        self._consumers.clear()
        for consumer, vhost in found:
            self._remove(consumer, vhost)
        self._unacked.requeue_all()
        self.out.clear()
