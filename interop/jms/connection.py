"""``ConnectionFactory`` and ``Connection``.

A connection is one AMQP connection (pika ``SelectConnection`` on its own I/O thread), an
admin channel for declarations, and one channel per session. As in JMS, a new connection is
*stopped*: messages are buffered but not delivered to ``receive`` or listeners until
``start()``.
"""

from __future__ import annotations

import copy
import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any

from interop.jms.channel import open_channel
from interop.jms.constants import AckMode
from interop.jms.errors import ConfigurationError, IllegalStateException, JMSException
from interop.jms.failover import FailoverPolicy, is_failover, parse_failover
from interop.jms.options import (
    DEFAULT_URL,
    ConnectionOptions,
    parse_url,
    pika_parameters,
    split_jms_query,
)
from interop.jms.policies import (
    DeadLetterStrategy,
    PrefetchPolicy,
    RedeliveryPolicy,
    SharedDeadLetterStrategy,
)
from interop.jms.reconnect import Reconnector
from interop.jms.session import Session
from interop.jms.topology import Topology
from interop.jms.transport import Transport

__all__ = ["Connection", "ConnectionFactory"]

log = logging.getLogger(__name__)

_DEFAULT: Any = object()
_JMS_KEYS_IN_CONSTRUCTOR = (
    "jms.* URL keys are read by ConnectionFactory.from_url(url), not the constructor"
)


