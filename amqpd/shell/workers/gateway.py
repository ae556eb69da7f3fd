"""One broker to operators (``--workers N``): worker 0's management API and Prometheus
endpoints wrapped so that they answer for every worker, as RabbitMQ's management API
answers for a single node holding everything.

Each worker serves the same two apps (amqpd/shell/management, amqpd/shell/metrics.py);
worker K >= 1 on Unix sockets only (`WorkerRole.management_socket`,
`WorkerRole.prometheus_socket`). Every worker holds the whole access state (users, vhosts,
permissions, policies, parameters, limits: replicated from worker 0) but only the vhosts it
owns (`Placement.owner`). `management_gateway` sends each request where its answer is:

========================================================  ===================================
request                                                   goes to
========================================================  ===================================
``GET /api/{queues,exchanges,bindings,connections,         every worker at once; rows of a
channels,consumers,vhosts}``                              vhost kept from its owner only
                                                          (a row without a vhost: kept), then
                                                          sorted, filtered, paginated and
                                                          projected here (listing.present)
``GET /api/{shovels,federation-links}``                   every worker, every row (a link
                                                          runs on one worker, which need not
                                                          be its vhost's owner), as above
``GET /api/{shovels,federation-links}/{vhost}``           the owner (404, 401), then every
                                                          worker's rows of that vhost
``/api/{queues,exchanges,bindings,consumers,              the vhost's owner, unchanged
aliveness-test}/{vhost}...``,
``/api/vhosts/{vhost}/{connections,channels}``,
``GET /api/vhosts/{vhost}``, ``GET /api/definitions/{vhost}``
``GET /api/overview``                                     every worker: worker 0's object,
                                                          object_totals, queue_totals,
                                                          message_stats, churn_rates summed
``GET /api/definitions``                                  every worker: worker 0's document,
                                                          queues / exchanges / bindings from
                                                          their vhost's owner
``POST /api/definitions``                                 the access sections to worker 0
                                                          first (it creates and places the
                                                          vhosts), then each vhost's queues,
                                                          exchanges, bindings to its owner
``POST /api/definitions/{vhost}``                         parameters and policies to worker 0
                                                          (``POST /api/definitions``), the
                                                          topology to the owner
``/api/connections/{name}[/channels]``,                   worker 0, 1, ... until one answers
``GET /api/channels/{name}``                              other than 404
``GET /api/health/checks/{alarms,local-alarms}``          every worker: 503 with every
                                                          worker's alarms if any has one
everything else: users, permissions, topic permissions,   worker 0 (the wrapped app itself):
policies, operator policies, parameters, global           the access state's authority, which
parameters, user and vhost limits, ``PUT|DELETE           replicates its changes
/api/vhosts/{vhost}``, whoami, nodes, cluster-name, the
other health checks, the dashboard
========================================================  ===================================

Left at worker 0: ``/api/nodes[/{name}[/memory]]`` (that process's memory, fds, uptime;
the Prometheus endpoints give the node's sums), ``HEAD`` of a merged listing. The rates'
``*_details.samples`` of a merged overview are summed by timestamp (a point that only some
workers have counts the others as 0; ``avg`` and ``avg_rate`` are summed as well).

Worker 0 never gets a request over a socket: ``call(0, ...)`` is the wrapped app in-process
(`unix_caller`). A request for worker 0 alone is passed to the wrapped app unchanged.

The client's address goes along as ``X-Forwarded-For`` (any the client sent is replaced),
so that the loopback rule (``loopback_users``: guest) holds on every worker: a worker's
socket listener must trust it (uvicorn's ``forwarded_allow_ips="*"``: the socket is private
to the workers' runtime directory), and `asgi_call` takes it for worker 0. A worker that
does not answer (its socket refuses, a timeout) makes a merged request 503.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qsl, quote, unquote, urlencode

import anyio
import anyio.to_thread
import httpx
import orjson
from starlette.datastructures import QueryParams
from starlette.middleware.gzip import GZipMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from amqpd.shell.management import listing
from amqpd.shell.management.bindings import BINDING_ORDER
from amqpd.shell.management.errors import ApiError
from amqpd.shell.metrics import CONTENT_TYPE
from amqpd.shell.workers.metrics_merge import merge_expositions

log = logging.getLogger(__name__)

Headers = list[tuple[bytes, bytes]]
Answer = tuple[int, Headers, bytes]
# (worker index, method, path (percent-encoded), raw query string, request headers, request
# body) -> (status, response headers, response body)
WorkerCall = Callable[[int, str, str, bytes, Headers, bytes], Awaitable[Answer]]

FORWARDED_FOR: Final = b"x-forwarded-for"
TIMEOUT: Final = httpx.Timeout(60.0, connect=5.0)  # a worker's listing of many queues
# set by the HTTP client from what it sends, or about the hop, not the request
_HOP_REQUEST: Final = frozenset(
    {
        b"host",
        b"content-length",
        b"transfer-encoding",
        b"connection",
        b"keep-alive",
        b"accept-encoding",
        b"x-forwarded-for",
        b"x-forwarded-proto",
        b"x-forwarded-host",
        b"forwarded",
    }
)
# the body handed back is decoded and whole
_HOP_RESPONSE: Final = frozenset(
    {b"content-length", b"transfer-encoding", b"connection", b"keep-alive", b"content-encoding"}
)
_LISTING_PARAMETERS: Final = frozenset(
    {"page", "page_size", "name", "use_regex", "sort", "sort_reverse", "columns"}
)
_TOPOLOGY: Final = ("queues", "exchanges", "bindings")  # what lives on a vhost's owner
_VHOST_ACCESS: Final = ("parameters", "policies")  # what a per-vhost import also holds
_METRICS_PATHS: Final = frozenset({"/metrics", "/metrics/per-object", "/metrics/detailed"})


# -- calling workers ---------------------------------------------------------------------------
def _url(path: str, query: bytes) -> httpx.URL:
    raw = path.encode("ascii") + (b"?" + query if query else b"")
    return httpx.URL(scheme="http", host="worker", raw_path=raw)


def _outgoing(headers: Headers) -> Headers:
    return [(name, value) for name, value in headers if name.lower() not in _HOP_REQUEST]


def _incoming(response: httpx.Response) -> Headers:
    return [
        (name, value) for name, value in response.headers.raw if name.lower() not in _HOP_RESPONSE
    ]


def _forwarded_client(headers: Headers) -> tuple[str, int]:
    """The client address the gateway put in X-Forwarded-For (``host:port``, ``[v6]:port``);
    one that is no address when there is none (never loopback)."""
    for name, value in headers:
        if name.lower() == FORWARDED_FOR:
            text = value.decode("latin-1").split(",")[-1].strip()
            host, _, port = text.rpartition(":")
            if host and port.isdigit():
                return host.strip("[]"), int(port)
            return text, 0
    return "unknown", 0


async def asgi_call(
    app: ASGIApp, method: str, path: str, query: bytes, headers: Headers, body: bytes
) -> Answer:
    """One request to ``app`` in-process (httpx's ASGI transport), from the client named by
    X-Forwarded-For."""
    transport = httpx.ASGITransport(app=app, client=_forwarded_client(headers))
    async with httpx.AsyncClient(transport=transport, timeout=TIMEOUT) as client:
        response = await client.request(
            method, _url(path, query), headers=_outgoing(headers), content=body
        )
    return response.status_code, _incoming(response), response.content


class UnixCaller:
    """A `WorkerCall`: index 0 -> the local app in-process (`asgi_call`); index K ->
    HTTP/1.1 over the Unix socket ``sockets(K)`` (one kept-alive client per worker, made on
    first use, on the event loop of that use; `aclose` closes them)."""

    def __init__(self, local: ASGIApp, sockets: Callable[[int], Path]) -> None:
        self.local = local
        self.sockets = sockets
        self.clients: dict[int, httpx.AsyncClient] = {}

    async def __call__(
        self, index: int, method: str, path: str, query: bytes, headers: Headers, body: bytes
    ) -> Answer:
        if index == 0:
            return await asgi_call(self.local, method, path, query, headers, body)
        client = self.clients.get(index)
        if client is None:
            transport = httpx.AsyncHTTPTransport(uds=str(self.sockets(index)), retries=1)
            client = self.clients[index] = httpx.AsyncClient(transport=transport, timeout=TIMEOUT)
        outgoing = _outgoing(headers)
        forwarded = [(n, v) for n, v in headers if n.lower() == FORWARDED_FOR]
        response = await client.request(
            method, _url(path, query), headers=outgoing + forwarded, content=body
        )
        return response.status_code, _incoming(response), response.content

    async def aclose(self) -> None:
        """Close the connections to the workers (a later call opens new ones)."""
        clients, self.clients = list(self.clients.values()), {}
        for client in clients:
            await client.aclose()


def unix_caller(local: ASGIApp, sockets: Callable[[int], Path]) -> UnixCaller:
    """index 0 -> the local app in-process (httpx.ASGITransport); index K -> httpx over the
    Unix socket ``sockets(K)``. Close it (`UnixCaller.aclose`) when the server stops."""
    return UnixCaller(local, sockets)


# -- the request as the gateway sees it --------------------------------------------------------
@dataclass(slots=True)
class _Request:
    method: str
    path: str  # percent-encoded, as received
    segments: list[str]  # after /api/, decoded ("%2F" -> "/"); one trailing slash ignored
    query: bytes
    headers: Headers
    scope: Scope
    receive: Receive

    async def body(self) -> bytes:
        chunks = []
        while True:
            message = await self.receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        return b"".join(chunks)

    def params(self) -> QueryParams:
        return QueryParams(self.query)


def _parse(scope: Scope, receive: Receive) -> _Request:
    raw = scope.get("raw_path")
    path = (
        raw.split(b"?", 1)[0].decode("latin-1")
        if raw
        else quote(scope["path"], safe="/:@!$&'()*+,;=")
    )
    parts = path.split("/")
    segments = [unquote(part) for part in parts[2:]] if path.startswith("/api/") else []
    if segments and segments[-1] == "":
        segments.pop()
    headers = [(n, v) for n, v in scope["headers"] if n.lower() not in _HOP_REQUEST]
    client = scope.get("client")
    if client:
        host, port = client[0], client[1]
        shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        headers.append((FORWARDED_FOR, shown.encode("latin-1")))
    return _Request(
        method=scope["method"],
        path=path,
        segments=segments,
        query=scope.get("query_string", b""),
        headers=headers,
        scope=scope,
        receive=receive,
    )


async def _send(send: Send, status: int, headers: Headers, body: bytes) -> None:
    kept = [(n, v) for n, v in headers if n.lower() not in _HOP_RESPONSE]
    kept.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": kept})
    await send({"type": "http.response.body", "body": body})


def _json(status: int, content: Any) -> Answer:
    headers = [(b"content-type", b"application/json"), (b"cache-control", b"no-cache")]
    return status, headers, orjson.dumps(content)


def _unavailable(index: int, exc: Exception) -> Answer:
    log.warning("worker %d did not answer the gateway: %r", index, exc)
    reason = f"worker {index} did not answer: {type(exc).__name__} {exc}".strip()
    return _json(503, {"error": "service_unavailable", "reason": reason})


async def _ask(
    call: WorkerCall,
    index: int,
    method: str,
    path: str,
    query: bytes,
    headers: Headers,
    body: bytes,
) -> Answer:
    try:
        return await call(index, method, path, query, headers, body)
    except (httpx.HTTPError, OSError) as exc:
        return _unavailable(index, exc)


async def _ask_all(
    call: WorkerCall, workers: int, method: str, path: str, query: bytes, headers: Headers
) -> list[Answer]:
    """Every worker's answer (in index order), asked at once."""
    answers: list[Answer | None] = [None] * workers

    async def one(index: int) -> None:
        answers[index] = await _ask(call, index, method, path, query, headers, b"")

    async with anyio.create_task_group() as group:
        for index in range(workers):
            group.start_soon(one, index)
    return [answer for answer in answers if answer is not None]


def _failed(answers: Sequence[Answer]) -> Answer | None:
    """The first answer that is not 200 (it is the answer to the request), if any."""
    return next((answer for answer in answers if answer[0] != 200), None)


# -- what goes where ---------------------------------------------------------------------------
VhostOf = Callable[[dict[str, Any]], Any]


def _row_vhost(row: dict[str, Any]) -> Any:
    return row.get("vhost")


def _consumer_vhost(row: dict[str, Any]) -> Any:
    queue = row.get("queue")
    return queue.get("vhost") if isinstance(queue, dict) else None


def _vhost_name(row: dict[str, Any]) -> Any:
    return row.get("name")


def _anywhere(row: dict[str, Any]) -> Any:
    return None  # every worker's rows are kept


@dataclass(frozen=True, slots=True)
class _Listing:
    vhost: VhostOf = _row_vhost
    order: tuple[str, ...] = ("vhost", "name")  # Call.listing's default sort keys


_LISTINGS: Final[dict[str, _Listing]] = {
    "queues": _Listing(),
    "exchanges": _Listing(),
    "bindings": _Listing(order=BINDING_ORDER),
    "connections": _Listing(),
    "channels": _Listing(),
    "consumers": _Listing(vhost=_consumer_vhost),
    "vhosts": _Listing(vhost=_vhost_name),
    "shovels": _Listing(vhost=_anywhere),
    "federation-links": _Listing(vhost=_anywhere),
}
_LINKS: Final = frozenset({"shovels", "federation-links"})
# /api/{collection}/{vhost}...: everything under it is the vhost's
_VHOST_SCOPED: Final = frozenset(
    {
        "queues",
        "exchanges",
        "bindings",
        "consumers",
        "aliveness-test",
    }
)


def _plan(method: str, segments: list[str]) -> tuple[str, str]:
    """(what to do, the vhost it concerns or "") for a request to /api/``segments``."""
    if not segments:
        return "local", ""
    read = method in ("GET", "HEAD")
    first, count = segments[0], len(segments)
    if count == 1:
        if method == "GET" and first in _LISTINGS:
            return "listing", ""
        if method == "GET" and first in ("overview", "definitions"):
            return first, ""
        if method == "POST" and first == "definitions":
            return "import", ""
        return "local", ""
    if first in _VHOST_SCOPED:
        return "owner", segments[1]
    if first in _LINKS:
        return ("links", segments[1]) if count == 2 and method == "GET" else ("local", "")
    if first == "vhosts":
        if count == 2 and read:
            return "owner", segments[1]
        if count == 3 and segments[2] in ("connections", "channels"):
            return "owner", segments[1]
        return "local", ""
    if first == "definitions" and count == 2:
        if read:
            return "owner", segments[1]
        if method == "POST":
            return "import-vhost", segments[1]
    if first == "connections" and count in (2, 3):
        return "find", ""
    if first == "channels" and count == 2 and read:
        return "find", ""
    if method == "GET" and segments[1:] in (["checks", "alarms"], ["checks", "local-alarms"]):
        return ("alarms", "") if first == "health" else ("local", "")
    return "local", ""


# -- merging -----------------------------------------------------------------------------------
def _documents(answers: Sequence[Answer]) -> list[Any]:
    return [orjson.loads(body) for _status, _headers, body in answers]


def _sum(a: Any, b: Any) -> Any:
    """Numbers added, objects merged key by key, rate samples added by timestamp; anything
    else: ``a``."""
    if _number(a) and _number(b):
        return a + b
    if isinstance(a, dict) and isinstance(b, dict):
        out = dict(a)
        for key, value in b.items():
            if key == "samples" and isinstance(a.get(key), list) and isinstance(value, list):
                out[key] = _samples(a[key], value)
            else:
                out[key] = _sum(a[key], value) if key in a else value
        return out
    return a


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _samples(a: list[Any], b: list[Any]) -> list[Any]:
    extra: dict[Any, Any] = {}
    for point in b:
        if isinstance(point, dict) and _number(point.get("sample")):
            extra[point.get("timestamp")] = extra.get(point.get("timestamp"), 0) + point["sample"]
    out = []
    for point in a:
        if isinstance(point, dict) and _number(point.get("sample")):
            point = {**point, "sample": point["sample"] + extra.get(point.get("timestamp"), 0)}
        out.append(point)
    return out


def merge_overview(documents: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Worker 0's overview with the totals and message counters of every worker summed."""
    out = dict(documents[0])
    for key in ("object_totals", "queue_totals", "message_stats", "churn_rates"):
        for document in documents[1:]:
            if key in document:
                out[key] = _sum(out[key], document[key]) if key in out else document[key]
    return out


def _owned(owner: Callable[[str], int], vhost: Any, index: int) -> bool:
    return vhost is None or not isinstance(vhost, str) or owner(vhost) == index


def merge_rows(
    documents: Sequence[Any], owner: Callable[[str], int], vhost_of: VhostOf = _row_vhost
) -> list[dict[str, Any]]:
    """Every worker's rows, each of a vhost taken from the vhost's owner only."""
    return [
        row
        for index, rows in enumerate(documents)
        for row in rows
        if isinstance(row, dict) and _owned(owner, vhost_of(row), index)
    ]


def merge_definitions(documents: Sequence[Any], owner: Callable[[str], int]) -> dict[str, Any]:
    """Worker 0's export with every worker's queues, exchanges and bindings."""
    out = dict(documents[0])
    for section in _TOPOLOGY:
        rows = [document.get(section) or [] for document in documents]
        out[section] = merge_rows(rows, owner, lambda row: row.get("vhost", "/"))
    return out


# -- the management gateway --------------------------------------------------------------------
def management_gateway(
    app: ASGIApp, workers: int, owner: Callable[[str], int], call: WorkerCall
) -> ASGIApp:
    """Worker 0's management ``app`` answering for all ``workers`` (the table above);
    ``owner(vhost)``, asked per request, is the placement; ``call`` reaches the workers
    (``call(0, ...)`` must be ``app`` in-process: `unix_caller`)."""

    async def ask(index: int, request: _Request, body: bytes | None = None) -> Answer:
        if body is None:
            body = await request.body()
        return await _ask(
            call, index, request.method, request.path, request.query, request.headers, body
        )

    async def listing_of(request: _Request) -> Answer:
        kind = _LISTINGS[request.segments[0]]
        kept = [
            (key, value)
            for key, value in parse_qsl(request.query.decode("latin-1"), keep_blank_values=True)
            if key not in _LISTING_PARAMETERS
        ]
        query = urlencode(kept).encode("latin-1")
        answers = await _ask_all(call, workers, "GET", request.path, query, request.headers)
        failed = _failed(answers)
        if failed is not None:
            return failed
        documents = _documents(answers)
        if not all(isinstance(document, list) for document in documents):
            return answers[0]  # not a listing after all: as worker 0 answered
        rows = merge_rows(documents, owner, kind.vhost)
        try:
            return _json(200, listing.present(rows, request.params(), kind.order))
        except ApiError as exc:  # the pagination parameters, as the app refuses them
            response = exc.response()
            return response.status_code, list(response.raw_headers), bytes(response.body)

    async def merged(request: _Request, merge: Callable[[list[Any]], Any]) -> Answer:
        answers = await _ask_all(call, workers, "GET", request.path, request.query, request.headers)
        failed = _failed(answers)
        if failed is not None:
            return failed
        documents = _documents(answers)
        if not all(isinstance(document, dict) for document in documents):
            return answers[0]
        return _json(200, merge(documents))

    async def alarms(request: _Request) -> Answer:
        answers = await _ask_all(call, workers, "GET", request.path, request.query, request.headers)
        other = next((a for a in answers if a[0] not in (200, 503)), None)
        if other is not None:
            return other
        failing = [a for a in answers if a[0] == 503]
        if not failing:
            return answers[0]
        documents = _documents(failing)
        out = dict(documents[0])
        out["alarms"] = [
            alarm
            for index, document in enumerate(documents)
            for alarm in document.get("alarms", [])
            if alarm not in [a for d in documents[:index] for a in d.get("alarms", [])]
        ]
        return _json(503, out)

    async def find(request: _Request) -> Answer:
        body = await request.body()
        first: Answer | None = None
        for index in range(workers):
            answer = await ask(index, request, body)
            if answer[0] != 404:
                return answer
            first = first or answer
        assert first is not None
        return first

    async def links(request: _Request, vhost: str) -> Answer:
        checked = await ask(owner(vhost), request)  # the vhost exists, the user may see it
        if checked[0] != 200:
            return checked
        collection = "/api/" + request.segments[0]
        answers = await _ask_all(call, workers, "GET", collection, b"", request.headers)
        failed = _failed(answers)
        if failed is not None:
            return failed
        documents = _documents(answers)
        return _json(
            200,
            [
                row
                for rows in documents
                if isinstance(rows, list)
                for row in rows
                if isinstance(row, dict) and row.get("vhost") == vhost
            ],
        )

    async def import_all(request: _Request) -> Answer:
        body = await request.body()
        document = _json_object(body)
        if document is None or not _topology_rows(document, _TOPOLOGY):
            return await ask(0, request, body)  # malformed, or nothing for other workers
        access = {key: value for key, value in document.items() if key not in _TOPOLOGY}
        answer = await ask(0, request, orjson.dumps(access))
        if answer[0] >= 300:
            return answer
        # the vhosts exist now (and are placed): each one's topology to its owner
        shares: dict[int, dict[str, list[Any]]] = {}
        for section in _TOPOLOGY:
            for row in document.get(section) or []:
                index = owner(str(row.get("vhost", "/")))
                shares.setdefault(index, {}).setdefault(section, []).append(row)
        for index in sorted(shares):
            answer = await ask(index, request, orjson.dumps(shares[index]))
            if answer[0] >= 300:
                return answer
        return answer

    async def import_vhost(request: _Request, vhost: str, index: int) -> Answer:
        body = await request.body()
        document = _json_object(body)
        if document is None or not _topology_rows(document, (*_VHOST_ACCESS, *_TOPOLOGY)):
            return await ask(index, request, body)  # the owner answers what is wrong
        access = {
            section: [{**row, "vhost": vhost} for row in document.get(section) or []]
            for section in _VHOST_ACCESS
        }
        if any(access.values()):
            answer = await _ask(
                call,
                0,
                "POST",
                "/api/definitions",
                request.query,
                request.headers,
                orjson.dumps(access),
            )
            if answer[0] >= 300:
                return answer
        topology = {section: document.get(section) or [] for section in _TOPOLOGY}
        return await ask(index, request, orjson.dumps(topology))

    async def gateway(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or workers <= 1:
            await app(scope, receive, send)
            return
        request = _parse(scope, receive)
        action, vhost = _plan(request.method, request.segments)
        index = owner(vhost) if vhost else 0
        if action == "owner" or (action == "import-vhost" and index == 0):
            if index == 0:
                await app(scope, receive, send)
                return
            answer = await ask(index, request)
        elif action == "listing":
            answer = await listing_of(request)
        elif action == "overview":
            answer = await merged(request, merge_overview)
        elif action == "definitions":
            answer = await merged(request, lambda documents: merge_definitions(documents, owner))
        elif action == "import":
            answer = await import_all(request)
        elif action == "import-vhost":
            answer = await import_vhost(request, vhost, index)
        elif action == "links":
            answer = await links(request, vhost)
        elif action == "find":
            answer = await find(request)
        elif action == "alarms":
            answer = await alarms(request)
        else:
            await app(scope, receive, send)
            return
        await _send(send, *answer)

    return gateway


def _json_object(body: bytes) -> dict[str, Any] | None:
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return document if isinstance(document, dict) else None


def _topology_rows(document: dict[str, Any], sections: Sequence[str]) -> bool:
    """Whether ``sections`` of ``document`` are lists of objects (absent: empty) and some of
    them are not empty."""
    found = False
    for section in sections:
        rows = document.get(section) or []
        if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
            return False
        found = found or bool(rows)
    return found


# -- the Prometheus gateway --------------------------------------------------------------------
def metrics_gateway(app: ASGIApp, workers: int, call: WorkerCall) -> ASGIApp:
    """Worker 0's Prometheus ``app`` answering /metrics, /metrics/per-object and
    /metrics/detailed with every worker's families merged (amqpd/shell/workers/
    metrics_merge.py), gzipped as the app does when the client accepts it."""

    async def merged(scope: Scope, receive: Receive, send: Send) -> None:
        request = _parse(scope, receive)
        answers = await _ask_all(call, workers, "GET", request.path, request.query, request.headers)
        failed = _failed(answers)
        if failed is not None:
            await _send(send, *failed)
            return
        texts = [body.decode("utf-8") for _status, _headers, body in answers]
        body = await anyio.to_thread.run_sync(merge_expositions, texts)
        content_type = next(
            (v for n, v in answers[0][1] if n.lower() == b"content-type"), CONTENT_TYPE.encode()
        )
        await _send(send, 200, [(b"content-type", content_type)], body)

    zipped = GZipMiddleware(merged, minimum_size=1024)

    async def gateway(scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and workers > 1
            and scope["method"] == "GET"
            and scope["path"] in _METRICS_PATHS
        ):
            await zipped(scope, receive, send)
        else:
            await app(scope, receive, send)

    return gateway
