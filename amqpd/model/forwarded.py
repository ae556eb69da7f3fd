"""A publish another worker routed and forwarded here (issue 26 stage 2; the records are
amqpd/wire/forwarding.py): enqueued like a local one, and answered once it is settled.

Theory of operation
-------------------
`InboundLink` is this worker's end of one other worker's forwarding link. For each FORWARD
record, `InboundLink.accept` builds the `Message` from the fields the publishing worker
parsed (the publish is not decoded again), and puts it into the named queues of the vhost
that still exist with `enqueue_routed`: the same rules as a local publish (reject-publish,
deduplication, flow control). A queue deleted since the sender routed is skipped: RabbitMQ
confirms a publish whose queue was deleted meanwhile (`rabbit_channel`'s
handle_publishing_queue_down treats a normal queue exit as a confirm).

The publish id is then decided at once (refused by a queue; or final at enqueue: transient,
or no durable queue) or waits for the storage batch holding it: the link registers itself
for that batch in the broker's `BatchWaits` (model/batches.py) with the publish id as the
"sequence number", exactly as a channel does for a confirm, so `batch_committed` and
`batch_failed` decide them. Ids arrive in ascending order; those that wait sit in
``_waiting`` (a FIFO), those decided out of order in ``_decided`` until the FIFO's head is.

`take_answer` appends one SETTLED record covering every id up to just below the oldest id
still waiting (or up to the last id received), with the refused ids among them, and nothing
when nothing new was decided: the shell calls it once per chunk of records and once per
committed batch, so the answers cost one record per batch, not per message. Only what the
sender waits for needs an answer: a promised publish (its publisher waits for a confirm or
a tx.commit-ok) and a TOPOLOGY record (a held reply); a plain publish is neither waited for
nor answered on its own (a later answer covers its id), so a link that carries only plain
publishes sends nothing back.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Final

from amqpd.model.enqueue import enqueue_routed, storage_batch
from amqpd.model.message import Message
from amqpd.model.queue import Queue
from amqpd.model.vhost import VirtualHost
from amqpd.wire.forwarding import (
    PERSISTENT,
    PROMISED,
    Control,
    Delivery,
    Forwarded,
    RecordReader,
    Settled,
    TopologyChange,
    encode_settled,
)

if TYPE_CHECKING:
    from amqpd.model.batches import BatchWaits
    from amqpd.model.ports import JournalPort


NAMES_KEPT: Final = 1024  # distinct target lists whose decoded names are kept per link


def forwarded_message(
    record: Forwarded, exchange: str | None = None, routing_key: str | None = None
) -> Message:
    """The `Message` a FORWARD record describes; ``exchange`` and ``routing_key``, when
    given, are its exchange's and routing key's names decoded already."""
    exchange_raw = record.exchange_raw
    routing_key_raw = record.routing_key_raw
    return Message(
        exchange_raw[1:].decode() if exchange is None else exchange,
        routing_key_raw[1:].decode() if routing_key is None else routing_key,
        exchange_raw,
        routing_key_raw,
        record.header,
        record.body,
        bool(record.flags & PERSISTENT),
        record.priority if record.priority >= 0 else None,
        record.expiration,
        record.headers_raw,
    )


class InboundLink:
    """The records one other worker forwards here, and the answers it is owed."""

    __slots__ = (
        "_decided",
        "_exchange",
        "_exchange_raw",
        "_key",
        "_key_raw",
        "_names",
        "_needed",
        "_received",
        "_refused",
        "_reported",
        "_waiting",
    )

    def __init__(self) -> None:
        # a record's queue names (raw) -> decoded: once per routing result, not per message
        self._names: dict[bytes, list[str]] = {}
        self._waiting: deque[int] = deque()  # ids that wait for a batch, ascending
        self._decided: set[int] = set()  # ids in _waiting decided already
        self._refused: list[int] = []  # refused ids not yet reported
        self._received = 0  # the highest id received
        self._reported = 0  # the highest id a SETTLED record covered
        self._needed = 0  # the highest id the sender waits for (promised, or a change)
        # the last record's exchange and routing key, raw and decoded: publishes in a row
        # often share them (a bytes comparison instead of a slice and a decode)
        self._exchange_raw = b"\x00"
        self._exchange = ""
        self._key_raw = b"\x00"
        self._key = ""

    def accept(
        self,
        record: Forwarded,
        vhost: VirtualHost,
        journal: JournalPort | None,
        batch_waits: BatchWaits,
        flow_queues: set[Queue],
        reply_queues: dict[str, Queue] | None = None,
    ) -> list[Queue] | None:
        """Enqueue ``record``'s message into its queues of ``vhost`` (or, for a direct
        reply-to address, ``reply_queues``: the broker's); the queues that hold it, or None
        when one refused it (then it is in none).

        Raises:
            ValueError: its publish id is not above the previous one's.
            ForwardingError: a target queue's name is not UTF-8.
        """
        publish_id = record.publish_id
        if publish_id <= self._received:
            raise ValueError(f"publish id {publish_id} after {self._received}")
        self._received = publish_id
        raw = record.exchange_raw
        if raw != self._exchange_raw:
            self._exchange = raw[1:].decode()
            self._exchange_raw = raw
        raw = record.routing_key_raw
        if raw != self._key_raw:
            self._key = raw[1:].decode()
            self._key_raw = raw
        message = forwarded_message(record, self._exchange, self._key)
        queues: list[Queue] = []
        names = self._names.get(record.names)
        if names is None:
            if len(self._names) >= NAMES_KEPT:
                self._names.clear()
            names = self._names[record.names] = record.queues
        for name in names:
            queue = vhost.queues.get(name)
            if queue is None and reply_queues is not None:
                queue = reply_queues.get(name)  # amq.* names: never a queue's
            if queue is not None:
                queues.append(queue)
        expiration_ms = record.expiration_ms if record.expiration_ms >= 0 else None
        promised = bool(record.flags & PROMISED)
        if queues and not enqueue_routed(message, queues, expiration_ms, promised, flow_queues):
            if promised:
                self._needed = publish_id
                self._refused.append(publish_id)
            return None
        if not promised:
            return queues  # nobody waits for its answer (no confirm, no commit-ok)
        self._needed = publish_id
        batch = storage_batch(journal, message, queues)
        if batch is not None:
            self._waiting.append(publish_id)
            batch_waits.confirm(batch, self, publish_id)
        return queues

    def accept_run(
        self,
        reader: RecordReader,
        vhosts: dict[str, VirtualHost],
        gone: VirtualHost,
        journal: JournalPort | None,
        batch_waits: BatchWaits,
        flow_queues: set[Queue],
        reply_queues: dict[str, Queue] | None,
    ) -> TopologyChange | Control | Settled | Delivery | None:
        """`accept` the FORWARD records next in ``reader``, each into its vhost (``gone``
        stands in for one deleted meanwhile); the first record of another kind, for the
        shell to handle, or None when the bytes fed so far are used up. One compiled call
        per chunk of records instead of an interpreted loop step per record.

        Raises:
            ValueError, ForwardingError: as `accept` and `RecordReader.next_record`.
        """
        while True:
            record = reader.next_record()
            if not isinstance(record, Forwarded):
                return record
            vhost = vhosts.get(reader.vhost)
            self.accept(
                record,
                gone if vhost is None else vhost,
                journal,
                batch_waits,
                flow_queues,
                reply_queues,
            )

    def accept_change(self, publish_id: int) -> None:
        """A TOPOLOGY record (applied by the caller: model/replica.py): settled at once."""
        if publish_id <= self._received:
            raise ValueError(f"publish id {publish_id} after {self._received}")
        self._received = publish_id
        self._needed = publish_id

    def refuse_change(self, publish_id: int) -> None:
        """The TOPOLOGY record ``publish_id`` (accepted last) was refused: its SETTLED
        answer names it among the refused (model/replica_apply.py)."""
        self._refused.append(publish_id)

    @property
    def answer_due(self) -> bool:
        """Whether an id the sender waits for is not answered yet (`take_answer` may have
        something to send)."""
        return self._needed > self._reported

    def batch_committed(self, batch: int, confirms: list[int], commit_oks: int) -> None:
        """`BatchWaiter`: the publishes ``confirms`` are durable."""
        self._decided.update(confirms)

    def batch_failed(
        self, batch: int, confirms: list[int], commit_oks: int, error: Exception
    ) -> None:
        """`BatchWaiter`: the publishes ``confirms`` could not be written."""
        self._decided.update(confirms)
        self._refused.extend(confirms)

    def take_answer(self, out: bytearray) -> bool:
        """Append a SETTLED record for what was decided since the last one, when the sender
        waits for some of it; whether one was appended."""
        waiting = self._waiting
        decided = self._decided
        while waiting and waiting[0] in decided:
            decided.discard(waiting.popleft())
        if self._needed <= self._reported:
            return False  # nothing the sender waits for: no record, no wake-up there
        through = waiting[0] - 1 if waiting else self._received
        if through <= self._reported:
            return False
        refused = self._refused
        now = sorted([publish_id for publish_id in refused if publish_id <= through])
        if now:
            self._refused = [publish_id for publish_id in refused if publish_id > through]
        encode_settled(out, through, now)
        self._reported = through
        return True
