"""The admin socket: how ``amqpd users|vhosts|definitions`` reach a running broker.

Part of the I/O shell. A broker with a data directory listens on the Unix socket
``<data-dir>/amqpd.sock`` (mode 0600, so only its own user and root can connect, and the
peer's uid is checked again with SO_PEERCRED) - the counterpart of ``rabbitmqctl``'s
Erlang-cookie access to a node. The protocol is one JSON request line (see
amqpd/admin_commands.py), answered by one JSON line ``{"ok": true, "output": "..."}`` or
``{"ok": false, "error": "..."}``, then the broker closes the connection.

The broker unlinks a leftover socket file when it starts (it holds the data directory's
lock, so no other broker uses it) and removes its own when it stops. The client treats a
missing socket, or one nobody listens on, as "no broker running" and the CLI then opens the
store itself.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import struct
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.abc
from anyio.abc import SocketAttribute
from anyio.streams.buffered import BufferedByteReceiveStream

from amqpd.model import bounded_json

__all__ = ["SOCKET_NAME", "AdminReply", "AdminSocketError", "send_request", "serve_admin"]

log = logging.getLogger(__name__)

SOCKET_NAME: Final = "amqpd.sock"
MAX_REQUEST: Final = 64 * 1024 * 1024  # a definitions import carries the whole document
REQUEST_TIMEOUT: Final = 30.0  # seconds a client may take to send its request
_SUN_PATH_MAX: Final = 107  # sockaddr_un.sun_path, less the terminating NUL


class AdminSocketError(Exception):
    """The running broker could not be asked (other than "no broker is running")."""


@dataclass(slots=True, frozen=True)
class AdminReply:
    """The broker's answer: the command's output, or why it was refused."""

    ok: bool
    text: str


Handler = Callable[[dict[str, Any]], Awaitable[AdminReply]]


def socket_path(data_dir: Path) -> Path:
    """Where the broker using ``data_dir`` listens."""
    return data_dir / SOCKET_NAME


async def serve_admin(
    data_dir: Path,
    handle: Handler,
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Answer admin requests until cancelled. ``handle`` turns a request into the reply;
    an exception it raises is logged and reported as an internal error (the broker and
    this listener keep serving)."""
    path = socket_path(data_dir)
    if len(os.fsencode(path)) > _SUN_PATH_MAX:
        log.warning(
            "no admin socket: %s is longer than a Unix socket path may be; `amqpd users|"
            "vhosts` need the broker stopped (or a shorter --data-dir)",
            path,
        )
        task_status.started()
        return
    with suppress(FileNotFoundError):
        path.unlink()
    listener = await anyio.create_unix_listener(path, mode=0o600)
    try:
        task_status.started()
        log.info("admin socket %s", path)
        async with listener:
            await listener.serve(lambda stream: _answer(stream, handle))
    finally:
        with suppress(OSError):
            path.unlink()


async def _answer(stream: anyio.abc.SocketStream, handle: Handler) -> None:
    async with stream:
        try:
            reply = await _reply(stream, handle)
        except Exception:  # one bad request must never stop the listener
            log.exception("admin request failed")
            reply = {"ok": False, "error": "internal error (see the broker's log)"}
        with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await stream.send(json.dumps(reply).encode() + b"\n")


async def _reply(stream: anyio.abc.SocketStream, handle: Handler) -> dict[str, Any]:
    receiver = BufferedByteReceiveStream(stream)
    try:
        # Read the request even from a peer that will be refused: closing a socket with
        # unread data resets it, and the client would see no answer.
        with anyio.fail_after(REQUEST_TIMEOUT):
            line = await receiver.receive_until(b"\n", MAX_REQUEST)
    except (TimeoutError, anyio.IncompleteRead, anyio.DelimiterNotFound) as exc:
        return {"ok": False, "error": f"malformed request: {exc!r}"}
    uid = _peer_uid(stream)
    if uid not in (0, os.geteuid()):
        log.warning("admin socket: refused a request from uid %d", uid)
        return {"ok": False, "error": f"uid {uid} may not administer this broker"}
    try:
        request = bounded_json.loads(line)
    except ValueError as exc:
        return {"ok": False, "error": f"malformed request: {exc}"}
    if not isinstance(request, dict):
        return {"ok": False, "error": "malformed request: not a JSON object"}
    reply = await handle(request)
    if reply.ok:
        return {"ok": True, "output": reply.text}
    return {"ok": False, "error": reply.text}


def _peer_uid(stream: anyio.abc.SocketStream) -> int:
    raw: socket.socket = stream.extra(SocketAttribute.raw_socket)
    creds = raw.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


def send_request(
    data_dir: Path, request: dict[str, Any], timeout: float = 120.0
) -> AdminReply | None:
    """Ask the broker running on ``data_dir``; None if no broker listens there.

    Raises:
        AdminSocketError: the broker is there but could not be asked (permissions, a
            broken reply, a timeout).
    """
    path = socket_path(data_dir)
    try:
        if not path.is_socket():
            return None
    except PermissionError as exc:
        raise _not_permitted(path, exc) from exc
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(os.fspath(path))
        except (ConnectionRefusedError, FileNotFoundError):
            return None  # left behind by a broker that was killed
        except PermissionError as exc:
            raise _not_permitted(path, exc) from exc
        except OSError as exc:
            raise AdminSocketError(f"cannot connect to {path}: {exc}") from exc
        try:
            sock.sendall(json.dumps(request).encode() + b"\n")
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except OSError as exc:
            raise AdminSocketError(f"no answer from the broker on {path}: {exc}") from exc
    try:
        reply = json.loads(b"".join(chunks))
        if reply["ok"]:
            return AdminReply(True, str(reply["output"]))
        return AdminReply(False, str(reply["error"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise AdminSocketError(f"unreadable answer from the broker on {path}") from exc


def _not_permitted(path: Path, exc: PermissionError) -> AdminSocketError:
    return AdminSocketError(
        f"cannot use {path}: {exc.strerror}; run the command as the broker's user"
    )
