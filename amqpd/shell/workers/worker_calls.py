"""Reaching the workers for the gateways (amqpd/shell/workers/gateway.py): the `WorkerCall`
type, worker 0's app in-process (`asgi_call`) and worker K's over its Unix socket
(`UnixCaller`), and asking one worker or every worker at once, a worker that does not answer
standing as a 503. httpx is imported on the first call: only worker 0 of a ``--workers``
node makes any, so the other processes never load it (about 5 MiB each)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import anyio
import orjson
from starlette.types import ASGIApp

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)

Headers = list[tuple[bytes, bytes]]
Answer = tuple[int, Headers, bytes]
# (worker index, method, path (percent-encoded), raw query string, request headers, request
# body) -> (status, response headers, response body)
WorkerCall = Callable[[int, str, str, bytes, Headers, bytes], Awaitable[Answer]]

FORWARDED_FOR: Final = b"x-forwarded-for"
TIMEOUT: Final = 60.0  # seconds: a worker's listing of many queues
CONNECT_TIMEOUT: Final = 5.0
# set by the HTTP client from what it sends, or about the hop, not the request
HOP_REQUEST: Final = frozenset(
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
HOP_RESPONSE: Final = frozenset(
    {b"content-length", b"transfer-encoding", b"connection", b"keep-alive", b"content-encoding"}
)


# -- one request to one worker -----------------------------------------------------------------
def _timeout() -> httpx.Timeout:
    import httpx  # on first use (see the module's docstring)

    return httpx.Timeout(TIMEOUT, connect=CONNECT_TIMEOUT)


def _url(path: str, query: bytes) -> httpx.URL:
    import httpx

    raw = path.encode("ascii") + (b"?" + query if query else b"")
    return httpx.URL(scheme="http", host="worker", raw_path=raw)


def _outgoing(headers: Headers) -> Headers:
    return [(name, value) for name, value in headers if name.lower() not in HOP_REQUEST]


def _incoming(response: httpx.Response) -> Headers:
    return [
        (name, value) for name, value in response.headers.raw if name.lower() not in HOP_RESPONSE
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
    import httpx

    transport = httpx.ASGITransport(app=app, client=_forwarded_client(headers))
    async with httpx.AsyncClient(transport=transport, timeout=_timeout()) as client:
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
            import httpx

            transport = httpx.AsyncHTTPTransport(uds=str(self.sockets(index)), retries=1)
            client = self.clients[index] = httpx.AsyncClient(
                transport=transport, timeout=_timeout()
            )
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


# -- asking the workers ------------------------------------------------------------------------
def json_answer(status: int, content: Any) -> Answer:
    """A JSON answer, as the management app gives one."""
    headers = [(b"content-type", b"application/json"), (b"cache-control", b"no-cache")]
    return status, headers, orjson.dumps(content)


def _unavailable(index: int, exc: Exception) -> Answer:
    log.warning("worker %d did not answer the gateway: %r", index, exc)
    reason = f"worker {index} did not answer: {type(exc).__name__} {exc}".strip()
    return json_answer(503, {"error": "service_unavailable", "reason": reason})


async def ask_worker(
    call: WorkerCall,
    index: int,
    method: str,
    path: str,
    query: bytes,
    headers: Headers,
    body: bytes,
) -> Answer:
    import httpx

    try:
        return await call(index, method, path, query, headers, body)
    except (httpx.HTTPError, OSError) as exc:
        return _unavailable(index, exc)


async def ask_every_worker(
    call: WorkerCall, workers: int, method: str, path: str, query: bytes, headers: Headers
) -> list[Answer]:
    """Every worker's answer (in index order), asked at once."""
    answers: list[Answer | None] = [None] * workers

    async def one(index: int) -> None:
        answers[index] = await ask_worker(call, index, method, path, query, headers, b"")

    async with anyio.create_task_group() as group:
        for index in range(workers):
            group.start_soon(one, index)
    return [answer for answer in answers if answer is not None]


def first_failure(answers: Sequence[Answer]) -> Answer | None:
    """The first answer that is not 200 (it is the answer to the request), if any."""
    return next((answer for answer in answers if answer[0] != 200), None)
