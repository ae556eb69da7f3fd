"""A JMS message consumer: receive / receive_no_wait / iteration, or a message listener.

Theory of operation (consumer prefetch and ack batching)
--------------------------------------------------------
Prefetch N > 0: the consumer subscribes with ``basic.qos(N, global=false)`` +
``basic.consume``; the broker pushes up to N unacked messages, which the I/O thread puts in
``_buffer`` (and registers with the session as outstanding). Prefetch 0 is pull: no
subscription; each receive sends ``basic.get`` (polling with a 5 ms..100 ms back-off until
its timeout, since AMQP has no long-poll), and a listener is refused.

Dispatch order: the ``_redelivery`` queue (local redeliveries, sorted by delivery tag, each
ready at its own time) comes before ``_buffer``. While its head waits for its redelivery
delay the consumer dispatches nothing (ActiveMQ's blocking redelivery, which keeps order)
unless the policy says ``non_blocking_redelivery``.

Acks per message are decided by the session's mode (see `interop.jms.session`); two
consumer-level helpers carry the batching state:

- ``batcher`` (`AckBatcher`): optimizeAcknowledge in AUTO (cumulative ack at 65 % of N, or
  the first message consumed ``optimize_acknowledge_timeout`` after the last ack), and
  DUPS_OK on a topic (50 % of N). Flushed when the consumer closes.
- ``window`` (`WindowTracker`): CLIENT / INDIVIDUAL / transacted. After ceil(N / 2)
  messages consumed under the current AMQP consumer tag without an ack, the consumer
  re-subscribes under a new tag (``_rotate``) so the broker can send N more: reading a batch
  larger than the prefetch and then acknowledging once never stalls.

Exclusivity: ``receive`` raises IllegalStateException when any consumer of the session has
a listener; setting a listener raises when a receive is outstanding on the session.
"""

from __future__ import annotations

import bisect
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

from interop.jms.acks import AckBatcher, WindowTracker
from interop.jms.delivery import Delivery
from interop.jms.destinations import Destination
from interop.jms.errors import IllegalStateException, JMSException
from interop.jms.groups import GroupTracker
from interop.jms.messages import Message
from interop.jms.ports import ConsumerSession, MessageListener
from interop.jms.selector import Predicate

__all__ = ["MessageConsumer", "MessageListener"]

_PULL_FIRST_WAIT = 0.005
_PULL_MAX_WAIT = 0.1


def _as_callable(listener: Any) -> MessageListener:
    if callable(listener):
        return listener  # type: ignore[no-any-return]
    on_message = getattr(listener, "on_message", None)
    if callable(on_message):
        return on_message  # type: ignore[no-any-return]
    raise TypeError("a message listener is a callable or has an on_message(message) method")


