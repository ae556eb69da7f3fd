"""Failover: keeps a JMS connection attached to one of its brokers.

Theory of operation (the failover state machine)
------------------------------------------------
States::

    (start) --attach--> CONNECTED --lost--> RECONNECTING --attach + resume--> CONNECTED
                                                 |
                                                 +--attempts exhausted--> FAILED
    any state --close()--> CLOSED

*Attach* runs passes over the brokers (`FailoverPolicy.order`: shuffled unless
``randomize=false``, the broker just lost last, the primary first with ``priorityBackup``),
pausing between passes as `FailoverPolicy.delays` says, until one AMQP connection opens or
the pass limit (``startupMaxReconnectAttempts`` for the first connection,
``maxReconnectAttempts`` afterwards) is reached. The first attach runs on the caller's
thread (``create_connection`` blocks, as ActiveMQ's start does); later ones on a reconnect
thread.

*Lost* comes from the dead transport's I/O thread, after pika has delivered everything it
read from that socket: the connection's ``interrupt`` callback runs right there, so no stale
delivery can slip in after the sessions forgot theirs (delivery tags are per channel and
mean nothing on the next connection). Only the current transport in state CONNECTED counts;
a stale or deliberately closed transport is ignored.

*Resume* (the connection's callback) reopens every session's channel, consumers and
declarations on the new transport. If it fails (the new broker went away as well, or
refused a declaration) the transport is dropped, the sessions are interrupted again and the
next pass follows. Only when resume succeeded *and* the transport is still open does the
state become CONNECTED (under the lock that ``lost`` takes, so a loss during resume is never
missed).

Senders wait in `Reconnector.wait_connected` (bounded by the failover ``timeout``).
Listeners registered with ``Connection.add_transport_listener`` hear
``transport_interrupted()`` when a reconnect starts and ``transport_resumed()`` when it
succeeded (on the reconnect thread). With ``priorityBackup`` a watcher thread, while
connected to a backup, tries the primary after each delay of the reconnect schedule and
switches to it (interrupt, resume) as soon as it answers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from enum import Enum
from typing import Final
from urllib.parse import urlsplit, urlunsplit

from interop.jms.errors import IllegalStateException, JMSException
from interop.jms.failover import FailoverPolicy
from interop.jms.transport import Transport

__all__ = ["LinkState", "Reconnector", "redacted"]

log = logging.getLogger(__name__)

_TRIED_SHOWN: Final = 3


def redacted(uri: str) -> str:
    """``uri`` without its password (for logs and error messages)."""
    parts = urlsplit(uri)
    if parts.password is None:
        return uri
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))


class LinkState(Enum):
    """Where the connection is in the failover state machine."""

    CONNECTING = "connecting"
    CONNECTED = "connected"
    RECONNECTING = "reconnecting"
    FAILED = "failed"
    CLOSED = "closed"


class Reconnector:
    """The failover state machine of one connection (see the module doc)."""

    def __init__(
        self,
        policy: FailoverPolicy,
        *,
        connect: Callable[[int], Transport],
        interrupt: Callable[[], None],
        resume: Callable[[Transport], None],
        give_up: Callable[[JMSException], None],
        notify: Callable[[str], None],
    ) -> None:
        """Prepare (``attach_first`` connects).

        Args:
            policy: The failover options.
            connect: Opens an AMQP connection to ``policy.uris[index]`` (raises JMSException).
            interrupt: The sessions forget every delivery (called on the dead I/O thread, or
                on the reconnect thread once the transport is dropped).
            resume: Re-creates the sessions' channels, consumers and declarations.
            give_up: Reconnecting failed for good: fail the sessions, tell the application.
            notify: ``"transport_interrupted"`` / ``"transport_resumed"`` for the listeners.
        """
        self.policy = policy
        self._connect = connect
        self._interrupt = interrupt
        self._resume = resume
        self._give_up = give_up
        self._notify = notify
        self._cond = threading.Condition()
        self.state = LinkState.CONNECTING
        self.error: JMSException | None = None
        self.current: Transport | None = None
        self.index: int | None = None

    # -- attaching ---------------------------------------------------------------------------------
    def attach_first(self) -> Transport:
        """Connect for the first time (caller's thread).

        Raises:
            JMSException: no broker answered within ``startupMaxReconnectAttempts`` passes.
        """
        transport, index = self._attach(startup=True, failed=None)
        with self._cond:
            self.current, self.index, self.state = transport, index, LinkState.CONNECTED
        self._watch_primary()
        return transport

    def _attach(self, *, startup: bool, failed: int | None) -> tuple[Transport, int]:
        limit = self.policy.passes(startup)
        delays = self.policy.delays()
        last: dict[str, str] = {}
        passes = 0
        while True:
            for index in self.policy.order(failed):
                if self.state is LinkState.CLOSED:
                    raise IllegalStateException("The Connection is closed")
                try:
                    return self._connect(index), index
                except JMSException as exc:
                    last[redacted(self.policy.uris[index])] = str(exc)
            passes += 1
            if limit is not None and passes >= limit:
                tried = "; ".join(f"{uri}: {why}" for uri, why in list(last.items())[:_TRIED_SHOWN])
                raise JMSException(
                    f"failover: no broker reachable after {passes} attempt(s) over "
                    f"{len(self.policy.uris)} broker(s) ({tried}); raise maxReconnectAttempts "
                    "or check the brokers"
                )
            self._pause(next(delays))

    def _pause(self, seconds: float) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self.state is LinkState.CLOSED, seconds)

    # -- losing and regaining the broker -----------------------------------------------------------
    def lost(self, transport: Transport, error: JMSException) -> bool:
        """The transport died (its I/O thread). True when a reconnect starts."""
        with self._cond:
            if transport is not self.current or self.state is not LinkState.CONNECTED:
                return False
            self.state = LinkState.RECONNECTING
            failed = self.index
        log.warning("connection to %s lost (%s); failing over", self._uri(failed), error)
        self._interrupt()
        threading.Thread(
            target=self._reconnect, args=(failed,), name="jms-failover", daemon=True
        ).start()
        return True

    def _reconnect(self, failed: int | None) -> None:
        self._notify("transport_interrupted")
        delays = self.policy.delays()
        while True:
            try:
                transport, index = self._attach(startup=False, failed=failed)
            except JMSException as exc:
                with self._cond:
                    if self.state is LinkState.CLOSED:
                        return
                    self.state = LinkState.FAILED
                    self.error = exc
                    self._cond.notify_all()
                log.error("%s", exc)
                self._give_up(exc)
                return
            if self._adopt(transport, index):
                break
            failed = index
            self._pause(next(delays))
        log.warning("failed over to %s", self._uri(index))
        self._notify("transport_resumed")
        self._watch_primary()

    def _adopt(self, transport: Transport, index: int) -> bool:
        """Resume the sessions on ``transport``; True once it is the current one."""
        try:
            self._resume(transport)
        except JMSException as exc:
            log.warning("resuming on %s failed (%s); trying again", self._uri(index), exc)
            transport.abort()
            self._interrupt()
            return False
        with self._cond:
            if self.state is LinkState.CLOSED:
                transport.close()
                return True
            adopted = transport.is_open
            if adopted:
                self.current, self.index, self.state = transport, index, LinkState.CONNECTED
                self._cond.notify_all()
        if not adopted:  # lost while resuming: forget what arrived on it, try again
            self._interrupt()
        return adopted

    def _uri(self, index: int | None) -> str:
        return "?" if index is None else redacted(self.policy.uris[index])

    # -- priority backup ---------------------------------------------------------------------------
    def _watch_primary(self) -> None:
        if not self.policy.priority_backup or self.index in (None, 0):
            return
        threading.Thread(target=self._back_to_primary, name="jms-priority", daemon=True).start()

    def _back_to_primary(self) -> None:
        delays = self.policy.delays()
        while True:
            self._pause(next(delays))
            with self._cond:
                if self.state is not LinkState.CONNECTED or self.index == 0:
                    return
            try:
                primary = self._connect(0)
            except JMSException:
                continue
            with self._cond:
                old = self.current
                if self.state is not LinkState.CONNECTED or old is None:
                    primary.close()
                    return
                self.state = LinkState.RECONNECTING
            log.warning("the primary broker %s is back; moving to it", self._uri(0))
            old.abort()
            self._interrupt()
            self._notify("transport_interrupted")
            if self._adopt(primary, 0):
                self._notify("transport_resumed")
                return
            self._reconnect(0)  # the primary went away again: ordinary failover
            return

    # -- waiting and closing -----------------------------------------------------------------------
    def wait_connected(self, what: str) -> None:
        """Block while reconnecting, up to the failover ``timeout``.

        Raises:
            JMSException: the timeout passed, or reconnecting failed for good.
            IllegalStateException: the connection was closed meanwhile.
        """
        timeout = self.policy.timeout
        with self._cond:
            self._cond.wait_for(lambda: self.state is not LinkState.RECONNECTING, timeout)
            state = self.state
        if state is LinkState.CONNECTED:
            return
        if state is LinkState.RECONNECTING:
            assert timeout is not None
            raise JMSException(
                f"Failover timeout of {timeout * 1000:g} ms reached: {what} was not sent "
                "because no broker is reachable (the connection keeps reconnecting)"
            )
        if state is LinkState.FAILED:
            raise JMSException(f"{what} failed: {self.error}")
        raise IllegalStateException("The Connection is closed")

    @property
    def reconnecting(self) -> bool:
        """True between a loss and the end of the reconnect (success or failure)."""
        return self.state is LinkState.RECONNECTING

    def close(self) -> None:
        """Stop reconnecting (Connection.close)."""
        with self._cond:
            self.state = LinkState.CLOSED
            self._cond.notify_all()
