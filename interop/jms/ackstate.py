"""The acknowledgement state machine of one session.

Theory of operation (session acknowledgement state)
---------------------------------------------------
One AMQP channel per session, and acks and transactions are per channel in AMQP: exactly
JMS's per-session scope. This object holds what the session must remember about the
deliveries on its channel; every method runs with the session's condition held (the I/O
thread only takes it for short, non-blocking updates, and nothing here blocks on the broker:
acks and rejects are queued to the I/O thread). An ack the application must be able to rely
on (AUTO after receive, CLIENT / INDIVIDUAL after acknowledge) sets ``unwritten``; the
session then waits, with its condition released, until the frame is written to the socket.

- ``outstanding``: every delivery unacked at the broker, by tag, in tag order. A delivery
  enters when it arrives (`register`, I/O thread) and leaves when its ack or reject is
  queued. The safe cumulative-ack rule (`interop.jms.acks.plan_acks`) reads it.
- per consumer (`interop.jms.consumer`): ``buffer`` (prefetched, not yet seen by the
  application) and ``redelivery`` (locally rolled back, each ready at its own time).
- ``consumed``: CLIENT / INDIVIDUAL / transacted: what the application has seen and not yet
  acknowledged or committed, oldest first.
- ``tx_internal``: transacted only: acks and rejects the client itself queued inside the
  current transaction (selector misses, expired and poisoned messages, requeues from a
  closed consumer). ``tx.rollback`` undoes them at the broker, so a rollback issues them
  again and commits.

A delivery's life::

    arrive -> buffer -> screened at take time: selector / noLocal miss -> ack
                                                expired                -> dead-letter or drop
                                                tx pre-dispatch check  -> poison
           -> handed to the application (receive returns it / listener called)
              AUTO      : ack before receive returns / after the listener returns
                          (optimizeAcknowledge: batched by an AckBatcher at 65 %)
              DUPS_OK   : queue as AUTO; topic batched at 50 %, rest flushed on close
                          (a batch is written before the receive that completed it returns)
              CLIENT    : -> consumed until acknowledge() (acks all of consumed)
              INDIVIDUAL: -> consumed until message.acknowledge() (that one only)
              TRANSACTED: -> consumed until commit() (acks, then tx.commit)
           -> listener raised (AUTO, DUPS_OK, INDIVIDUAL), recover(), rollback():
              local redelivery: counter + 1; counter > maximum_redeliveries -> poison
              (basic.reject requeue=false: the queue's dead-letter exchange takes it;
              a non-persistent message is dropped instead, as in ActiveMQ);
              else back to the consumer's redelivery queue after the policy's delay.

CLIENT, INDIVIDUAL and transacted consumers also keep a `WindowTracker` (``before_app``
feeds it) so a batch larger than the prefetch can be read before acknowledging.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from interop.jms import codec
from interop.jms.acks import plan_acks
from interop.jms.channel import ChannelLink
from interop.jms.constants import AckMode
from interop.jms.delivery import Delivery
from interop.jms.messages import AckHandle
from interop.jms.options import ConnectionOptions
from interop.jms.ports import AckConsumer

__all__ = ["AckState"]

log = logging.getLogger(__name__)

_SEEN_BEFORE_LIMIT = 10_000
"""Message ids remembered across failovers (ActiveMQ's previously delivered messages)."""
_BATCH_ACKS = (AckMode.AUTO_ACKNOWLEDGE, AckMode.DUPS_OK_ACKNOWLEDGE)
HOLDING_MODES = (
    AckMode.CLIENT_ACKNOWLEDGE,
    AckMode.INDIVIDUAL_ACKNOWLEDGE,
    AckMode.SESSION_TRANSACTED,
)


class AckState:
    """Deliveries of one session's channel and the acknowledgement rules of its mode
    (implements `interop.jms.ports.AckPolicy`)."""

    def __init__(
        self,
        ack_mode: AckMode,
        link: ChannelLink,
        options: ConnectionOptions,
        connection_id: str,
        cond: threading.Condition,
        receipt: Callable[[Delivery], AckHandle],
    ) -> None:
        """Create the state.

        Args:
            ack_mode: The session's mode.
            link: The session's channel.
            options: Policies (redelivery, dead-letter strategy, topic exchange).
            connection_id: This connection's id (noLocal).
            cond: The session's condition; every method expects it held.
            receipt: Builds the handle a message uses to reach its session.
        """
        self.ack_mode = ack_mode
        self.transacted = ack_mode is AckMode.SESSION_TRANSACTED
        self._link = link
        self._options = options
        self._connection_id = connection_id
        self._cond = cond
        self._receipt = receipt
        self.outstanding: dict[int, Delivery] = {}
        self.consumed: list[Delivery] = []
        self.tx_internal: list[tuple[int, bool | None]] = []  # (tag, requeue); None = ack
        self.unwritten = False  # acks queued that the caller must see written (take_unwritten)
        self.tx_work = False  # transacted: something was consumed or sent in this transaction
        self.tx_failed = False  # transacted: a failover lost the transaction in flight
        # failover: message id -> counter of messages the application saw unacknowledged
        # on a lost connection; they come back from the broker flagged redelivered
        self.seen_before: OrderedDict[str, int] = OrderedDict()

    # -- arrival and dispatch ----------------------------------------------------------------
    def register(
        self, consumer: AckConsumer, method: Any, properties: Any, body: bytes
    ) -> Delivery:
        """A delivery arrived (I/O thread): decode it, count it outstanding, buffer it."""
        message = codec.decode(
            method.exchange, method.routing_key, properties, body, self._options.topic_exchange
        )
        headers = properties.headers or {}
        redelivered = bool(method.redelivered)
        counter = codec.delivery_counter(headers, redelivered)
        if self.seen_before and message.message_id is not None:
            with self._cond:
                earlier = self.seen_before.pop(message.message_id, None)
            if earlier is not None:
                counter = max(counter, earlier + 1)
                redelivered = True
        publisher = headers.get(codec.CONNECTION_ID_HEADER)
        delivery = Delivery(
            tag=int(method.delivery_tag),
            consumer_tag=str(getattr(method, "consumer_tag", "") or ""),
            owner=consumer,
            message=message,
            counter=counter,
            broker_redelivered=redelivered,
            persistent=properties.delivery_mode == 2,
            publisher=publisher if isinstance(publisher, str) else None,
        )
        message._set_delivery(self._receipt(delivery), delivery.redelivered, counter + 1)
        with self._cond:
            self.outstanding[delivery.tag] = delivery
            consumer._buffer.append(delivery)
            self._cond.notify_all()
        return delivery

    def screen(self, consumer: AckConsumer, delivery: Delivery) -> bool:
        """True when the delivery must not reach the application (it is settled here)."""
        message = delivery.message
        if consumer.no_local and delivery.publisher == self._connection_id:
            self.internal_ack(delivery)
            return True
        if consumer.selector is not None and not consumer.selector(message.get_property):
            self.internal_ack(delivery)
            return True
        if message.expiration is not None and time.time() >= message.expiration:
            strategy = self._options.dead_letter_strategy
            if strategy is None or strategy.process_expired:
                self.poison(delivery, "expired")
            else:
                self.internal_ack(delivery)
            return True
        policy = self._options.redelivery_policy
        if self.transacted and policy.pre_dispatch_check and policy.exceeded(delivery.counter):
            self.poison(delivery, "redelivery limit exceeded before dispatch")
            return True
        return False

    def before_app(self, consumer: AckConsumer, delivery: Delivery) -> None:
        """The application is about to see ``delivery``."""
        consumer.groups.mark(delivery.message)
        if self.transacted:
            self.tx_work = True
        if self.ack_mode in HOLDING_MODES:
            self.consumed.append(delivery)
            window = consumer.window
            if window is not None and window.consumed(delivery.tag, delivery.consumer_tag):
                consumer._rotate()

    def after_app(
        self, consumer: AckConsumer, delivery: Delivery, failed: bool, now: float
    ) -> None:
        """The application has seen ``delivery`` (receive returned, listener finished)."""
        if delivery.settled:  # e.g. forgotten by a failover while a listener ran
            return
        mode = self.ack_mode
        batcher = consumer.batcher
        if mode in _BATCH_ACKS:
            if failed:
                if batcher is not None:  # ack what completed, redeliver only the failure
                    self.send_acks(batcher.take_all())
                self.redeliver([delivery], now)
            elif batcher is not None:
                self.send_acks(batcher.consumed(delivery.tag, now))
            else:
                self.send_acks([delivery.tag])
        elif mode is AckMode.INDIVIDUAL_ACKNOWLEDGE and failed and not delivery.settled:
            if delivery in self.consumed:
                self.consumed.remove(delivery)
            self.redeliver([delivery], now)

    # -- settling ------------------------------------------------------------------------------
    def _settled(self, tag: int) -> None:
        delivery = self.outstanding.pop(tag, None)
        if delivery is not None:
            delivery.settled = True
            if delivery.owner.window is not None:
                delivery.owner.window.settled(tag)

    def send_acks(self, tags: Iterable[int]) -> None:
        """Ack these tags with the fewest frames the safe cumulative rule allows."""
        wanted = [tag for tag in tags if tag in self.outstanding]
        if not wanted:
            return
        for tag, multiple in plan_acks(wanted, self.outstanding):
            self._link.ack(tag, multiple)
        # Every mode, DUPS_OK included: ActiveMQ writes each ack it sends (a DUPS_OK or
        # optimizeAcknowledge batch when its threshold is crossed) on the caller's thread,
        # so a crash after the call can only redeliver the tail below the threshold.
        self.unwritten = True
        for tag in wanted:
            self._settled(tag)

    def take_unwritten(self) -> bool:
        """True when acks were queued since the last call that the call returning to the
        application must wait for (`interop.jms.transport.ChannelLink.written`). DUPS_OK
        and optimizeAcknowledge are lazy in *when* they ack (batches), not in writing an
        ack they send."""
        unwritten, self.unwritten = self.unwritten, False
        return unwritten

    def internal_ack(self, delivery: Delivery, record: bool = True) -> None:
        """Ack a delivery the application never saw (or drops)."""
        if delivery.settled:
            return
        self._link.ack(delivery.tag)
        if self.transacted and record:
            self.tx_internal.append((delivery.tag, None))
        self._settled(delivery.tag)

    def reject(self, delivery: Delivery, requeue: bool, record: bool = True) -> None:
        """``basic.reject`` one delivery."""
        if delivery.settled:
            return
        self._link.reject(delivery.tag, requeue)
        if self.transacted and record:
            self.tx_internal.append((delivery.tag, requeue))
        self._settled(delivery.tag)

    def poison(self, delivery: Delivery, why: str, record: bool = True) -> None:
        """Dead-letter a delivery (or drop it: non-persistent, as ActiveMQ does by default)."""
        strategy = self._options.dead_letter_strategy
        message = delivery.message
        if strategy is not None and not delivery.persistent and not strategy.process_non_persistent:
            log.info("dropping non-persistent message %s (%s)", message.message_id, why)
            self.internal_ack(delivery, record)
            return
        log.warning(
            "message %s to the dead-letter queue after %d deliveries (%s)",
            message.message_id,
            delivery.counter,
            why,
        )
        self.reject(delivery, requeue=False, record=record)

    def redeliver(self, deliveries: Iterable[Delivery], now: float, record: bool = True) -> bool:
        """Local redelivery (rollback, recover, failed listener); True if any was settled."""
        policy = self._options.redelivery_policy
        settled = False
        for delivery in deliveries:
            if delivery.settled:
                continue
            delivery.counter += 1
            delivery.message._set_delivery(self._receipt(delivery), True, delivery.counter + 1)
            if policy.exceeded(delivery.counter):
                self.poison(delivery, f"redelivery counter {delivery.counter} > maximum", record)
                settled = True
            elif delivery.owner.closed:
                self.reject(delivery, requeue=True, record=record)
                settled = True
            else:
                delivery.ready_at = now + policy.delay(delivery.counter)
                delivery.owner._push_redelivery(delivery)
        self._cond.notify_all()
        return settled

    # -- failover ------------------------------------------------------------------------------
    def forget(self) -> None:
        """The connection was lost: every delivery on the dead channel is void (the broker
        requeues them; their tags mean nothing on the next channel). A transaction with
        work in it can no longer commit (``tx_failed``)."""
        if self.transacted and (self.tx_work or self.consumed or self.tx_internal):
            self.tx_failed = True
        for delivery in self.consumed:
            if delivery.message.message_id is not None:
                self.seen_before[delivery.message.message_id] = delivery.counter
        while len(self.seen_before) > _SEEN_BEFORE_LIMIT:
            self.seen_before.popitem(last=False)
        for delivery in [*self.outstanding.values(), *self.consumed]:
            delivery.settled = True
        self.outstanding.clear()
        self.consumed.clear()
        self.tx_internal.clear()
        self.unwritten = False

    def rebind(self, link: ChannelLink) -> None:
        """Failover: acks go to the session's new channel."""
        self._link = link

    # -- session operations --------------------------------------------------------------------
    def ack_consumed(self) -> None:
        """CLIENT acknowledge / commit: ack everything consumed."""
        consumed, self.consumed = self.consumed, []
        self.send_acks(d.tag for d in consumed if not d.settled)

    def acknowledge(self, delivery: Delivery) -> None:
        """``message.acknowledge()`` by the mode's rule."""
        if self.ack_mode is AckMode.CLIENT_ACKNOWLEDGE:
            self.ack_consumed()
        elif self.ack_mode is AckMode.INDIVIDUAL_ACKNOWLEDGE and not delivery.settled:
            if delivery in self.consumed:
                self.consumed.remove(delivery)
            self.send_acks([delivery.tag])

    def processing_failed(self, delivery: Delivery) -> None:
        """``with message:`` raised: INDIVIDUAL hands the message back for redelivery."""
        if self.ack_mode is AckMode.INDIVIDUAL_ACKNOWLEDGE and delivery in self.consumed:
            self.consumed.remove(delivery)
            self.redeliver([delivery], time.monotonic())

    def commit(self) -> None:
        """Before ``tx.commit``: ack what was consumed; internal settlements become final."""
        self.ack_consumed()
        self.tx_internal.clear()
        self.tx_work = False

    def start_rollback(self) -> tuple[list[Delivery], list[tuple[int, bool | None]]]:
        """Before ``tx.rollback``: take the consumed deliveries and the internal settlements."""
        consumed, self.consumed = self.consumed, []
        internal, self.tx_internal = self.tx_internal, []
        self.tx_work = self.tx_failed = False
        return consumed, internal

    def finish_rollback(
        self, consumed: list[Delivery], internal: list[tuple[int, bool | None]]
    ) -> bool:
        """After ``tx.rollback``: settle again what the rollback undid, redeliver what was
        consumed. True when a ``tx.commit`` must follow."""
        for tag, requeue in internal:
            if requeue is None:
                self._link.ack(tag)
            else:
                self._link.reject(tag, requeue)
        settled = self.redeliver(consumed, time.monotonic(), record=False)
        return bool(internal) or settled

    def recover(self, consumers: Iterable[AckConsumer]) -> None:
        """Redeliver everything delivered and not acknowledged (batched acks included)."""
        pending = list(self.consumed)
        self.consumed.clear()
        for consumer in consumers:
            if consumer.batcher is not None:
                tags = set(consumer.batcher.take_all())
                pending.extend(d for tag, d in self.outstanding.items() if tag in tags)
        self.redeliver(sorted(pending, key=lambda d: d.tag), time.monotonic())
