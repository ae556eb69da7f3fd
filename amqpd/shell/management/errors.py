"""The management API's errors: RabbitMQ's HTTP statuses and ``{"error", "reason"}`` bodies
(rabbit_mgmt_util: not_found, bad_request, not_authorised), and how a core refusal
(`AMQPError`) becomes one, as RabbitMQ's ``with_channel`` maps a channel close."""

from __future__ import annotations

from typing import Any, Final

from starlette.responses import Response

from amqpd.shell.management.render import Json
from amqpd.wire.errors import ACCESS_REFUSED, NOT_FOUND, AMQPError

REALM: Final = 'Basic realm="RabbitMQ Management"'
CHALLENGE: Final = {"WWW-Authenticate": REALM}


class ApiError(Exception):
    """An error answer: HTTP ``status``, RabbitMQ's ``error`` word and ``reason`` (a string,
    or a list where RabbitMQ renders an Erlang tuple such as ``["not_boolean", "x"]``)."""

    def __init__(
        self,
        status: int,
        error: str,
        reason: Any,
        headers: dict[str, str] | None = None,
        body: bool = True,
    ) -> None:
        super().__init__(f"{status} {error}: {reason}")
        self.status = status
        self.error = error
        self.reason = reason
        self.headers = headers or {}
        self.body = body

    def response(self) -> Response:
        """The HTTP answer."""
        if not self.body:
            return Response(status_code=self.status, headers=self.headers)
        return Json(
            {"error": self.error, "reason": self.reason},
            status_code=self.status,
            headers=self.headers,
        )


def not_found() -> ApiError:
    """404 for an object that does not exist (RabbitMQ's resource_exists = false)."""
    return ApiError(404, "Object Not Found", "Not Found")


def vhost_not_found() -> ApiError:
    """404 for a change in a vhost that does not exist."""
    return ApiError(404, "not_found", "vhost_not_found")


def bad_request(reason: Any) -> ApiError:
    """400 with RabbitMQ's ``bad_request``."""
    return ApiError(400, "bad_request", reason)


def not_authorised(reason: str) -> ApiError:
    """401 for an authenticated user the tag or vhost rules refuse (no challenge header
    is needed, but RabbitMQ sends it with every 401)."""
    return ApiError(401, "not_authorised", reason, CHALLENGE)


def login_failed() -> ApiError:
    """401 for wrong or unusable credentials."""
    return ApiError(401, "not_authorized", "Login failed", CHALLENGE)


def no_credentials() -> ApiError:
    """401 without a body for a request without credentials: the browser's challenge."""
    return ApiError(401, "not_authorized", "", CHALLENGE, body=False)


def from_amqp(exc: AMQPError, prefixed: bool = False) -> ApiError:
    """The answer RabbitMQ's management gives when its internal channel is closed with
    ``exc``: 404 not_found, 403 -> 401 not_authorised "Access refused.", others 400
    bad_request. ``prefixed`` keeps the reply-code name (``NOT_FOUND - ...``) as RabbitMQ
    does where the error comes from a method on a channel rather than a lookup."""
    text = str(exc) if prefixed else exc.text
    if exc.reply_code == NOT_FOUND:
        return ApiError(404, "not_found", text)
    if exc.reply_code == ACCESS_REFUSED:
        return not_authorised("Access refused.")
    return bad_request(text)
