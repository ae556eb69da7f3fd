"""The web dashboard: a browser UI over the management API, served by the management app.

The pages are static files shipped in this package (``static/``: HTML, CSS and plain
JavaScript modules, no build step, nothing fetched from the internet). Everything the
browser shows comes from the management HTTP API (``/api/overview``, ``/api/queues`` ...)
with RabbitMQ's JSON shapes, sent with HTTP basic authentication from a login form, as
RabbitMQ's own management UI does; the server side here only serves the files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

STATIC: Final = Path(__file__).parent / "static"


async def _index(request: Request) -> Response:
    return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})


def routes() -> list[BaseRoute]:
    """``/`` (the single page) and ``/static/...`` (its scripts, styles and icon)."""
    return [
        Route("/", _index, methods=["GET", "HEAD"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
