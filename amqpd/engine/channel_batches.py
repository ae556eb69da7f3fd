"""What an open channel does when a storage batch it waits for is written or fails (the
model's `BatchWaiter`, amqpd/model/batches.py): publisher confirms of persistent messages
and tx.commit-oks are held until the batch holding them is durable (ARCHITECTURE principle
4, "a confirm is a promise"). A confirm whose message also has copies on other workers (a
spread vhost) is not settled here: its local part goes to the join of every copy
(engine/spread_publish.py `settle_joined`), which decides it.
"""

from __future__ import annotations

from typing import Any, Protocol

from pamqp import commands as spec
from pamqp.base import Frame as Method

from amqpd.engine.spread_publish import settle_joined
from amqpd.model.replica import Decision
from amqpd.model.vhost import VirtualHost
from amqpd.wire.errors import INTERNAL_ERROR, AMQPError
from confirms.tracker import ConfirmTracker


class _Host(Protocol):
    def confirms_pending(self, channel: Any) -> None: ...
    def flush_confirms(self) -> None: ...


class BatchChannel(Protocol):
    """What this module uses of a `Channel` (amqpd/engine/channel.py)."""

    vhost: VirtualHost
    confirm: ConfirmTracker | None
    joined: dict[int, Decision]

    @property
    def conn(self) -> _Host: ...
    def send_method(self, method: Method) -> None: ...
    def close_with_error(self, error: AMQPError) -> None: ...


def confirm_written(channel: BatchChannel, confirms: list[int], commit_oks: int) -> None:
    """The batch is durable: ack ``confirms``, send the commit-oks."""
    if channel.joined and confirms:
        confirms = settle_joined(channel.vhost, channel.joined, confirms, True)
    if confirms and channel.confirm is not None:
        channel.confirm.ack(confirms)
        channel.conn.confirms_pending(channel)
    for _ in range(commit_oks):
        channel.send_method(spec.Tx.CommitOk())
    channel.conn.flush_confirms()


def refuse_unwritten(
    channel: BatchChannel, confirms: list[int], commit_oks: int, error: Exception
) -> None:
    """The batch could not be written: nack ``confirms`` and fail a tx.commit waiting on
    it (the broker cannot take responsibility for those)."""
    if channel.joined and confirms:
        confirms = settle_joined(channel.vhost, channel.joined, confirms, False)
    if confirms and channel.confirm is not None:
        for seq in confirms:
            channel.confirm.reject(seq)
        channel.conn.confirms_pending(channel)
        channel.conn.flush_confirms()
    if commit_oks:
        channel.close_with_error(
            AMQPError(INTERNAL_ERROR, f"tx.commit failed: storage error: {error}", 90, 20)
        )
