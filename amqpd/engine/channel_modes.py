"""A channel's publishing mode (sans-IO): plain, confirm or tx, switched at most once.

Theory of operation. A channel starts PLAIN. confirm.select makes it CONFIRM: a
`ConfirmTracker` numbers its publishes from 1 (the channel's publish path tracks each one;
acks and nacks go out at the end of the received chunk, or once the storage batch holding a
persistent message is durable). tx.select makes it TX: the channel buffers publishes and
settlements in a `Transaction`; tx.commit applies them in one synchronous step (so no
consumer can observe half a commit) and answers Commit-Ok at once, or, when something was
journaled, once everything journaled so far is durable (`BatchWaits.commit_ok`);
tx.rollback drops the buffered publishes and gives the settled deliveries back to the
unacked store. Switching from one mode to the other is 406 PRECONDITION_FAILED, as in
RabbitMQ. Part of a `Channel` (amqpd/engine/channel.py), which dispatches these methods
here as it dispatches consumer methods to `ConsumerMethods`.

In a spread vhost (amqpd/model/replica.py) a commit's copies for other workers' queues are
forwarded at commit, each with a `CommitCopy` decision; the commit then waits in
``_commits`` until every copy is settled there (durable when persistent), as RabbitMQ's
tx.commit waits for every queue's confirm, before its own Commit-Ok step above. Commits
finish in order; a copy refused, or its worker lost, fails the commit (541, as a storage
error does): the client must not take it as done.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from pamqp import commands as spec
from pamqp.base import Frame as Method

from amqpd.engine.transaction import BufferedPublish, Transaction
from amqpd.engine.unacked import UnackedStore
from amqpd.model.batches import BatchWaiter
from amqpd.model.broker import Broker
from amqpd.model.queue import Queue
from amqpd.model.vhost import VirtualHost
from amqpd.wire.errors import INTERNAL_ERROR, AMQPError, precondition_failed
from confirms.tracker import ConfirmTracker

__all__ = ["CommitCopy", "ModalChannel", "Mode", "ModeMethods", "RemoteCommit"]


class Mode(enum.Enum):
    """Publishing guarantee mode; changes at most once (plain -> confirm or plain -> tx)."""

    PLAIN = "plain"
    CONFIRM = "confirm"
    TX = "tx"


class _Host(Protocol):
    @property
    def broker(self) -> Broker: ...


class ModalChannel(BatchWaiter, Protocol):
    """What these methods use of their `Channel` (amqpd/engine/channel.py)."""

    mode: Mode
    confirm: ConfirmTracker | None
    tx: Transaction | None
    unacked: UnackedStore

    @property
    def conn(self) -> _Host: ...
    @property
    def vhost(self) -> VirtualHost: ...
    def send_method(self, method: Method) -> None: ...
    def send_if_open(self, method: Method) -> None: ...
    def close_with_error(self, error: AMQPError) -> None: ...
    def route_publish(
        self, publish: BufferedPublish, commit: RemoteCommit | None = None
    ) -> list[Queue] | None: ...
    def resume_deliveries(self) -> None: ...


class RemoteCommit:
    """A tx.commit waiting for its copies on other workers (see the module's docstring)."""

    __slots__ = ("_advance", "failed", "pending")

    def __init__(self, advance: Callable[[], None]) -> None:
        self._advance = advance
        self.pending = 0  # copies not yet settled
        self.failed = False

    def copy(self) -> CommitCopy:
        """The decision of one more copy to wait for."""
        self.pending += 1
        return CommitCopy(self)

    def decided(self, ok: bool) -> None:
        self.pending -= 1
        if not ok:
            self.failed = True
        self._advance()


class CommitCopy:
    """One forwarded publish of a `RemoteCommit` (model/replica.py `Decision`)."""

    __slots__ = ("_commit",)

    def __init__(self, commit: RemoteCommit) -> None:
        self._commit = commit

    def decided(self, ok: bool) -> None:
        self._commit.decided(ok)


class ModeMethods:
    """confirm.select and the tx methods of one channel."""

    def __init__(self, channel: ModalChannel) -> None:
        self._channel = channel
        self._commits: deque[RemoteCommit] = deque()  # waiting for other workers, in order

    def handlers(self) -> dict[int, Callable[[Any], None]]:
        """Method index -> handler, merged into the channel's dispatch table."""
        return {
            spec.Confirm.Select.index: self._on_confirm_select,
            spec.Tx.Select.index: self._on_tx_select,
            spec.Tx.Commit.index: self._on_tx_commit,
            spec.Tx.Rollback.index: self._on_tx_rollback,
        }

    def _on_confirm_select(self, method: spec.Confirm.Select) -> None:
        channel = self._channel
        if channel.mode is Mode.TX:
            raise precondition_failed("cannot switch from tx to confirm mode")
        if channel.mode is not Mode.CONFIRM:
            channel.mode = Mode.CONFIRM
            channel.confirm = ConfirmTracker()
        if not method.nowait:
            channel.send_method(spec.Confirm.SelectOk())

    def _on_tx_select(self, _method: spec.Tx.Select) -> None:
        channel = self._channel
        if channel.mode is Mode.CONFIRM:
            raise precondition_failed("cannot switch from confirm to tx mode")
        channel.mode = Mode.TX
        if channel.tx is None:
            channel.tx = Transaction()
        channel.send_method(spec.Tx.SelectOk())

    def _on_tx_commit(self, _method: spec.Tx.Commit) -> None:
        channel = self._channel
        if channel.tx is None:
            raise precondition_failed("channel is not transactional")
        work = channel.tx.take()
        commit = RemoteCommit(self._advance) if channel.vhost.replica is not None else None
        for publish in work.publishes:
            channel.route_publish(publish, commit)
        broker = channel.conn.broker
        now = broker.clock.now
        for records, kind in work.settlements:
            channel.unacked.settle(records, kind, now)
        if commit is not None and (commit.pending or self._commits):
            self._commits.append(commit)  # its Commit-Ok after the other workers'
        else:
            self._commit_ok()
        channel.resume_deliveries()

    def _commit_ok(self) -> None:
        """Commit-Ok once everything journaled so far (this commit included) is durable."""
        channel = self._channel
        broker = channel.conn.broker
        journal = broker.journal
        waits = broker.batch_waits
        if journal is not None and (journal.pending or waits.has_commit_oks(channel)):
            waits.commit_ok(journal.barrier(), channel)
        else:
            channel.send_if_open(spec.Tx.CommitOk())

    def _advance(self) -> None:
        """Finish the commits whose copies on other workers are all settled, in order."""
        commits = self._commits
        while commits and not commits[0].pending:
            if commits.popleft().failed:
                self._commits.clear()
                self._channel.close_with_error(
                    AMQPError(
                        INTERNAL_ERROR,
                        "tx.commit failed: a copy for another worker's queue was refused "
                        "or that worker was lost",
                        90,
                        20,
                    )
                )
                return
            self._commit_ok()

    def _on_tx_rollback(self, _method: spec.Tx.Rollback) -> None:
        channel = self._channel
        if channel.tx is None:
            raise precondition_failed("channel is not transactional")
        channel.unacked.restore(channel.tx.rollback())
        channel.send_method(spec.Tx.RollbackOk())
