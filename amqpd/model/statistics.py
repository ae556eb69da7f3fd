"""Statistics counters and the node sample (sans-IO: plain numbers, no clock).

Theory of operation
-------------------
Counting is always on and costs one ``+= 1`` on the hot path: queues, exchanges, channels
and connections each own a counters object (`MessageStats`, `IOStats`) whose fields are
plain ints named as RabbitMQ's management API names them (``publish``, ``deliver_get``,
``recv_oct`` ...). Nothing is timed per message.

Rates are sampled, as RabbitMQ's management agent does (every 5 s by default): the shell
calls the engine's `RateSampler` periodically with the time; for each object
`Counters.sample` turns the difference since the previous sample into per-second rates,
kept in ``rates`` until the next sample. Between samples a rate is the average over the
last interval, exactly what RabbitMQ's ``*_details.rate`` shows with its default
``rates_mode = basic``.

What the shell measures about the process (memory, descriptors, disk, uptime) arrives as a
`NodeSample`, which the inventory reads with the broker's own state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from amqpd.model.history import SampleHistory


class Counters:
    """Monotonic counters plus the rates of the last sampling interval."""

    __slots__ = ("_last", "rates")
    FIELDS: ClassVar[tuple[str, ...]] = ()

    def __init__(self) -> None:
        self.rates: dict[str, float] = {}
        self._last: tuple[int, ...] | None = None

    def values(self) -> tuple[int, ...]:
        """The counters now, in ``FIELDS`` order."""
        return tuple(getattr(self, name) for name in self.FIELDS)

    def sample(self, interval: float) -> bool:
        """Compute ``rates`` from the change since the previous sample, ``interval``
        seconds ago (the first sample only records the values). True if anything moved."""
        now = self.values()
        last = self._last
        self._last = now
        if last is None or interval <= 0:
            return any(now) if last is None else now != last
        self.rates = {
            name: (new - old) / interval
            for name, new, old in zip(self.FIELDS, now, last, strict=True)
            if new != old
        }
        return bool(self.rates)

    def rate(self, name: str) -> float:
        """The per-second rate of ``name`` over the last sampling interval."""
        return round(self.rates.get(name, 0.0), 1)

    def add(self, other: Counters) -> None:
        """Add another object's counts to these (a closed channel folded into totals)."""
        for name in self.FIELDS:
            setattr(self, name, getattr(self, name) + getattr(other, name))


class MessageStats(Counters):
    """Message counters of a queue, exchange, channel or the whole node."""

    __slots__ = (
        "ack",
        "confirm",
        "deliver",
        "deliver_no_ack",
        "drop_unroutable",
        "get",
        "get_empty",
        "get_no_ack",
        "publish",
        "publish_in",
        "publish_out",
        "redeliver",
        "return_unroutable",
    )
    # Spelled out, not read from __slots__: a compiled (mypyc) class has no __slots__.
    FIELDS: ClassVar[tuple[str, ...]] = (
        "ack",
        "confirm",
        "deliver",
        "deliver_no_ack",
        "drop_unroutable",
        "get",
        "get_empty",
        "get_no_ack",
        "publish",
        "publish_in",
        "publish_out",
        "redeliver",
        "return_unroutable",
    )

    def __init__(self) -> None:
        super().__init__()
        self.ack = 0
        self.confirm = 0
        self.deliver = 0  # to a consumer that acks
        self.deliver_no_ack = 0  # to a no-ack consumer
        self.drop_unroutable = 0  # routed nowhere, not mandatory
        self.get = 0  # basic.get-ok that needs an ack
        self.get_empty = 0
        self.get_no_ack = 0
        self.publish = 0  # into a queue (queue), from a client (channel, node)
        self.publish_in = 0  # published to an exchange
        self.publish_out = 0  # (message, queue) pairs the exchange routed to
        self.redeliver = 0
        self.return_unroutable = 0  # basic.return for a mandatory message

    @property
    def deliver_get(self) -> int:
        """Every delivery and get-ok (RabbitMQ's ``deliver_get``)."""
        return self.deliver + self.deliver_no_ack + self.get + self.get_no_ack


class QueueStats(MessageStats):
    """A queue's message counters plus what the sampler derives for it."""

    __slots__ = ("_busy_samples", "depth_rates", "idle_since", "last_depth", "utilisation")

    def __init__(self) -> None:
        super().__init__()
        self.utilisation: float | None = None  # see RateSampler (engine/rates.py)
        self.idle_since: float | None = None  # unix time since nothing happened
        self.last_depth: tuple[int, int] | None = None  # (ready, unacked) at the last sample
        self.depth_rates: dict[str, float] = {}  # messages / _ready / _unacknowledged per s
        self._busy_samples: list[bool] = []

    def sample_utilisation(self, could_deliver: bool | None, window: int) -> None:
        """Record whether, at this sample, a consumer could take a message at once
        (None: no consumers); the utilisation is the fraction of the last ``window``
        samples that said yes."""
        if could_deliver is None:
            self._busy_samples.clear()
            self.utilisation = None
            return
        samples = self._busy_samples
        samples.append(could_deliver)
        if len(samples) > window:
            del samples[0]
        self.utilisation = sum(samples) / len(samples)


class IOStats(Counters):
    """Octets and socket operations of one connection, and what the shell knows of it."""

    __slots__ = ("host", "port", "recv_cnt", "recv_oct", "send_cnt", "send_oct", "ssl")
    FIELDS: ClassVar[tuple[str, ...]] = ("recv_cnt", "recv_oct", "send_cnt", "send_oct")

    def __init__(self) -> None:
        super().__init__()
        self.recv_oct = 0  # bytes received
        self.recv_cnt = 0  # chunks received (socket reads)
        self.send_oct = 0  # bytes sent
        self.send_cnt = 0  # writes
        self.host = ""  # the listener's address this connection came in on (the shell)
        self.port = 0
        self.ssl = False


