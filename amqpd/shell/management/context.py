"""One API request as the resource handlers see it (`Call`), and `route`, which turns
handlers into a Starlette route that authenticates, dispatches on the method and turns
every refusal into RabbitMQ's JSON error (never a stack trace).

Handlers run on the broker's event loop and read the core directly: they must not await
inside a loop over core objects (the core may change at any await) and should read a
listing once per request through `amqpd.engine.inventory`. After every request (a GET may
change something too: the aliveness test publishes) the wrapper calls ``host.after_core()``,
which wakes the writers of connections with output and the group committer, as after a
client's frames; it costs nothing when nothing changed.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from amqpd.model.auth import Authz
from amqpd.model.broker import Broker
from amqpd.model.vhost import VirtualHost
from amqpd.shell.host import BrokerHost
from amqpd.shell.management import auth, listing
from amqpd.shell.management.body import parse_json
from amqpd.shell.management.errors import (
    ApiError,
    bad_request,
    from_amqp,
    not_found,
    vhost_not_found,
)
from amqpd.shell.management.render import Json
from amqpd.wire.errors import AMQPError

log = logging.getLogger(__name__)


class Call:
    """The request, its authenticated user and the broker it acts on."""

    __slots__ = ("host", "principal", "request")

    def __init__(self, host: BrokerHost, request: Request, principal: auth.Principal) -> None:
        self.host = host
        self.request = request
        self.principal = principal

    @property
    def broker(self) -> Broker:
        """The broker core."""
        return self.host.broker

    def param(self, name: str) -> str:
        """A path parameter, percent-decoded (``%2F`` is the vhost ``/``)."""
        return unquote(str(self.request.path_params[name]))

    def query(self, name: str) -> str | None:
        """A query-string parameter."""
        return self.request.query_params.get(name)

    def flag(self, name: str) -> bool:
        """A query-string flag such as ``if-empty=true``."""
        value = self.query(name)
        return value is not None and value.lower() == "true"

    async def body(self, reason: str = "not_json") -> dict[str, Any]:
        """The JSON object in the request body ({} for an empty body); 400 ``reason``
        when it is not JSON or not an object."""
        raw = await self.request.body()
        if not raw.strip():
            return {}
        document = parse_json(raw, reason)
        if not isinstance(document, dict):
            raise bad_request(reason)
        return document

    # -- vhosts and permissions ----------------------------------------------------------
    def vhost(self, name: str) -> VirtualHost:
        """The vhost, if the user may see it: 404 if it does not exist, 401 if the user
        has no access to it."""
        found = self.broker.vhosts.get(name)
        if found is None:
            raise not_found()
        auth.require_vhost_visible(self.broker.access, self.principal, name)
        return found

    def vhost_param(self) -> VirtualHost:
        """The vhost named by the ``vhost`` path parameter (see `vhost`)."""
        return self.vhost(self.param("vhost"))

    def target_vhost(self) -> VirtualHost:
        """The vhost a PUT creates something in: 404 ``vhost_not_found`` if it does not
        exist, 401 if the user has no access to it."""
        name = self.param("vhost")
        if name not in self.broker.vhosts:
            raise vhost_not_found()
        return self.vhost(name)

    def access_vhost(self, creating: bool = False) -> str:
        """The name in the ``vhost`` path parameter, checked against the access state,
        which holds every vhost of the node: for parameters, policies and limits, which
        worker 0 answers for every vhost under ``--workers`` although its ``broker.vhosts``
        holds only those it serves. 404 if it does not exist (``vhost_not_found`` when
        ``creating``: a PUT), 401 if the user does not see it."""
        name = self.param("vhost")
        if name not in self.broker.access.state.vhosts:
            raise vhost_not_found() if creating else not_found()
        auth.require_vhost_visible(self.broker.access, self.principal, name)
        return name

    def authz(self, vhost: VirtualHost) -> Authz:
        """The user's permissions in ``vhost``, for a change made there (401 without)."""
        return auth.vhost_authz(self.broker.access, self.principal, vhost.name)

    def visible(self, vhost: str) -> bool:
        """Whether this user sees the objects of ``vhost`` in listings."""
        return auth.can_see_vhost(self.broker.access, self.principal, vhost)

    def sees_client(self, user: str) -> bool:
        """Whether this user sees a connection / channel of ``user`` (its own, or all for
        monitoring and administrators)."""
        return self.principal.is_monitor or user == self.principal.name

    # -- answers -------------------------------------------------------------------------
    def listing(
        self, items: list[dict[str, Any]], default_sort: tuple[str, ...] = ("vhost", "name")
    ) -> Json:
        """A list answer with the request's sort, columns and pagination applied."""
        query = self.request.query_params
        return Json(listing.present(items, query, default_sort))

    def item(self, item: dict[str, Any] | None) -> Json:
        """One object (404 if None), reduced to ``columns`` if asked."""
        if item is None:
            raise not_found()
        [selected] = listing.select_columns([item], self.query("columns"))
        return Json(selected)


Handler = Callable[[Call], Awaitable[Response]]


def created(was_created: bool) -> Response:
    """RabbitMQ's answer to a PUT: 201 when it created the object, 204 when it existed."""
    return Response(status_code=201 if was_created else 204)


def no_content() -> Response:
    """204."""
    return Response(status_code=204)


def route(host: BrokerHost, path: str, **handlers: Handler) -> Route:
    """A route serving ``handlers`` by lower-case method name (get, put, post, delete)."""
    by_method = {method.upper(): handler for method, handler in handlers.items()}
    if "GET" in by_method:
        by_method["HEAD"] = by_method["GET"]

    async def endpoint(request: Request) -> Response:
        response = await _answer(request)
        response.headers.setdefault("cache-control", "no-cache")  # live data, as RabbitMQ
        return response

    async def _answer(request: Request) -> Response:
        method = request.method
        handler = by_method[method]
        try:
            principal = auth.authenticate(
                host.broker.access, request.headers.get("authorization"), _peer(request)
            )
            return await handler(Call(host, request, principal))
        except ApiError as exc:
            return exc.response()
        except AMQPError as exc:
            return from_amqp(exc).response()
        except ClientDisconnect:  # it went away mid-body: nothing to answer, nothing broken
            log.info(
                "management API: client %s disconnected during %s %s",
                _peer(request),
                method,
                request.url.path,
            )
            return Response(status_code=400)
        except Exception as exc:  # a bug must not take the listener down, nor leak a trace
            log.exception("management API: %s %s failed", method, request.url.path)
            return ApiError(500, "internal_server_error", str(exc) or type(exc).__name__).response()
        finally:
            host.after_core()  # cheap when nothing changed

    return Route(path, endpoint, methods=list(by_method))


def _peer(request: Request) -> str | None:
    client = request.client
    if client is None:
        return None
    return f"{client.host}:{client.port}"
