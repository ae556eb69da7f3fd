"""Publisher-confirm bookkeeping for one channel: pure, no sockets, time passed in.

Delivery tags are 1, 2, 3… in publish order on a confirm channel. The broker settles them with
``basic.ack`` / ``basic.nack``, singly or ``multiple`` (every outstanding tag up to and
including the given one). The window bounds how many may be outstanding; the first failure
(a nack, a return, a confirm timeout, a protocol violation) is kept and ends publishing.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from interop.spark.errors import BrokerNacked, ConfirmTimeout, MessageReturned, PublishError

__all__ = ["ConfirmWindow", "WindowStats"]


@dataclass(slots=True)
class WindowStats:
    """Counters of one channel's publishing.

    Attributes:
        published: Messages handed to ``basic_publish``.
        acked: Messages the broker acked.
        nacked: Messages the broker nacked.
        returned: Messages returned as unroutable (``basic.return``).
        bytes: Body bytes published.
        max_outstanding: Most unconfirmed messages at any time.
        first_message_id: ``message_id`` of the first message, if any.
        last_message_id: ``message_id`` of the last message, if any.
    """

    published: int = 0
    acked: int = 0
    nacked: int = 0
    returned: int = 0
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
        self._outstanding: OrderedDict[int, str | None] = OrderedDict()
        self._last_progress = 0.0

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

    def published(self, size: int, message_id: str | None, now: float) -> int:
        """Record a ``basic_publish`` and return its delivery tag.

        Args:
            size: Body length in bytes.
            message_id: The message's ``message_id`` property, for reports and errors.
            now: Monotonic clock reading.
        """
        stats = self.stats
        stats.published += 1
        stats.bytes += size
        tag = stats.published
        if not self._outstanding:
            self._last_progress = now
        self._outstanding[tag] = message_id
        stats.max_outstanding = max(stats.max_outstanding, len(self._outstanding))
        if tag == 1:
            stats.first_message_id = message_id
        stats.last_message_id = message_id
        return tag

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
        settled: list[tuple[int, str | None]] = []
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
                f"which is not outstanding (published {self.stats.published})"
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

    def check_timeout(self, now: float) -> None:
        """Record a ``ConfirmTimeout`` if confirms made no progress for too long."""
        if self._outstanding and now - self._last_progress >= self.confirm_timeout:
            first = next(iter(self._outstanding))
            last = next(reversed(self._outstanding))
            self.fail(
                ConfirmTimeout(
                    f"no publisher confirm for {self.confirm_timeout * 1000:.0f} ms with "
                    f"{len(self._outstanding)} message(s) outstanding (delivery tags "
                    f"{first}..{last} of {self.stats.published} published)"
                )
            )


def _nack_text(settled: list[tuple[int, str | None]], multiple: bool) -> str:
    first_tag, first_id = settled[0]
    last_tag, last_id = settled[-1]
    ids = f"message_id {first_id!r}" if len(settled) == 1 else f"{first_id!r}..{last_id!r}"
    return (
        f"broker nacked {len(settled)} message(s): delivery tags {first_tag}..{last_tag} "
        f"(multiple={multiple}), {ids}; a nack means the broker did not take them "
        "(e.g. x-overflow=reject-publish on a full queue)"
    )