class Churn:
    """How many connections, channels and queues came and went (RabbitMQ's
    ``connection_churn_metrics``, Prometheus' ``rabbitmq_*_opened_total`` ...), and login
    attempts: one ``+= 1`` per open, close, declare, delete or login, never per message."""

    __slots__ = (
        "auth_failed",
        "auth_succeeded",
        "channels_closed",
        "channels_opened",
        "connections_closed",
        "connections_opened",
        "queues_created",
        "queues_declared",
        "queues_deleted",
    )

    def __init__(self) -> None:
        self.auth_succeeded = 0  # AMQP logins (connection.start-ok) accepted
        self.auth_failed = 0  # and refused (RabbitMQ's auth_attempt_metrics)
        self.connections_opened = 0  # handshakes that finished (connection.open-ok)
        self.connections_closed = 0  # of those, closed or lost
        self.channels_opened = 0
        self.channels_closed = 0
        self.queues_declared = 0  # non-passive queue.declare (new or existing), API declares
        self.queues_created = 0  # declarations that made a new queue
        self.queues_deleted = 0  # deleted for any reason (delete, auto-delete, expiry, owner)


DEAD_LETTER_REASONS = ("maxlen", "expired", "rejected", "delivery_limit")


class DeadLetterCounts:
    """Messages that left a queue unacked, by reason (RabbitMQ's
    ``rabbitmq_global_messages_dead_lettered_*_total``): ``at_most_once`` when the queue has
    a dead-letter exchange (the message was republished there), ``disabled`` when it was
    dropped. One ``+= 1`` per such message, on the discard path only."""

    __slots__ = ("at_most_once", "disabled")

    def __init__(self) -> None:
        self.at_most_once = dict.fromkeys(DEAD_LETTER_REASONS, 0)
        self.disabled = dict.fromkeys(DEAD_LETTER_REASONS, 0)


class StoreIO:
    """What the store read and wrote (the shell counts, amqpd/shell/store_io.py; Prometheus'
    ``rabbitmq_io_*`` and ``rabbitmq_msg_store_*`` families): one update per transaction
    or per page of bodies read, never per message on the hot path."""

    __slots__ = (
        "messages_read",
        "messages_written",
        "read_bytes",
        "read_ops",
        "read_seconds",
        "sync_ops",
        "sync_seconds",
        "write_bytes",
        "write_ops",
    )

    def __init__(self) -> None:
        self.write_ops = 0  # transactions written (one per group commit)
        self.write_bytes = 0  # message headers and bodies inserted
        self.messages_written = 0
        self.sync_ops = 0  # commits (each is made durable as --sync says)
        self.sync_seconds = 0.0  # time in transactions, write and commit together
        self.read_ops = 0  # page reads of bodies (paged-out messages read back)
        self.read_bytes = 0
        self.read_seconds = 0.0
        self.messages_read = 0


@dataclass(slots=True)
class NodeStatistics:
    """Node-wide counters: channels that closed are folded into ``closed`` so totals
    survive them; ``totals`` and the queue-depth rates are refreshed by the sampler."""

    node: str = "amqpd@localhost"  # the node name the shell chose
    closed: MessageStats = field(default_factory=MessageStats)
    churn: Churn = field(default_factory=Churn)
    dead_letters: DeadLetterCounts = field(default_factory=DeadLetterCounts)
    totals: MessageStats = field(default_factory=MessageStats)
    depth_rates: dict[str, float] = field(default_factory=dict)
    last_depth: tuple[int, int] | None = None
    sampled_at: float | None = None
    history: SampleHistory = field(default_factory=SampleHistory)  # amqpd/model/history.py
    store_io: StoreIO = field(default_factory=StoreIO)
    churn_last: dict[str, int] = field(default_factory=dict)  # engine/churn.py
    churn_rates: dict[str, float] = field(default_factory=dict)


def depth_rates(
    last: tuple[int, int] | None, ready: int, unacked: int, interval: float
) -> dict[str, float]:
    """The per-second change of a queue depth (RabbitMQ's ``messages_details`` etc.)."""
    if last is None or interval <= 0:
        return {}
    return {
        "messages": (ready + unacked - last[0] - last[1]) / interval,
        "messages_ready": (ready - last[0]) / interval,
        "messages_unacknowledged": (unacked - last[1]) / interval,
    }


@dataclass(slots=True)
class NodeSample:
    """What the shell measured about the broker process (units as RabbitMQ reports them:
    bytes, milliseconds). Filled by amqpd/shell/server.py, read by the inventory."""

    name: str = "amqpd@localhost"
    uptime: int = 0  # milliseconds since the broker started
    mem_used: int = 0
    mem_limit: int = 0  # the memory high watermark in bytes (0: none)
    disk_free: int = 0
    disk_free_limit: int = 0
    fd_used: int = 0
    fd_total: int = 0
    sockets_used: int = 0
    sockets_total: int = 0
    proc_used: int = 1
    proc_total: int = 1
    processors: int = 1
    run_queue: int = 0
    os_pid: str = ""
    store_bytes: int = 0  # size of the data directory's store
    listeners: list[dict[str, Any]] = field(default_factory=list)
    role: str = "standalone"  # store role: standalone, active, standby (amqpd/shell/store_role.py)
