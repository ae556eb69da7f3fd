"""Routing inside one vhost: the registry of exchanges and queues a message is routed
across (`Routing`, the base of `VirtualHost`, amqpd/model/vhost.py, which adds the
declarations, bindings, policies and dead-lettering).

A message published to an exchange goes to the queues its bindings select, following
exchange-to-exchange bindings and alternate exchanges, each queue once and each exchange
visited once; the default exchange names the queue. In a spread vhost (amqpd/model/
replica.py) the result may include `RemoteQueue` stubs of queues other workers own:
`route_here` sends those copies on at once (delayed and dead-lettered messages, whose
publishers do not wait), a publishing channel joins their confirms itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from amqpd.model.exchange import Exchange
from amqpd.model.message import Message
from amqpd.model.queue import Queue
from amqpd.model.replica import RemoteQueue, has_remote, local_only
from amqpd.model.routing_input import router_headers
from amqpd.model.sender_selected import has_sender_selected_headers, sender_selected_keys

if TYPE_CHECKING:
    from amqpd.model.replica import ConsumingPort, ReplicaPort


class Routing:
    """Exchanges and queues of one vhost, and routing across them."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.exchanges: dict[str, Exchange] = {}
        self.queues: dict[str, Queue] = {}
        # A spread vhost (model/replica.py): the queues other workers own, and the links
        # every topology change goes out on (None: this vhost lives on this worker alone).
        self.remote: dict[str, RemoteQueue] = {}
        self.replica: ReplicaPort | None = None
        # this worker's consumers of the stubs' queues (engine/remote_consumers.py)
        self.consuming: ConsumingPort | None = None

    def find_queue(self, name: str) -> Queue | None:
        """The queue ``name``, here or (a `RemoteQueue`) on another worker."""
        queue = self.queues.get(name)
        if queue is None and self.remote:
            return self.remote.get(name)
        return queue

    # -- routing ---------------------------------------------------------------------------
    def route(self, exchange: Exchange, message: Message) -> list[Queue]:
        """Queues a message published to ``exchange`` goes to: following exchange-to-exchange
        bindings and alternate exchanges, each queue once, each exchange visited once.

        Sender-selected distribution (RabbitMQ): routing keys in the ``CC`` and ``BCC``
        headers are routed too, and ``BCC`` is removed from the message here.
        """
        if has_sender_selected_headers(message.headers_raw):
            keys = sender_selected_keys(message)
            if keys:
                return self._route_key(exchange, message, message.routing_key, tuple(keys))
        return self._route_key(exchange, message, message.routing_key)

    def _route_key(
        self,
        exchange: Exchange,
        message: Message,
        routing_key: str,
        extra_keys: tuple[str, ...] = (),
    ) -> list[Queue]:
        """Route on ``routing_key`` and the CC/BCC ``extra_keys`` together at each exchange,
        as RabbitMQ does: an alternate exchange only gets what none of the keys routes."""
        if extra_keys:
            destinations = self._route_one(exchange, message, routing_key, extra_keys)
        elif exchange.is_default:
            queue = self.queues.get(routing_key)
            if queue is None and self.remote:
                queue = self.remote.get(routing_key)
            return [queue] if queue is not None else []
        else:
            router = exchange.router
            headers = router_headers(router, message) if router.uses_headers else None
            destinations = router.route(routing_key, headers)
            if exchange.alternate is None and _only_queues(destinations):
                return list(destinations)  # type: ignore[arg-type]
        queues: list[Queue] = []
        seen_queues: set[Queue] = set()
        visited = {exchange}
        work = [(exchange, destinations)]
        while work:
            current, routed = work.pop()
            if not routed and current.alternate is not None:
                alternate = self.exchanges.get(current.alternate)
                if alternate is not None and alternate not in visited:
                    visited.add(alternate)
                    routed_ae = self._route_one(alternate, message, routing_key, extra_keys)
                    work.append((alternate, routed_ae))
            for destination in routed:
                if isinstance(destination, Queue):
                    if destination not in seen_queues:
                        seen_queues.add(destination)
                        queues.append(destination)
                elif isinstance(destination, Exchange) and destination not in visited:
                    visited.add(destination)
                    routed_e2e = self._route_one(destination, message, routing_key, extra_keys)
                    work.append((destination, routed_e2e))
        return queues

    def _route_one(
        self,
        exchange: Exchange,
        message: Message,
        routing_key: str,
        extra_keys: tuple[str, ...] = (),
    ) -> list[Any]:
        if exchange.is_default:
            if not extra_keys:
                queue = self.find_queue(routing_key)
                return [queue] if queue is not None else []
            found = (self.find_queue(key) for key in (routing_key, *extra_keys))
            return list(dict.fromkeys(queue for queue in found if queue is not None))
        router = exchange.router
        headers = router_headers(router, message) if router.uses_headers else None
        if not extra_keys:
            return list(router.route(routing_key, headers))
        keys = (routing_key, *extra_keys)
        return list(dict.fromkeys(d for key in keys for d in router.route(key, headers)))

    def route_here(self, exchange: Exchange, message: Message) -> list[Queue]:
        """`route`, with the copies for queues other workers own sent to them now (nobody
        waits for their confirms: a delayed message's publisher was confirmed long ago);
        the queues here."""
        queues = self.route(exchange, message)
        if self.remote and has_remote(queues):
            return self._forward_elsewhere(message, queues)
        return queues

    def _forward_elsewhere(self, message: Message, queues: list[Queue]) -> list[Queue]:
        if self.replica is not None:
            self.replica.forward(self.name, message, None, False, queues, None, False)
        return local_only(queues)


def _only_queues(destinations: list[Any]) -> bool:
    """Whether every destination is a queue (no exchange-to-exchange hop). A loop, not
    ``all()`` over a generator: compiled, the generator object per message cost ~3 % of
    W1's broker time (py-spy)."""
    for destination in destinations:  # noqa: SIM110 (see above)
        if not isinstance(destination, Queue):
            return False
    return True
