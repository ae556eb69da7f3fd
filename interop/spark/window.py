"""Publisher-confirm bookkeeping for one channel: pure, no sockets, time passed in.

Delivery tags are n, n+1, n+2… in publish order on a confirm channel (n is 1 on a new
channel; a channel reused from an earlier task continues where it stopped). The broker settles
them with ``basic.ack`` / ``basic.nack``, singly or ``multiple`` (every outstanding tag up to
and including the given one). The window keeps each unconfirmed message itself, so that after a
lost connection ``rebase()`` hands them back, in publish order, for republishing on a new
channel. It bounds how many may be outstanding; the first failure (a nack, a return, a confirm
timeout, a protocol violation) is kept and ends publishing.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from interop.spark.errors import BrokerNacked, ConfirmTimeout, MessageReturned, PublishError
from interop.spark.message import OutgoingMessage

__all__ = ["ConfirmWindow", "WindowStats"]


@dataclass(slots=True)
class WindowStats:
    """Counters of one channel's publishing.

    Attributes:
        published: Messages handed to ``basic_publish`` (republished ones count once).
        acked: Messages the broker acked.
        nacked: Messages the broker nacked.
        returned: Messages returned as unroutable (``basic.return``).
        republished: Messages published again on a new connection (unconfirmed when the
            previous one was lost).
        bytes: Body bytes published.
        max_outstanding: Most unconfirmed messages at any time.
        first_message_id: ``message_id`` of the first message, if any.
        last_message_id: ``message_id`` of the last message, if any.
    """

    published: int = 0
    acked: int = 0
    nacked: int = 0
    returned: int = 0
    republished: int = 0
    bytes: int = 0
    max_outstanding: int = 0
    first_message_id: str | None = None
    last_message_id: str | None = None


class ConfirmWindow:
    """Tracks unconfirmed delivery tags and the first failure of a confirm channel.

    Args:
        max_in_flight: Most unconfirmed messages allowed.
        confirm_timeout: Seconds without confirm progress, while messages are outstanding,
            after which ``check_timeout`` records a ``ConfirmTimeout``.
    """

    def __init__(self, max_in_flight: int, confirm_timeout: float) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        self.max_in_flight = max_in_flight
        self.confirm_timeout = confirm_timeout
        self.stats = WindowStats()
        self.failure: PublishError | None = None
        self._outstanding: OrderedDict[int, OutgoingMessage] = OrderedDict()
        self._last_progress = 0.0
        self.next_tag = 1

    @property
    def outstanding(self) -> int:
        """Messages published and not yet settled."""
        return len(self._outstanding)

    @property
    def room(self) -> int:
        """How many more messages may be published now (0 after a failure)."""
        if self.failure is not None:
            return 0
        return self.max_in_flight - len(self._outstanding)

    def published(self, message: OutgoingMessage, now: float, *, again: bool = False) -> int:
        """Record a ``basic_publish`` and return its delivery tag.

        Args:
            message: The message (kept until it is confirmed).
            now: Monotonic clock reading.
            again: True when republishing a message ``rebase()`` handed back.
        """
        stats = self.stats
        if again:
            stats.republished += 1
        else:
            stats.published += 1
            stats.bytes += len(message.body)
            if stats.published == 1:
                stats.first_message_id = message.message_id
            stats.last_message_id = message.message_id
        tag = self.next_tag
        self.next_tag += 1
        if not self._outstanding:
            self._last_progress = now
        self._outstanding[tag] = message
        stats.max_outstanding = max(stats.max_outstanding, len(self._outstanding))
        return tag

    def rebase(self, next_tag: int) -> list[OutgoingMessage]:
        """Move to a new channel whose next delivery tag is ``next_tag``.

        Returns:
            The unconfirmed messages of the old channel, in publish order; the caller
            republishes them (with ``again=True``) before anything new.
        """
        unconfirmed = list(self._outstanding.values())
        self._outstanding.clear()
        self.next_tag = next_tag
        return unconfirmed

    def confirmed(self, tag: int, multiple: bool, ack: bool, now: float) -> int:
        """Settle ``tag`` (and every earlier outstanding tag when ``multiple``).

        Args:
            tag: The ``delivery_tag`` of the ``basic.ack`` / ``basic.nack``.
            multiple: Its ``multiple`` flag.
            ack: True for ``basic.ack``, False for ``basic.nack``.
            now: Monotonic clock reading.

        Returns:
            How many messages this settled.
        """
        settled: list[tuple[int, OutgoingMessage]] = []
        if multiple:
            while self._outstanding:
                first = next(iter(self._outstanding))
                if first > tag:
                    break
                settled.append(self._outstanding.popitem(last=False))
        elif tag in self._outstanding:
            settled.append((tag, self._outstanding.pop(tag)))
        elif self.failure is None:
            self.failure = PublishError(
                f"protocol error: broker {'acked' if ack else 'nacked'} delivery tag {tag}, "
                f"which is not outstanding (next tag {self.next_tag})"
            )
        if settled:
            self._last_progress = now
        if ack:
            self.stats.acked += len(settled)
        elif settled:
            self.stats.nacked += len(settled)
            if self.failure is None:
                self.failure = BrokerNacked(_nack_text(settled, multiple))
        return len(settled)

    def returned(
        self, reply_code: int, reply_text: str, exchange: str, routing_key: str, message_id: object
    ) -> None:
        """Record a ``basic.return`` (a mandatory message no queue took)."""
        self.stats.returned += 1
        if self.failure is None:
            self.failure = MessageReturned(
                f"message returned as unroutable: {reply_code} {reply_text} "
                f"exchange={exchange!r} routing_key={routing_key!r} message_id={message_id!r} "
                "(bind a queue, fix the routing key, or set mandatory=false to let the broker "
                "drop unroutable messages)"
            )

    def fail(self, error: PublishError) -> None:
        """Record ``error`` unless a failure is already recorded."""
        if self.failure is None:
            self.failure = error

    def stalled(self, now: float) -> ConfirmTimeout | None:
        """A ``ConfirmTimeout`` if confirms made no progress for too long, else None.

        Not recorded as the failure: the publisher drops the connection and republishes,
        and gives up only when ``deliveryTimeout`` runs out.
        """
        if not self._outstanding or now - self._last_progress < self.confirm_timeout:
            return None
        first = next(iter(self._outstanding))
        last = next(reversed(self._outstanding))
        return ConfirmTimeout(
            f"no publisher confirm for {self.confirm_timeout * 1000:.0f} ms with "
            f"{len(self._outstanding)} message(s) outstanding (delivery tags "
            f"{first}..{last}, {self.stats.published} published)"
        )


def _nack_text(settled: list[tuple[int, OutgoingMessage]], multiple: bool) -> str:
    first_tag, first = settled[0]
    last_tag, last = settled[-1]
    first_id, last_id = first.message_id, last.message_id
    ids = f"message_id {first_id!r}" if len(settled) == 1 else f"{first_id!r}..{last_id!r}"
    return (
        f"broker nacked {len(settled)} message(s): delivery tags {first_tag}..{last_tag} "
        f"(multiple={multiple}), {ids}; a nack means the broker did not take them "
        "(e.g. x-overflow=reject-publish on a full queue)"
    )
