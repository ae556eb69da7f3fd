"""The root object of the broker core: configuration, users, virtual hosts, connections."""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from amqpd.vhost import VirtualHost

if TYPE_CHECKING:
    from amqpd.connection import Connection


@dataclass(slots=True)
class BrokerConfig:
    """Protocol limits and identities. Defaults are RabbitMQ's."""

    channel_max: int = 2047
    frame_max: int = 131072
    heartbeat: int = 60
    max_message_size: int = 128 * 1024 * 1024
    handshake_timeout: float = 10.0
    users: dict[str, str] = field(default_factory=lambda: {"guest": "guest"})
    vhosts: tuple[str, ...] = ("/",)


class Broker:
    """Shared state of all connections (sans-IO: no sockets, no clock, no awaits)."""

    def __init__(self, config: BrokerConfig | None = None) -> None:
        self.config = config or BrokerConfig()
        self.vhosts: dict[str, VirtualHost] = {
            name: VirtualHost(name) for name in self.config.vhosts
        }
        self.connections: set[Connection] = set()

    @property
    def default_vhost(self) -> VirtualHost:
        """The first configured vhost (a placeholder until Connection.Open picks one)."""
        return next(iter(self.vhosts.values()))

    def authenticate(self, user: str, password: str) -> bool:
        """Check a login (constant-time comparison; same answer for unknown users)."""
        expected = self.config.users.get(user)
        candidate = password.encode()
        if expected is None:
            hmac.compare_digest(candidate, candidate)
            return False
        return hmac.compare_digest(candidate, expected.encode())

    def connection_opened(self, connection: Connection) -> None:
        """A connection finished its handshake."""
        self.connections.add(connection)

    def connection_released(self, connection: Connection) -> None:
        """A connection is closing or gone: drop its exclusive queues."""
        self.connections.discard(connection)
        vhost = connection.vhost
        for queue in connection.exclusive_queues:
            vhost.delete_queue(queue)
        connection.exclusive_queues.clear()
