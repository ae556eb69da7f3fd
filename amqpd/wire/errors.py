"""AMQP errors a client can cause, with RabbitMQ's reply codes.

One exception type carries (reply_code, text, class_id, method_id). Whether it closes the
channel or the whole connection is decided by the reply code, exactly as RabbitMQ does it
(``rabbit_framing:lookup_amqp_exception``): 3xx/4xx "soft" codes close the channel, 5xx "hard"
codes and 320 close the connection.
"""

from __future__ import annotations

from typing import Final

CONTENT_TOO_LARGE: Final = 311
NO_ROUTE: Final = 312
NO_CONSUMERS: Final = 313
CONNECTION_FORCED: Final = 320
INVALID_PATH: Final = 402
ACCESS_REFUSED: Final = 403
NOT_FOUND: Final = 404
RESOURCE_LOCKED: Final = 405
PRECONDITION_FAILED: Final = 406
FRAME_ERROR: Final = 501
SYNTAX_ERROR: Final = 502
COMMAND_INVALID: Final = 503
CHANNEL_ERROR: Final = 504
UNEXPECTED_FRAME: Final = 505
RESOURCE_ERROR: Final = 506
NOT_ALLOWED: Final = 530
NOT_IMPLEMENTED: Final = 540
INTERNAL_ERROR: Final = 541

REPLY_NAMES: Final[dict[int, str]] = {
    200: "OK",
    CONTENT_TOO_LARGE: "CONTENT_TOO_LARGE",
    NO_ROUTE: "NO_ROUTE",
    NO_CONSUMERS: "NO_CONSUMERS",
    CONNECTION_FORCED: "CONNECTION_FORCED",
    INVALID_PATH: "INVALID_PATH",
    ACCESS_REFUSED: "ACCESS_REFUSED",
    NOT_FOUND: "NOT_FOUND",
    RESOURCE_LOCKED: "RESOURCE_LOCKED",
    PRECONDITION_FAILED: "PRECONDITION_FAILED",
    FRAME_ERROR: "FRAME_ERROR",
    SYNTAX_ERROR: "SYNTAX_ERROR",
    COMMAND_INVALID: "COMMAND_INVALID",
    CHANNEL_ERROR: "CHANNEL_ERROR",
    UNEXPECTED_FRAME: "UNEXPECTED_FRAME",
    RESOURCE_ERROR: "RESOURCE_ERROR",
    NOT_ALLOWED: "NOT_ALLOWED",
    NOT_IMPLEMENTED: "NOT_IMPLEMENTED",
    INTERNAL_ERROR: "INTERNAL_ERROR",
}

_SOFT_CODES: Final = frozenset(
    {
        CONTENT_TOO_LARGE,
        NO_ROUTE,
        NO_CONSUMERS,
        ACCESS_REFUSED,
        NOT_FOUND,
        RESOURCE_LOCKED,
        PRECONDITION_FAILED,
    }
)


class AMQPError(Exception):
    """An error to report to the peer with Channel.Close or Connection.Close.

    Attributes:
        reply_code: the AMQP reply code (e.g. 404).
        text: the reply text without the code name (the name is prefixed on the wire).
        class_id: class of the method that caused it (0 if none).
        method_id: method that caused it (0 if none).
    """

    def __init__(self, reply_code: int, text: str, class_id: int = 0, method_id: int = 0) -> None:
        super().__init__(f"{REPLY_NAMES.get(reply_code, str(reply_code))} - {text}")
        self.reply_code = reply_code
        self.text = text
        self.class_id = class_id
        self.method_id = method_id

    @property
    def closes_connection(self) -> bool:
        """True for hard errors, which close the whole connection."""
        return self.reply_code not in _SOFT_CODES

    @property
    def reply_text(self) -> str:
        """The reply text as RabbitMQ puts it on the wire: ``NAME - text``."""
        return str(self)[:255]


def not_found(kind: str, name: str, vhost: str) -> AMQPError:
    """404 for a missing queue or exchange, worded like RabbitMQ."""
    return AMQPError(NOT_FOUND, f"no {kind} '{name}' in vhost '{vhost}'")


def precondition_failed(text: str) -> AMQPError:
    """406 PRECONDITION_FAILED."""
    return AMQPError(PRECONDITION_FAILED, text)


def access_refused(text: str) -> AMQPError:
    """403 ACCESS_REFUSED."""
    return AMQPError(ACCESS_REFUSED, text)
