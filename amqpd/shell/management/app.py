"""The Starlette application of the management API: RabbitMQ's /api paths (one module per
resource family contributes its routes), RabbitMQ's 404 / 405 answers, and ``%2F`` kept
inside one path segment.

The dashboard's page and static files (``/``, ``/static``: amqpd/shell/dashboard) are
matched after the API's routes; other HTTP parts can add theirs with
``create_app(host, extra_routes=[...])``.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import quote, unquote

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from amqpd.shell import dashboard
from amqpd.shell.host import BrokerHost
from amqpd.shell.management import (
    access,
    bindings,
    clients,
    definitions,
    exchanges,
    limits,
    node,
    operator_api,
    parameters,
    policies,
    queues,
)
from amqpd.shell.management.errors import not_found


class EncodedSegments:
    """ASGI middleware for /api paths: route on the percent-encoded segments, so that the
    vhost ``/`` (``%2F``) stays one segment (servers decode ``scope["path"]``; handlers
    decode each parameter, `Call.param`), and ignore one trailing slash (RabbitMQ serves
    ``/api/queues/`` as ``/api/queues``)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/api/"):
            path = scope["path"]
            raw = scope.get("raw_path")
            if raw and b"%" in raw:
                encoded = raw.split(b"?", 1)[0].decode("latin-1")
                path = "/".join(quote(unquote(part), safe="@:") for part in encoded.split("/"))
            if path.endswith("/") and len(path) > len("/api/"):
                path = path[:-1]
            if path != scope["path"]:
                scope = {**scope, "path": path}
        await self.app(scope, receive, send)


async def _not_found(request: Request, exc: Exception) -> Response:
    if request.url.path.startswith("/api"):
        return not_found().response()
    return PlainTextResponse("Not Found", status_code=404)


async def _method_not_allowed(request: Request, exc: Exception) -> Response:
    headers = exc.headers if isinstance(exc, HTTPException) else None
    return Response(status_code=405, headers=headers)


def api_routes(host: BrokerHost) -> list[BaseRoute]:
    """Every /api route."""
    return [
        *node.routes(host),
        *operator_api.routes(host),
        *access.routes(host),
        *limits.routes(host),
        *queues.routes(host),
        *exchanges.routes(host),
        *bindings.routes(host),
        *clients.routes(host),
        *definitions.routes(host),
        *parameters.routes(host),
        *policies.routes(host),
    ]


def create_app(host: BrokerHost, extra_routes: Sequence[BaseRoute] = ()) -> Starlette:
    """The management API of ``host``'s broker (plus ``extra_routes``, matched after it)."""
    app = Starlette(
        routes=[*api_routes(host), *extra_routes, *dashboard.routes()],  # the web UI: / and /static
        middleware=[Middleware(EncodedSegments)],
        exception_handlers={404: _not_found, 405: _method_not_allowed},
    )
    app.router.redirect_slashes = False  # RabbitMQ answers, never redirects (see above)
    return app
