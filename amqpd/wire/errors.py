"""AMQP errors a client can cause, with RabbitMQ's reply codes.

One exception type carries (reply_code, text, class_id, method_id). Whether it closes the
channel or the whole connection is decided by the reply code, exactly as RabbitMQ does it
(``rabbit_framing:lookup_amqp_exception``): 3xx/4xx "soft" codes close the channel, 5xx "hard"
codes and 320 close the connection.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final


class ReplyCode(IntEnum):
    """AMQP 0-9-1 reply codes (the spec's constants, with RabbitMQ's names)."""

    OK = 200
    CONTENT_TOO_LARGE = 311
    NO_ROUTE = 312
    NO_CONSUMERS = 313
    CONNECTION_FORCED = 320
    INVALID_PATH = 402
    ACCESS_REFUSED = 403
    NOT_FOUND = 404
    RESOURCE_LOCKED = 405
    PRECONDITION_FAILED = 406
    FRAME_ERROR = 501
    SYNTAX_ERROR = 502
    COMMAND_INVALID = 503
    CHANNEL_ERROR = 504
    UNEXPECTED_FRAME = 505
    RESOURCE_ERROR = 506
    NOT_ALLOWED = 530
    NOT_IMPLEMENTED = 540
    INTERNAL_ERROR = 541

    @property
    def closes_connection(self) -> bool:
        """True for hard errors (320, 402, 5xx), which close the whole connection; the soft
        ones close only the channel (``rabbit_framing:lookup_amqp_exception``)."""
        return self not in _SOFT_CODES


_SOFT_CODES: Final = frozenset(
    {
        ReplyCode.CONTENT_TOO_LARGE,
        ReplyCode.NO_ROUTE,
        ReplyCode.NO_CONSUMERS,
        ReplyCode.ACCESS_REFUSED,
        ReplyCode.NOT_FOUND,
        ReplyCode.RESOURCE_LOCKED,
        ReplyCode.PRECONDITION_FAILED,
    }
)

# Module-level names for the codes the core raises (``from amqpd.wire.errors import NOT_FOUND``).
CONTENT_TOO_LARGE: Final = ReplyCode.CONTENT_TOO_LARGE
NO_ROUTE: Final = ReplyCode.NO_ROUTE
NO_CONSUMERS: Final = ReplyCode.NO_CONSUMERS
CONNECTION_FORCED: Final = ReplyCode.CONNECTION_FORCED
INVALID_PATH: Final = ReplyCode.INVALID_PATH
ACCESS_REFUSED: Final = ReplyCode.ACCESS_REFUSED
NOT_FOUND: Final = ReplyCode.NOT_FOUND
RESOURCE_LOCKED: Final = ReplyCode.RESOURCE_LOCKED
PRECONDITION_FAILED: Final = ReplyCode.PRECONDITION_FAILED
FRAME_ERROR: Final = ReplyCode.FRAME_ERROR
SYNTAX_ERROR: Final = ReplyCode.SYNTAX_ERROR
COMMAND_INVALID: Final = ReplyCode.COMMAND_INVALID
CHANNEL_ERROR: Final = ReplyCode.CHANNEL_ERROR
UNEXPECTED_FRAME: Final = ReplyCode.UNEXPECTED_FRAME
RESOURCE_ERROR: Final = ReplyCode.RESOURCE_ERROR
NOT_ALLOWED: Final = ReplyCode.NOT_ALLOWED
NOT_IMPLEMENTED: Final = ReplyCode.NOT_IMPLEMENTED
INTERNAL_ERROR: Final = ReplyCode.INTERNAL_ERROR


def reply_name(code: int) -> str:
    """RabbitMQ's name for a reply code (``NOT_FOUND``), or the number for an unknown one."""
    try:
        return ReplyCode(code).name
    except ValueError:
        return str(code)


class AMQPError(Exception):
    """An error to report to the peer with Channel.Close or Connection.Close.

    Attributes:
        reply_code: the AMQP reply code (e.g. 404).
        text: the reply text without the code name (the name is prefixed on the wire).
        class_id: class of the method that caused it (0 if none).
        method_id: method that caused it (0 if none).
    """

    def __init__(self, reply_code: int, text: str, class_id: int = 0, method_id: int = 0) -> None:
        super().__init__(f"{reply_name(reply_code)} - {text}")
        self.reply_code = reply_code
        self.text = text
        self.class_id = class_id
        self.method_id = method_id

    @property
    def closes_connection(self) -> bool:
        """True for hard errors, which close the whole connection."""
        try:
            return ReplyCode(self.reply_code).closes_connection
        except ValueError:
            return True

    @property
    def reply_text(self) -> str:
        """The reply text as RabbitMQ puts it on the wire: ``NAME - text``, shortened to
        fit a shortstr (`shortstr_text`)."""
        return shortstr_text(str(self))


def shortstr_text(text: str) -> str:
    """``text`` if its UTF-8 form fits a shortstr (255 bytes), else its first 252 bytes and
    "..." (rabbit_binary_generator's amqp_exception_explanation), cut at a character
    boundary: a reply text naming a long non-ASCII queue must still encode."""
    raw = text.encode()
    if len(raw) <= 255:
        return text
    return raw[:252].decode(errors="ignore") + "..."


def not_found(kind: str, name: str, vhost: str) -> AMQPError:
    """404 for a missing queue or exchange, worded like RabbitMQ."""
    return AMQPError(NOT_FOUND, f"no {kind} '{name}' in vhost '{vhost}'")


def precondition_failed(text: str) -> AMQPError:
    """406 PRECONDITION_FAILED."""
    return AMQPError(PRECONDITION_FAILED, text)


def access_refused(text: str) -> AMQPError:
    """403 ACCESS_REFUSED."""
    return AMQPError(ACCESS_REFUSED, text)
