"""Prometheus metrics (RabbitMQ's rabbitmq_prometheus names) on their own listener."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from amqpd.engine import inventory
from amqpd.shell.host import BrokerHost

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def create_app(host: BrokerHost) -> Starlette:
    """The /metrics endpoint of ``host``'s broker."""

    async def metrics(request: Request) -> PlainTextResponse:
        count = len(list(inventory.open_connections(host.broker)))
        text = (
            "# HELP rabbitmq_connections Connections currently open\n"
            "# TYPE rabbitmq_connections gauge\n"
            f"rabbitmq_connections {count}\n"
        )
        return PlainTextResponse(text, media_type=CONTENT_TYPE)

    return Starlette(routes=[Route("/metrics", metrics)])
