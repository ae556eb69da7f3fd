"""The Starlette application of the management HTTP API."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from amqpd.engine import inventory
from amqpd.shell.host import BrokerHost


def create_app(host: BrokerHost) -> Starlette:
    """The management API of ``host``'s broker."""

    async def overview(request: Request) -> JSONResponse:
        return JSONResponse(inventory.overview(host.broker, host.node_sample()))

    return Starlette(routes=[Route("/api/overview", overview)])
