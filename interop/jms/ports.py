"""What the parts of a JMS connection need of each other, as small Protocols.

A session owns its consumers, producers, acknowledgement state and listener thread, and
each of them calls the session back; a session calls its connection back. Those calls go
through the Protocols here, so the modules import one way only::

    connection -> session -> consumer, producer, dispatcher, ackstate -> ports
    ports -> completion, delivery, topology, channel, transport, options, selector, messages, acks

`interop.jms.session.Session` implements `ConsumerSession`, `ListenerSession`,
`ProducerSession`; `interop.jms.connection.Connection` implements `SessionConnection`;
`interop.jms.consumer.MessageConsumer` implements `AckConsumer` and `ListenerConsumer`;
`interop.jms.ackstate.AckState` implements `AckPolicy`. Members with a leading underscore
are internal to the package: they are not part of the public API of those classes.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar

from interop.jms.acks import AckBatcher
from interop.jms.channel import ChannelLink
from interop.jms.completion import ProducerWindow
from interop.jms.delivery import Delivery, DeliveryOwner
from interop.jms.destinations import Destination
from interop.jms.groups import GroupTracker
from interop.jms.messages import Message
from interop.jms.options import ConnectionOptions
from interop.jms.selector import Predicate
from interop.jms.topology import Topology
from interop.jms.transport import Transport

__all__ = [
    "AckConsumer",
    "AckPolicy",
    "ConsumerSession",
    "ListenerConsumer",
    "ListenerSession",
    "MessageListener",
    "ProducerSession",
    "SessionConnection",
]

MessageListener = Callable[[Message], None]
"""A message listener as the session calls it (`MessageConsumer.set_message_listener`
also accepts an object with an ``on_message(message)`` method)."""


class AckConsumer(DeliveryOwner, Protocol):
    """What the session's acknowledgement state needs of a consumer."""

    @property
    def no_local(self) -> bool:
        """Skip (ack) messages published on this connection."""
        ...

    @property
    def selector(self) -> Predicate | None:
        """The compiled selector; a miss is acked without reaching the application."""
        ...

    @property
    def batcher(self) -> AckBatcher | None:
        """Its ack batcher (optimizeAcknowledge, DUPS_OK on a topic), or None."""
        ...

    @property
    def groups(self) -> GroupTracker:
        """The message groups it has received (JMSXGroupFirstForConsumer)."""
        ...

    @property
    def _buffer(self) -> deque[Delivery]:
        """Prefetched deliveries not yet seen by the application (arrival appends)."""
        ...

    def _rotate(self) -> None:
        """Re-subscribe under a new consumer tag (the window is full)."""
        ...


class AckPolicy(Protocol):
    """What a consumer needs of its session's acknowledgement state."""

    def register(
        self, consumer: AckConsumer, method: Any, properties: Any, body: bytes
    ) -> Delivery:
        """A delivery arrived (I/O thread): decode it, count it outstanding, buffer it."""
        ...

    def screen(self, consumer: AckConsumer, delivery: Delivery) -> bool:
        """True when the delivery must not reach the application (it is settled here)."""
        ...

    def before_app(self, consumer: AckConsumer, delivery: Delivery) -> None:
        """The application is about to see ``delivery``."""
        ...

    def after_app(
        self, consumer: AckConsumer, delivery: Delivery, failed: bool, now: float
    ) -> None:
        """The application has seen ``delivery`` (receive returned, listener finished)."""
        ...


class ListenerConsumer(Protocol):
    """A consumer as the session's listener thread sees it."""

    @property
    def _listener(self) -> MessageListener | None:
        """The listener to call, or None."""
        ...


_C_contra = TypeVar("_C_contra", contravariant=True)
_L = TypeVar("_L", bound=ListenerConsumer)


