"""Serve an ASGI application (the management API, Prometheus metrics) on the broker's own
event loop, with uvicorn.

The HTTP side shares the one process and loop with AMQP, as RabbitMQ's management plugin
shares its node: handlers read the core's state directly (no copies, no locks) and must
therefore never block; anything slow is bounded by the handler itself. uvicorn is embedded,
not run: it gets a socket bound here (so port 0 works in tests), it never installs signal
handlers (the broker owns SIGINT/SIGTERM), and it is stopped by cancelling the task that
called `serve_http` (its `should_exit` flag, then a bounded graceful shutdown).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Generator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import uvicorn

SHUTDOWN_TIMEOUT = 2.0


class _EmbeddedServer(uvicorn.Server):
    """uvicorn without its signal handling: the broker's shell owns the signals."""

    @contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (0: any free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def bind_unix(path: Path) -> socket.socket:
    """A listening Unix socket at ``path`` (only this user may connect)."""
    with suppress(FileNotFoundError):
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        path.chmod(0o600)
        sock.listen(128)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


async def serve_http(
    app: Any,
    sock: socket.socket,
    *,
    task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on the already bound ``sock`` until cancelled; reports the port."""
    config = uvicorn.Config(
        app,
        lifespan="off",
        access_log=False,
        log_config=None,
        log_level=logging.WARNING,
        server_header=False,
        timeout_graceful_shutdown=int(SHUTDOWN_TIMEOUT),
        # a Unix socket is only ever worker 0's gateway (mode 600, in the workers' private
        # directory): trust the client address it forwards (X-Forwarded-For)
        forwarded_allow_ips="*" if sock.family == socket.AF_UNIX else None,
    )
    server = _EmbeddedServer(config)
    name = sock.getsockname()
    port = int(name[1]) if isinstance(name, tuple) else 0  # 0: a Unix socket
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    task_status.started(port)
    try:
        await asyncio.shield(task)
    finally:
        server.should_exit = True
        with (
            anyio.CancelScope(shield=True),
            anyio.move_on_after(SHUTDOWN_TIMEOUT + 1),
            suppress(Exception, asyncio.CancelledError),
        ):
            await task
        if not task.done():
            task.cancel()
        sock.close()
