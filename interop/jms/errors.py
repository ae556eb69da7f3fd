"""The JMS exception hierarchy (names as in ``javax.jms`` so habits and log searches carry over).

Every exception the client raises on purpose is a `JMSException`. Broker refusals carry the
AMQP reply code and text (``reply_code`` / ``reply_text``) so an operator can match them with
the broker's log.
"""

from __future__ import annotations

__all__ = [
    "ConfigurationError",
    "IllegalStateException",
    "InvalidClientIDException",
    "InvalidDestinationException",
    "InvalidSelectorException",
    "JMSException",
    "MessageFormatException",
    "TransactionRolledBackException",
]


class JMSException(Exception):
    """Base class of every error raised by `interop.jms`.

    Attributes:
        reply_code: The AMQP reply code when the broker refused something (e.g. 406), else None.
        reply_text: The broker's reply text, else None.
    """

    def __init__(
        self, message: str, *, reply_code: int | None = None, reply_text: str | None = None
    ) -> None:
        super().__init__(message)
        self.reply_code = reply_code
        self.reply_text = reply_text


class IllegalStateException(JMSException):
    """A method was called at a time or in a mode that does not allow it."""


class InvalidDestinationException(JMSException):
    """The destination is not valid for this operation (e.g. publishing to a wildcard)."""


class InvalidSelectorException(JMSException):
    """A message selector does not parse, or selectors are not supported here (queues)."""


class InvalidClientIDException(JMSException):
    """The client id is already in use by another connection."""


class TransactionRolledBackException(JMSException):
    """``commit()`` failed; the broker rolled the transaction back."""


class MessageFormatException(JMSException):
    """A body or property value cannot be carried by the message type or by AMQP."""


class ConfigurationError(JMSException, ValueError):
    """An option (URL key, keyword, destination option) is unknown or has a bad value."""