class MessageConsumer:
    """Receives messages from a queue or a topic subscription (JMS ``MessageConsumer``).

    Create it with `Session.create_consumer` or `Session.create_durable_subscriber`. It is a
    context manager and an iterator (``for message in consumer``: receive() until closed).
    """

    def __init__(
        self,
        session: ConsumerSession[MessageConsumer],
        destination: Destination,
        queue: str,
        prefetch: int,
        *,
        tag: str,
        selector: Predicate | None,
        no_local: bool,
        exclusive: bool,
        arguments: dict[str, Any] | None,
        batcher: AckBatcher | None,
        window: WindowTracker | None,
        temporary_queue: bool,
    ) -> None:
        self._session = session
        self.destination = destination
        self.queue = queue
        self.prefetch = prefetch
        self.selector = selector
        self.no_local = no_local
        self.exclusive = exclusive
        self.arguments = arguments
        self.batcher = batcher
        self.window = window
        self.temporary_queue = temporary_queue
        self.groups = GroupTracker()  # JMSXGroupFirstForConsumer (interop/jms/groups.py)
        self.subscription_name: str | None = None
        self.single_active_consumer = False
        self.closed = False
        self._tag_base = tag
        self._tag_seq = 0
        self._plain_tag = f"{tag}.0"
        self._buffer: deque[Delivery] = deque()
        self._redelivery: list[Delivery] = []
        self._listener: MessageListener | None = None
        self._listener_object: Any = None

    # -- public API ----------------------------------------------------------------------------
    def __enter__(self) -> MessageConsumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[Message]:
        while True:
            message = self._receive(None, closed_ok=True)
            if message is None:
                return
            yield message

    @property
    def current_tag(self) -> str:
        """The AMQP consumer tag in use."""
        return self.window.current_tag if self.window is not None else self._plain_tag

    @property
    def message_listener(self) -> Any:
        """The listener (a callable or an object with ``on_message``), or None."""
        return self._listener_object

    @message_listener.setter
    def message_listener(self, listener: Any) -> None:
        self.set_message_listener(listener)

    def set_message_listener(self, listener: Any) -> None:
        """Deliver messages asynchronously to ``listener`` on the session's thread.

        AUTO / DUPS_OK / INDIVIDUAL: a listener that raises gets the message again after the
        redelivery delay (counter + 1; beyond the maximum, the dead-letter queue). CLIENT and
        transacted: the exception is logged and the next message is delivered.

        Raises:
            JMSException: the consumer's prefetch is 0 (pull consumers cannot listen).
            IllegalStateException: a receive is outstanding on the session.
        """
        if listener is not None and self.prefetch == 0:
            raise JMSException(
                "Illegal prefetch size of zero. This setting is not supported for "
                "asynchronous consumers please set a value of at least 1"
            )
        function = _as_callable(listener) if listener is not None else None
        self._session._set_listener(self, function)
        self._listener_object = listener

    def receive(self, timeout: float | None = None) -> Message | None:
        """The next message, waiting up to ``timeout`` seconds.

        ``receive()`` / ``receive(None)`` waits until a message arrives or the consumer is
        closed; ``receive(0)`` does not wait (unlike JMS, where 0 means forever).

        Returns:
            The message, or None on timeout or when the consumer is closed while the
            receive waits.

        Raises:
            IllegalStateException: the consumer (or its session) is already closed, or a
                listener is set on this session.
            JMSException: the session or connection failed.
        """
        return self._receive(timeout, closed_ok=False)

    def _receive(self, timeout: float | None, *, closed_ok: bool) -> Message | None:
        session = self._session
        if self.closed or session.closed:
            if closed_ok:
                return None
            raise IllegalStateException("The Consumer is closed")
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        session._begin_receive()
        try:
            message = self._pull(deadline) if self.prefetch == 0 else self._push(deadline)
        finally:
            session._end_receive()
        if message is not None:
            session._acks_written()
        return message

    def receive_no_wait(self) -> Message | None:
        """The next message if one is here already, else None (``receive(0)``)."""
        return self.receive(0)

    def close(self) -> None:
        """Stop receiving: pending optimized acks are sent, prefetched messages go back to
        the queue, a non-durable subscription's queue is deleted."""
        self._session._close_consumer(self)

    # -- receiving ---------------------------------------------------------------------------------
    def _deliver(self, delivery: Delivery) -> Message:
        session = self._session
        session._acks.before_app(self, delivery)
        session._acks.after_app(self, delivery, False, time.monotonic())
        return delivery.message

    def _push(self, deadline: float | None) -> Message | None:
        session = self._session
        with session._cond:
            while True:
                session._raise_if_failed()
                if self.closed or session.closed:
                    return None
                now = time.monotonic()
                wake = None
                if session._started:
                    delivery, wake = self._take(now)
                    if delivery is not None:
                        return self._deliver(delivery)
                if deadline is not None and now >= deadline:
                    return None
                until = deadline if wake is None else min(wake, deadline or wake)
                session._wait(until)

    def _pull(self, deadline: float | None) -> Message | None:
        session = self._session
        pause = _PULL_FIRST_WAIT
        while True:
            with session._cond:
                session._raise_if_failed()
                if self.closed or session.closed:
                    return None
                now = time.monotonic()
                if not session._started:
                    if deadline is not None and now >= deadline:
                        return None
                    session._wait(deadline)
                    continue
                delivery, wake = self._take(now)
                if delivery is not None:
                    return self._deliver(delivery)
                if wake is not None and not self._non_blocking:
                    if deadline is not None and now >= deadline:
                        return None
                    session._wait(wake if deadline is None else min(wake, deadline))
                    continue
            try:
                got = session._link.get(self.queue, self._on_get)
            except JMSException:
                if self.closed or session.closed:
                    return None  # closed while the basic.get was in flight
                if session._failed_over():
                    continue
                raise
            if got is not None:
                pause = _PULL_FIRST_WAIT
                continue
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return None
            with session._cond:
                until = now + pause if deadline is None else min(now + pause, deadline)
                session._wait(until)
            pause = min(pause * 2, _PULL_MAX_WAIT)

    @property
    def _non_blocking(self) -> bool:
        return self._session._options.redelivery_policy.non_blocking_redelivery

    def _take(self, now: float) -> tuple[Delivery | None, float | None]:
        """Next deliverable message (session lock held), else when to look again."""
        while True:
            wake = None
            delivery = None
            if self._redelivery:
                head = self._redelivery[0]
                if head.ready_at <= now:
                    delivery = self._redelivery.pop(0)
                else:
                    wake = head.ready_at
                    if not self._non_blocking:
                        return None, wake
            if delivery is None and self._buffer:
                delivery = self._buffer.popleft()
            if delivery is None:
                return None, wake
            if delivery.settled or self._session._acks.screen(self, delivery):
                continue
            return delivery, None

    def _push_redelivery(self, delivery: Delivery) -> None:
        bisect.insort(self._redelivery, delivery, key=lambda d: d.tag)

    def _drain(self) -> list[Delivery]:
        """Everything not yet handed to the application (consumer close)."""
        pending = [*self._redelivery, *self._buffer]
        self._redelivery.clear()
        self._buffer.clear()
        return pending

    # -- I/O thread callbacks ---------------------------------------------------------------------
    def _on_message(self, _channel: Any, method: Any, properties: Any, body: bytes) -> None:
        self._session._acks.register(self, method, properties, body)

    def _on_get(self, method: Any, properties: Any, body: bytes) -> Delivery:
        return self._session._acks.register(self, method, properties, body)

    # -- failover ----------------------------------------------------------------------------------
    def _forget(self) -> None:
        """The connection was lost (session lock held): drop what was buffered; the broker
        redelivers it on the next connection."""
        self._buffer.clear()
        self._redelivery.clear()
        self.groups.reset()
        if self.batcher is not None:
            self.batcher.take_all()

    def _restart(self, queue: str) -> None:
        """Failover (session lock held): consume ``queue`` under a fresh consumer tag."""
        self.queue = queue
        self._tag_seq += 1
        tag = f"{self._tag_base}.{self._tag_seq}"
        if self.window is not None:
            self.window.start_rotation(tag)
            self.window.rotation_done()
        else:
            self._plain_tag = tag

    # -- window ------------------------------------------------------------------------------------
    def _rotate(self) -> None:
        """Re-subscribe under a new tag (session lock held); see the module doc."""
        window = self.window
        if window is None:
            return
        self._tag_seq += 1
        new_tag = f"{self._tag_base}.{self._tag_seq}"
        old_tag = window.start_rotation(new_tag)
        self._session._link.resubscribe(
            self.queue,
            self._on_message,
            old_tag=old_tag,
            new_tag=new_tag,
            prefetch=self.prefetch,
            exclusive=self.exclusive,
            arguments=self.arguments,
            on_done=self._rotation_done,
        )

    def _rotation_done(self) -> None:
        with self._session._cond:
            if self.window is not None:
                self.window.rotation_done()
