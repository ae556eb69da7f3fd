"""A tx channel's buffered work (AMQP tx class).

Theory of operation
-------------------
After tx.select every publish and every settlement (ack / nack / reject) is buffered here
instead of being applied. tx.commit `take`s the whole buffer and the channel applies it in one
synchronous step, so no consumer can observe half a commit; tx.rollback forgets the publishes
and hands the settled deliveries back to be unacked again. The transaction object lives as
long as the channel stays transactional; each commit or rollback starts an empty one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from amqpd.engine.unacked import Settlement, Unacked
from amqpd.model.exchange import Exchange
from amqpd.model.message import Message


@dataclass(slots=True, init=False)
class BufferedPublish:
    """A publish waiting for tx.commit."""

    exchange: Exchange
    message: Message
    mandatory: bool
    expiration_ms: int | None
    promised: bool = False  # confirm / tx: delivered once stored (amqpd/model/held.py)

    # init=False and a written __init__: mypyc compiles it (a dataclass-generated __init__
    # stays interpreted, ~0.2 µs per object; this one is built per message).
    def __init__(
        self,
        exchange: Exchange,
        message: Message,
        mandatory: bool,
        expiration_ms: int | None,
        promised: bool = False,
    ) -> None:
        self.exchange = exchange
        self.message = message
        self.mandatory = mandatory
        self.expiration_ms = expiration_ms
        self.promised = promised


@dataclass(slots=True)
class Transaction:
    """Work buffered by a tx channel until commit, in arrival order."""

    publishes: list[BufferedPublish] = field(default_factory=list)
    settlements: list[tuple[list[Unacked], Settlement]] = field(default_factory=list)

    def take(self) -> Transaction:
        """tx.commit: everything buffered so far, to apply; this transaction starts empty."""
        taken = Transaction(self.publishes, self.settlements)
        self.publishes = []
        self.settlements = []
        return taken

    def rollback(self) -> list[Unacked]:
        """tx.rollback (or channel close): forget the publishes; return the deliveries settled
        inside the transaction, which are unacked again."""
        restored = [record for records, _kind in self.settlements for record in records]
        self.publishes.clear()
        self.settlements.clear()
        return restored