class ConnectionFactory:
    """Creates connections with ActiveMQ-compatible client settings.

    Keyword arguments use snake_case and seconds; `from_url` reads ActiveMQ's ``jms.*`` URL
    keys (milliseconds). Example::

        factory = ConnectionFactory("amqp://guest:guest@localhost:5672/%2F",
                                    optimize_acknowledge=True,
                                    prefetch_policy=PrefetchPolicy(queue_prefetch=10))
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        client_id: str | None = None,
        prefetch_policy: PrefetchPolicy | None = None,
        redelivery_policy: RedeliveryPolicy | None = None,
        optimize_acknowledge: bool = False,
        optimize_acknowledge_timeout: float = 0.3,
        optimized_ack_scheduled_ack_interval: float = 0.0,
        dead_letter_strategy: DeadLetterStrategy | None = _DEFAULT,
        topic_exchange: str = "amq.topic",
        connect_timeout: float = 10.0,
        use_async_send: bool = False,
        producer_window_size: int = 0,
        send_acks_async: bool = True,
    ) -> None:
        """Create a factory.

        Args:
            url: ``amqp[s]://user:password@host:port/vhost`` (pika query keys allowed;
                ``jms.*`` keys only through `from_url`).
            client_id: JMS client id (needed for durable subscribers); unique per broker.
            prefetch_policy: Default ``PrefetchPolicy()`` (queue 1000, topic 32767, …).
            redelivery_policy: Default ``RedeliveryPolicy()`` (6 redeliveries, 1 s delay).
            optimize_acknowledge: Cumulative acks at 65 % of the prefetch (AUTO sessions).
            optimize_acknowledge_timeout: Seconds (default 0.3; 0 disables the time rule).
            optimized_ack_scheduled_ack_interval: Seconds between forced flushes (0 = off).
            dead_letter_strategy: Default ``SharedDeadLetterStrategy()`` (``ActiveMQ.DLQ``);
                None declares queues without dead-letter arguments.
            topic_exchange: AMQP topic exchange for JMS topics (default ``amq.topic``).
            connect_timeout: Seconds to wait for the AMQP connection to open.
            use_async_send: Persistent sends outside a transaction return without waiting
                for the confirm (ActiveMQ's ``useAsyncSend``).
            producer_window_size: Unconfirmed bytes per producer before an asynchronous
                send blocks (0 = unlimited; ActiveMQ's ``producerWindowSize``).
            send_acks_async: False: acknowledging waits until the broker has processed the
                ack, not only until it is written (ActiveMQ's ``sendAcksAsync``).

        Raises:
            ConfigurationError: a bad value, or ``jms.*`` keys in ``url``.
        """
        self.failover: FailoverPolicy | None = None
        urls = [url]
        if is_failover(url):
            self.failover, jms_query = parse_failover(url)
            if jms_query:
                raise ConfigurationError(_JMS_KEYS_IN_CONSTRUCTOR)
            urls = list(self.failover.uris)
        self._endpoints = []
        for each in urls:
            pika_url, url_options = parse_url(each)
            if url_options:
                raise ConfigurationError(_JMS_KEYS_IN_CONSTRUCTOR)
            self._endpoints.append(pika_parameters(pika_url))
        self.url = url if self.failover is not None else pika_url
        self.options = ConnectionOptions(
            client_id=client_id,
            prefetch_policy=prefetch_policy if prefetch_policy is not None else PrefetchPolicy(),
            redelivery_policy=(
                redelivery_policy if redelivery_policy is not None else RedeliveryPolicy()
            ),
            optimize_acknowledge=optimize_acknowledge,
            optimize_acknowledge_timeout=optimize_acknowledge_timeout,
            optimized_ack_scheduled_ack_interval=optimized_ack_scheduled_ack_interval,
            dead_letter_strategy=(
                SharedDeadLetterStrategy()
                if dead_letter_strategy is _DEFAULT
                else dead_letter_strategy
            ),
            topic_exchange=topic_exchange,
            use_async_send=use_async_send,
            producer_window_size=producer_window_size,
            send_acks_async=send_acks_async,
        )
        if connect_timeout <= 0:
            raise ConfigurationError("connect_timeout must be > 0 seconds")
        self.connect_timeout = connect_timeout

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> ConnectionFactory:
        """A factory from an ActiveMQ-style URL.

        ``amqp://guest:guest@host:5672/%2F?jms.optimizeAcknowledge=true&jms.prefetchPolicy.all=10``
        Times in ``jms.*`` keys are milliseconds. Keyword arguments are accepted as in the
        constructor; an option given both ways is an error.

        Raises:
            ConfigurationError: an unknown ``jms.*`` key (or pika key), a bad value, or an
                option given twice.
        """
        if is_failover(url):
            head, _sep, query = url.partition(")?")
            rest, url_options = split_jms_query(query)
            pika_url = f"{head})?{rest}" if rest else (f"{head})" if _sep else head)
        else:
            pika_url, url_options = parse_url(url)
        twice = sorted(set(url_options) & set(kwargs))
        if twice:
            raise ConfigurationError(f"option(s) given in the URL and as keywords: {twice}")
        return cls(pika_url, **url_options, **kwargs)

    def create_connection(
        self, username: str | None = None, password: str | None = None
    ) -> Connection:
        """Open a connection (stopped: call ``start()`` to receive).

        Raises:
            JMSException: the broker cannot be reached or refused the login.
            InvalidClientIDException: the client id is in use.
        """
        endpoints = [copy.copy(parameters) for parameters in self._endpoints]
        if username is not None or password is not None:
            import pika

            for parameters in endpoints:
                parameters.credentials = pika.PlainCredentials(username or "", password or "")
        return Connection(
            endpoints, copy.deepcopy(self.options), self.connect_timeout, self.failover
        )


class Connection:
    """An open JMS connection; a context manager (closed on exit)."""

    def __init__(
        self,
        endpoints: list[Any],
        options: ConnectionOptions,
        timeout: float,
        failover: FailoverPolicy | None = None,
    ) -> None:
        self.options = options
        self.connection_id = f"ID:{uuid.uuid4()}"
        self.exception_listener: Callable[[JMSException], None] | None = None
        self._lock = threading.Lock()
        self._sessions: list[Session] = []
        self._sessions_created = 0
        self._started = False
        self._closed = False
        self._client_id: str | None = None
        self._endpoints = endpoints
        self._timeout = timeout
        self._transport_listeners: list[Any] = []
        self.optimized_dispatch = True
        self._reconnector: Reconnector | None = None
        if failover is None:
            self.transport = self._open(0)
        else:
            self._reconnector = Reconnector(
                failover,
                connect=self._open,
                interrupt=self._interrupt_sessions,
                resume=self._resume,
                give_up=self._give_up,
                notify=self._notify_transport_listeners,
            )
            self.transport = self._reconnector.attach_first()
        self.topology = Topology(
            self.transport, options.dead_letter_strategy, options.topic_exchange
        )
        try:
            self.topology.ensure_topic_exchange()
            if options.client_id is not None:
                self.client_id = options.client_id
        except BaseException:
            self.transport.close()
            raise

    def _open(self, index: int) -> Transport:
        """Open an AMQP connection to endpoint ``index`` (raises JMSException)."""
        opened: list[Transport] = []
        transport = Transport(
            self._endpoints[index],
            self.connection_id[3:11],
            lambda error: self._connection_lost(opened[0], error),
        )
        opened.append(transport)
        transport.start(self._timeout)
        return transport

    # -- context manager -------------------------------------------------------------------------
    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- client id ---------------------------------------------------------------------------------
    @property
    def client_id(self) -> str | None:
        """The JMS client id, or None."""
        return self._client_id

    @client_id.setter
    def client_id(self, value: str) -> None:
        """Set the client id once, before the first session.

        Raises:
            IllegalStateException: already set, or a session exists.
            InvalidClientIDException: another connection uses this id.
        """
        if self._client_id is not None:
            raise IllegalStateException(f"the clientID is already set to {self._client_id!r}")
        if self._sessions_created:
            raise IllegalStateException("setClientID must be called before creating a session")
        if not value:
            raise ConfigurationError("client id must not be empty")
        self.topology.lock_client_id(value)
        self._client_id = value

    # -- sessions ----------------------------------------------------------------------------------
    def create_session(
        self, transacted: bool = False, ack_mode: AckMode | int = AckMode.AUTO_ACKNOWLEDGE
    ) -> Session:
        """Create a session on its own channel.

        Args:
            transacted: True for a transacted session (``ack_mode`` is then ignored).
            ack_mode: One of `AckMode` (or its int value).

        Raises:
            IllegalStateException: the connection is closed.
        """
        self._check_open()
        mode = AckMode.SESSION_TRANSACTED if transacted else AckMode(ack_mode)
        link = open_channel(self.transport)
        try:
            if mode is AckMode.SESSION_TRANSACTED:
                link.tx_select()
            else:
                link.confirm_select()
        except BaseException:
            link.close()
            raise
        session = Session(self, link, mode)
        with self._lock:
            self._sessions_created += 1
            if self._sessions_created > 1 or mode is AckMode.SESSION_TRANSACTED:
                self.optimized_dispatch = False
            self._sessions.append(session)
        return session

    def _session_closed(self, session: object) -> None:
        with self._lock:
            self._sessions = [known for known in self._sessions if known is not session]

    def _durable_in_use(self, name: str) -> bool:
        with self._lock:
            sessions = list(self._sessions)
        return any(
            consumer.subscription_name == name and not consumer.closed
            for session in sessions
            for consumer in list(session._consumers)
        )

    # -- start / stop / close ---------------------------------------------------------------------
    @property
    def started(self) -> bool:
        """True between ``start()`` and ``stop()``."""
        return self._started

    def start(self) -> None:
        """Start (or restart) delivery of messages to receivers and listeners."""
        self._check_open(wait=False)
        self._started = True
        for session in self._session_list():
            session._notify()

    def stop(self) -> None:
        """Pause delivery; waits for running listeners to return (except the caller's own)."""
        self._check_open(wait=False)
        self._started = False
        for session in self._session_list():
            session._wait_listener_idle()

    def close(self) -> None:
        """Close every session, then the AMQP connection (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._reconnector is not None:
            self._reconnector.close()
        self._started = False
        for session in self._session_list():
            try:
                session.close()
            except JMSException as exc:  # the connection may already be gone
                log.debug("closing session: %s", exc)
        if self.transport.is_open:
            self.topology.close()
        self.transport.close()

    def abort(self) -> None:
        """Drop the connection without closing it: the socket is closed with no AMQP
        ``connection.close``, as a crash would, so the broker requeues every unacknowledged
        message and deletes exclusive queues. Locally the connection, its sessions and
        consumers are closed (a blocked ``receive`` returns None). Meant for tests of crash
        behaviour; the exception listener is not called. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._reconnector is not None:
            self._reconnector.close()
        self._started = False
        self.transport.abort()
        for session in self._session_list():
            session._abandon()

    @property
    def closed(self) -> bool:
        """True once closed."""
        return self._closed

    def _session_list(self) -> list[Session]:
        with self._lock:
            return list(self._sessions)

    def _check_open(self, wait: bool = True) -> None:
        """Raise when closed or failed; while failing over, wait for it unless ``wait`` is
        False (start and stop need no broker)."""
        if self._closed:
            raise IllegalStateException("The Connection is closed")
        if wait:
            self._await_transport("this call")
        reconnecting = self._reconnector is not None and self._reconnector.reconnecting
        if self.transport.error is not None and not reconnecting:
            raise JMSException(f"connection failed: {self.transport.error}")

    def _connection_lost(self, transport: Transport, error: JMSException) -> None:
        """I/O thread: the broker or the network closed the connection."""
        if self._reconnector is not None:
            self._reconnector.lost(transport, error)  # failover (or a stale transport)
            return
        self._give_up(error)

    def _give_up(self, error: JMSException) -> None:
        """The connection is gone for good: fail the sessions, tell the application."""
        for session in self._session_list():
            session._fail(error)
        listener = self.exception_listener
        if listener is not None:
            threading.Thread(
                target=listener, args=(error,), name="jms-exception-listener", daemon=True
            ).start()

    # -- failover ----------------------------------------------------------------------------------
    @property
    def failover(self) -> bool:
        """True for a ``failover:`` connection (a lost broker is replaced, not fatal)."""
        return self._reconnector is not None

    @property
    def broker_url(self) -> str:
        """The broker this connection is attached to (``amqp://host:port/vhost``)."""
        parameters = self.transport.parameters
        vhost = "%2F" if parameters.virtual_host == "/" else parameters.virtual_host
        return f"amqp://{parameters.host}:{parameters.port}/{vhost}"

    def add_transport_listener(self, listener: Any) -> None:
        """Be told of failovers (ActiveMQ's ``TransportListener``): ``listener`` may have
        ``transport_interrupted()`` (the broker was lost; reconnecting) and
        ``transport_resumed()`` (reconnected, sessions and consumers restored). Both are
        called on the reconnect thread; exceptions are logged."""
        self._transport_listeners.append(listener)

    def remove_transport_listener(self, listener: Any) -> None:
        """Stop telling ``listener``."""
        self._transport_listeners.remove(listener)

    def _notify_transport_listeners(self, event: str) -> None:
        for listener in list(self._transport_listeners):
            method = getattr(listener, event, None)
            if callable(method):
                try:
                    method()
                except Exception:
                    log.exception("transport listener %r raised in %s", listener, event)

    def _await_transport(self, what: str) -> None:
        """Block while failing over (up to the failover ``timeout``)."""
        reconnector = self._reconnector
        if reconnector is not None and reconnector.reconnecting:
            reconnector.wait_connected(what)

    def _interrupt_sessions(self) -> None:
        for session in self._session_list():
            session._interrupted()

    def _resume(self, transport: Transport) -> None:
        """Failover: restore declarations, the client id and every session on ``transport``."""
        self.transport = transport
        self.topology.rebind(transport)
        self.topology.ensure_topic_exchange()
        if self._client_id is not None:
            self.topology.lock_client_id(self._client_id)
        for session in self._session_list():
            session._resume()
