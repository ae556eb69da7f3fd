"""A management API over an in-memory broker, driven without sockets: httpx's ASGI
transport calls the Starlette app directly (one event loop per request)."""

from __future__ import annotations

from typing import Any

import anyio
import httpx

from amqpd.model.admin_commands import AdminError, execute
from amqpd.model.auth import hash_password
from amqpd.model.broker import Broker
from amqpd.model.statistics import NodeSample
from amqpd.shell.admin_socket import AdminReply
from amqpd.shell.management import create_app


class FakeHost:
    """A `BrokerHost` without a server: admin requests run on the broker directly."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.after_core_calls = 0
        self.admin_requests: list[dict[str, Any]] = []

    def node_sample(self) -> NodeSample:
        return NodeSample(
            name="amqpd@test",
            listeners=[
                {"protocol": "amqp", "port": 5672, "ip_address": "127.0.0.1"},
                {"protocol": "http", "port": 15672, "ip_address": "127.0.0.1"},
            ],
        )

    def after_core(self) -> None:
        self.after_core_calls += 1

    async def admin_request(self, request: dict[str, Any]) -> AdminReply:
        self.admin_requests.append(request)
        try:
            return AdminReply(True, execute(self.broker, request).output)
        except AdminError as exc:
            return AdminReply(False, str(exc))


class Api:
    """Requests to the management app of ``broker`` as ``peer`` (loopback by default)."""

    def __init__(self, broker: Broker | None = None, peer: str = "127.0.0.1") -> None:
        self.broker = broker or Broker()
        self.host = FakeHost(self.broker)
        self.app = create_app(self.host)
        self.peer = peer

    def add_user(self, name: str, *tags: str, vhosts: tuple[str, ...] = ("/",)) -> None:
        execute(
            self.broker,
            {
                "group": "users",
                "command": "add",
                "name": name,
                "password_hash": hash_password("pw"),
                "tags": list(tags),
            },
        )
        for vhost in vhosts:
            execute(
                self.broker,
                {
                    "group": "users",
                    "command": "set-permissions",
                    "name": name,
                    "vhost": vhost,
                    "configure": ".*",
                    "write": ".*",
                    "read": ".*",
                },
            )

    def request(
        self,
        method: str,
        path: str,
        auth: tuple[str, str] | None = ("guest", "guest"),
        **options: Any,
    ) -> httpx.Response:
        async def call() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app, client=(self.peer, 40000))
            async with httpx.AsyncClient(transport=transport, base_url="http://mgmt") as client:
                return await client.request(method, path, auth=auth, **options)

        return anyio.run(call)

    def get(self, path: str, **options: Any) -> httpx.Response:
        return self.request("GET", path, **options)

    def put(self, path: str, **options: Any) -> httpx.Response:
        return self.request("PUT", path, **options)

    def post(self, path: str, **options: Any) -> httpx.Response:
        return self.request("POST", path, **options)

    def delete(self, path: str, **options: Any) -> httpx.Response:
        return self.request("DELETE", path, **options)
