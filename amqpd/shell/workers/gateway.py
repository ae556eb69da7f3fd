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
``GET /api/nodes[/{name}]``                               every worker: worker 0's node with
                                                          memory, fds, sockets, processes,
                                                          store bytes summed, alarms or-ed
``GET /api/nodes/{name}/memory``                         every worker: the breakdowns summed
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
/api/vhosts/{vhost}``, whoami, cluster-name, the
other health checks, the dashboard
========================================================  ===================================

A spread vhost (``--spread-vhosts``, docs/multicore.md "Stage 2") is on every worker: its
queues, consumers, connections and channels are merged from every worker (listings, ``GET
/api/{queues,consumers}/{vhost}``, ``GET /api/vhosts/{vhost}/{connections,channels}``, the
definitions' queues), ``/api/queues/{vhost}/{name}...`` goes to the first worker that does
not answer 404 (the queue's), and everything else of it to worker 0, which has every one of
its exchanges and bindings (a change there is sent to the other workers). The overview's
``object_totals.exchanges`` counts them once: worker K leaves its copies out of its own
overview (amqpd/shell/management/node.py); the Prometheus merge takes the cluster-wide
exchange series from worker 0 (metrics_merge.py).

Left at worker 0: ``HEAD`` of a merged listing. The rates' ``*_details.samples`` of a
merged overview are summed by timestamp (a point that only some workers have counts the
others as 0; ``avg`` and ``avg_rate`` are summed as well).

Worker 0 never gets a request over a socket: ``call(0, ...)`` is the wrapped app in-process
(`unix_caller`). A request for worker 0 alone is passed to the wrapped app unchanged.

The client's address goes along as ``X-Forwarded-For`` (any the client sent is replaced),
so that the loopback rule (``loopback_users``: guest) holds on every worker: a worker's
socket listener must trust it (uvicorn's ``forwarded_allow_ips="*"``: the socket is private
to the workers' runtime directory), and `asgi_call` takes it for worker 0. A worker that
does not answer (its socket refuses, a timeout) makes a merged request 503.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import parse_qsl, quote, unquote, urlencode

import anyio
import anyio.to_thread
import orjson
from starlette.datastructures import QueryParams
from starlette.middleware.gzip import GZipMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from amqpd.shell.management import listing
from amqpd.shell.management.errors import ApiError
from amqpd.shell.metrics import CONTENT_TYPE
from amqpd.shell.workers.gateway_merge import (
    EVERY_WORKER,
    LISTINGS,
    TOPOLOGY,
    documents_of,
    merge_alarms,
    merge_definitions,
    merge_nodes,
    merge_overview,
    merge_rows,
    merge_summed,
    merge_vhosts,
)
from amqpd.shell.workers.metrics_merge import merge_expositions
from amqpd.shell.workers.worker_calls import (
    FORWARDED_FOR,
    HOP_REQUEST,
    HOP_RESPONSE,
    Answer,
    Headers,
    UnixCaller,
    WorkerCall,
    ask_every_worker,
    ask_worker,
    first_failure,
    json_answer,
    unix_caller,
)

# UnixCaller and unix_caller (worker_calls.py) re-exported: server.py and node.py make the
# gateways' `call` with them
__all__ = ["UnixCaller", "management_gateway", "metrics_gateway", "unix_caller"]

_LISTING_PARAMETERS: Final = frozenset(
    {"page", "page_size", "name", "use_regex", "sort", "sort_reverse", "columns"}
)
_VHOST_ACCESS: Final = ("parameters", "policies")  # what a per-vhost import also holds
_METRICS_PATHS: Final = frozenset({"/metrics", "/metrics/per-object", "/metrics/detailed"})


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
    headers = [(n, v) for n, v in scope["headers"] if n.lower() not in HOP_REQUEST]
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
    kept = [(n, v) for n, v in headers if n.lower() not in HOP_RESPONSE]
    kept.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": kept})
    await send({"type": "http.response.body", "body": body})


# -- what goes where ---------------------------------------------------------------------------
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
        if method == "GET" and first in LISTINGS:
            return "listing", ""
        if method == "GET" and first in ("overview", "definitions", "nodes"):
            return first, ""
        if method == "POST" and first == "definitions":
            return "import", ""
        return "local", ""
    if first == "nodes" and count == 2 and method == "GET":
        return "nodes", ""
    if first == "nodes" and segments[2:] == ["memory"] and method == "GET":
        return "summed", ""
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


# a spread vhost's rows of these are on every worker (the others: each worker has them all)
_SPREAD_ROWS: Final = frozenset({"queues", "consumers", "connections", "channels"})


def _plan_spread(method: str, segments: list[str]) -> str:
    """What to do with a request for a spread vhost (docs/multicore.md "Stage 2") that would
    go to the vhost's one worker: its queue and consumer listings merge every worker's, a
    queue goes to the worker that has it, the rest to worker 0 ("owner": it has every
    exchange and binding, and a queue declared there is replicated)."""
    first, count = segments[0], len(segments)
    if method == "GET" and count == 2 and first in ("queues", "consumers"):
        return "listing"
    if first == "queues" and count >= 3:
        return "find"
    if method == "GET" and first == "vhosts" and count == 3:
        return "rows"  # its connections or channels
    if method == "GET" and first == "vhosts" and count == 2:
        return "summed"  # its messages and rates, every worker's
    return "owner"


# -- the management gateway --------------------------------------------------------------------
def management_gateway(
    app: ASGIApp,
    workers: int,
    placed: Callable[[str], int],
    call: WorkerCall,
    spread: Callable[[str], bool] = lambda _vhost: False,
) -> ASGIApp:
    """Worker 0's management ``app`` answering for all ``workers`` (the table above);
    ``placed(vhost)``, asked per request, is the placement; ``spread(vhost)``: whether the
    vhost lives on every worker (its queues, consumers, connections and channels are on
    all of them, each worker has all its exchanges and bindings: worker 0 answers for
    those); ``call`` reaches the workers (``call(0, ...)`` must be ``app`` in-process:
    `unix_caller`)."""

    def owner(vhost: str) -> int:
        """Where a vhost's exchanges and bindings are (and everything of a vhost that is
        not spread)."""
        return 0 if spread(vhost) else placed(vhost)

    def owner_of(collection: str) -> Callable[[str], int]:
        """Where a vhost's rows of ``collection`` are."""
        if collection not in _SPREAD_ROWS:
            return owner
        return lambda vhost: EVERY_WORKER if spread(vhost) else placed(vhost)

    async def ask(index: int, request: _Request, body: bytes | None = None) -> Answer:
        if body is None:
            body = await request.body()
        return await ask_worker(
            call, index, request.method, request.path, request.query, request.headers, body
        )

    async def listing_of(request: _Request) -> Answer:
        kind = LISTINGS[request.segments[0]]
        kept = [
            (key, value)
            for key, value in parse_qsl(request.query.decode("latin-1"), keep_blank_values=True)
            if key not in _LISTING_PARAMETERS
        ]
        query = urlencode(kept).encode("latin-1")
        answers = await ask_every_worker(call, workers, "GET", request.path, query, request.headers)
        failed = first_failure(answers)
        if failed is not None:
            return failed
        documents = documents_of(answers)
        if not all(isinstance(document, list) for document in documents):
            return answers[0]  # not a listing after all: as worker 0 answered
        if request.segments[0] == "vhosts":
            rows = merge_vhosts(documents, owner, spread)
        else:
            rows = merge_rows(documents, owner_of(request.segments[0]), kind.vhost)
        try:
            return json_answer(200, listing.present(rows, request.params(), kind.order))
        except ApiError as exc:  # the pagination parameters, as the app refuses them
            response = exc.response()
            return response.status_code, list(response.raw_headers), bytes(response.body)

    async def merged(
        request: _Request, merge: Callable[[list[Any]], Any], shape: type | None = dict
    ) -> Answer:
        """Every worker's answer, merged; as worker 0 answered if one is not of ``shape``."""
        answers = await ask_every_worker(
            call, workers, "GET", request.path, request.query, request.headers
        )
        failed = first_failure(answers)
        if failed is not None:
            return failed
        documents = documents_of(answers)
        if shape is not None and not all(isinstance(document, shape) for document in documents):
            return answers[0]
        return json_answer(200, merge(documents))

    async def alarms(request: _Request) -> Answer:
        answers = await ask_every_worker(
            call, workers, "GET", request.path, request.query, request.headers
        )
        other = next((a for a in answers if a[0] not in (200, 503)), None)
        if other is not None:
            return other
        failing = [a for a in answers if a[0] == 503]
        if not failing:
            return answers[0]
        return json_answer(503, merge_alarms(documents_of(failing)))

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
        answers = await ask_every_worker(call, workers, "GET", collection, b"", request.headers)
        failed = first_failure(answers)
        if failed is not None:
            return failed
        documents = documents_of(answers)
        return json_answer(
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
        if document is None or not _topology_rows(document, TOPOLOGY):
            return await ask(0, request, body)  # malformed, or nothing for other workers
        access = {key: value for key, value in document.items() if key not in TOPOLOGY}
        answer = await ask(0, request, orjson.dumps(access))
        if answer[0] >= 300:
            return answer
        # the vhosts exist now (and are placed): each one's topology to its owner
        shares: dict[int, dict[str, list[Any]]] = {}
        for section in TOPOLOGY:
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
        if document is None or not _topology_rows(document, (*_VHOST_ACCESS, *TOPOLOGY)):
            return await ask(index, request, body)  # the owner answers what is wrong
        access = {
            section: [{**row, "vhost": vhost} for row in document.get(section) or []]
            for section in _VHOST_ACCESS
        }
        if any(access.values()):
            answer = await ask_worker(
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
        topology = {section: document.get(section) or [] for section in TOPOLOGY}
        return await ask(index, request, orjson.dumps(topology))

    async def gateway(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or workers <= 1:
            await app(scope, receive, send)
            return
        request = _parse(scope, receive)
        action, vhost = _plan(request.method, request.segments)
        if vhost and action == "owner" and spread(vhost):
            action = _plan_spread(request.method, request.segments)
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
        elif action == "nodes":
            answer = await merged(request, merge_nodes, shape=None)
        elif action == "summed":  # the node's memory, a spread vhost's figures
            answer = await merged(request, merge_summed)
        elif action == "definitions":
            answer = await merged(
                request,
                lambda documents: merge_definitions(documents, owner, owner_of("queues")),
            )
        elif action == "import":
            answer = await import_all(request)
        elif action == "import-vhost":
            answer = await import_vhost(request, vhost, index)
        elif action == "links":
            answer = await links(request, vhost)
        elif action == "find":
            answer = await find(request)
        elif action == "rows":  # a spread vhost's connections or channels: every worker's
            answer = await merged(request, lambda rows: [r for part in rows for r in part], list)
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
        answers = await ask_every_worker(
            call, workers, "GET", request.path, request.query, request.headers
        )
        failed = first_failure(answers)
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