class ConsumerSession(Protocol[_C_contra]):
    """What a consumer needs of its session (the type parameter: the consumer's class).

    Every member except ``_begin_receive``, ``_end_receive``, ``_acks_written``,
    ``_failed_over``, ``_set_listener`` and ``_close_consumer`` expects the session's
    condition ``_cond`` held.
    """

    @property
    def _cond(self) -> threading.Condition:
        """The session's condition: guards every piece of session and consumer state."""
        ...

    @property
    def closed(self) -> bool:
        """The session is closed."""
        ...

    @property
    def _started(self) -> bool:
        """The connection is started (messages may reach the application)."""
        ...

    @property
    def _link(self) -> ChannelLink:
        """The session's channel (``basic.get``, re-subscribing)."""
        ...

    @property
    def _acks(self) -> AckPolicy:
        """The session's acknowledgement state."""
        ...

    @property
    def _options(self) -> ConnectionOptions:
        """The connection's options (the redelivery policy)."""
        ...

    def _raise_if_failed(self) -> None:
        """Raise JMSException when the session's channel or connection failed."""
        ...

    def _wait(self, until: float | None) -> None:
        """Wait on ``_cond`` until notified or the monotonic deadline ``until``."""
        ...

    def _begin_receive(self) -> None:
        """A receive starts (raises when a listener is set on the session)."""
        ...

    def _end_receive(self) -> None:
        """A receive ended."""
        ...

    def _failed_over(self) -> bool:
        """After a channel error: True when it was a lost connection that failover has
        recovered (the caller may try again); waits for the reconnection (not held)."""
        ...

    def _acks_written(self) -> None:
        """Wait until the acks the last call queued are written to the socket (not held)."""
        ...

    def _set_listener(self, consumer: _C_contra, listener: MessageListener | None) -> None:
        """Set (or clear) the listener of ``consumer``; starts the listener thread."""
        ...

    def _close_consumer(self, consumer: _C_contra) -> None:
        """Close ``consumer``: flush its acks, cancel it, requeue what it did not hand out."""
        ...


class ListenerSession(Protocol[_L]):
    """What the listener thread (`interop.jms.dispatcher.Dispatcher`) needs of its session."""

    @property
    def _cond(self) -> threading.Condition:
        """The session's condition."""
        ...

    def _next_for_listener(self, now: float) -> tuple[_L, Delivery] | float | None:
        """The next (consumer, delivery) for a listener, or when to look again (a monotonic
        time), or None (nothing to wait for); ``_cond`` held."""
        ...

    def _wait(self, until: float | None) -> None:
        """Wait on ``_cond`` until notified or the monotonic deadline ``until``."""
        ...

    def _listener_done(self, consumer: _L, delivery: Delivery, failed: bool) -> None:
        """The listener returned (``failed``: it raised)."""
        ...


class ProducerSession(Protocol):
    """What a producer needs of its session."""

    @property
    def transacted(self) -> bool:
        """The session is transacted."""
        ...

    @property
    def _options(self) -> ConnectionOptions:
        """The connection's options (useAsyncSend, producerWindowSize)."""
        ...

    def _send(
        self,
        message: Message,
        destination: Destination,
        time_to_live: float,
        *,
        asynchronous: bool = False,
        window: ProducerWindow | None = None,
    ) -> Future[None] | None:
        """Publish ``message`` (its JMS headers set) to ``destination``; asynchronous: the
        publish's future, at once."""
        ...

    def _complete(self, future: Future[None], callback: Callable[[], None]) -> None:
        """Run ``callback`` on the session's completion thread once ``future`` is done,
        after the callbacks of earlier sends."""
        ...


class SessionConnection(Protocol):
    """What a session needs of its connection."""

    @property
    def options(self) -> ConnectionOptions:
        """The connection's options (policies, topic exchange)."""
        ...

    @property
    def connection_id(self) -> str:
        """This connection's id (stamped on topic messages for noLocal)."""
        ...

    @property
    def client_id(self) -> str | None:
        """The JMS client id, or None."""
        ...

    @property
    def started(self) -> bool:
        """True between ``start()`` and ``stop()``."""
        ...

    @property
    def optimized_dispatch(self) -> bool:
        """One non-transacted session so far (durable subscribers use the optimized
        prefetch)."""
        ...

    @property
    def topology(self) -> Topology:
        """Declarations on the connection's admin channel."""
        ...

    @property
    def transport(self) -> Transport:
        """The AMQP connection and its I/O thread."""
        ...

    @property
    def failover(self) -> bool:
        """The connection has a failover URL (losses are recovered, not fatal)."""
        ...

    def _await_transport(self, what: str) -> None:
        """Block while failing over (up to the failover timeout); raises when it fails."""
        ...

    def _durable_in_use(self, name: str) -> bool:
        """True when durable subscription ``name`` has an open consumer on this connection."""
        ...

    def _session_closed(self, session: object) -> None:
        """``session`` closed: forget it."""
        ...
