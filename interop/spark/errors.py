"""Exceptions of the ``amqp`` sink.

``ConfigError`` is raised on the driver before any task runs (Spark wraps it in
``AnalysisException [PYTHON_DATA_SOURCE_ERROR]``). ``PublishError`` and its subclasses fail a
task; Spark retries the task and, after ``spark.task.maxFailures`` attempts, fails the job with
a ``PythonException`` that carries the class name and the message. No message ever contains
the broker password.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit

__all__ = [
    "BrokerNacked",
    "ChannelClosed",
    "ConfigError",
    "ConfirmTimeout",
    "ConnectError",
    "ConnectionLost",
    "MessageReturned",
    "PublishError",
    "RowError",
    "redact_url",
    "scrub",
]

_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://[^:@/?#]*):[^@/?#]*@")


class ConfigError(ValueError):
    """An option or the DataFrame schema is not acceptable; raised before any task runs."""


class RowError(ValueError):
    """A row holds a value the sink cannot send (a priority of 300, a null routing key…)."""


class PublishError(RuntimeError):
    """Publishing a partition failed; the task fails and Spark's retry republishes it.

    Attributes:
        retryable: True when a new connection may succeed (the task reconnects and
            republishes, within ``deliveryTimeout``); False when the broker refused on purpose
            and every attempt would fail the same way.
    """

    retryable = False

    def __init__(self, message: str, *, retryable: bool | None = None) -> None:
        super().__init__(message)
        if retryable is not None:
            self.retryable = retryable


class ConnectError(PublishError):
    """TCP connect, the AMQP handshake or ``confirm.select`` failed or timed out.

    Attributes:
        no_handshake: The server accepted the TCP connection but never started the AMQP
            handshake: not an AMQP port, or a frozen broker. A task gives up at once when
            that happens on its first connection, and retries when it had been connected.
    """

    no_handshake = False


class BrokerNacked(PublishError):
    """The broker answered ``basic.nack``: it did not take responsibility for a message."""


class MessageReturned(PublishError):
    """A mandatory message was returned (``basic.return``): no queue was bound for it."""


class ConfirmTimeout(PublishError):
    """No publisher confirm arrived for ``confirmTimeoutMs`` while messages were outstanding."""

    retryable = True


class ChannelClosed(PublishError):
    """The broker closed the publishing channel (``channel.close`` with a reply code)."""


class ConnectionLost(PublishError):
    """The connection closed or was blocked too long before every message was confirmed."""

    retryable = True


def redact_url(url: str) -> str:
    """Return ``url`` with the password replaced by ``***``.

    Args:
        url: An ``amqp://user:password@host:port/vhost`` URL.

    Returns:
        The same URL with any password replaced, e.g. ``amqp://guest:***@host/``.
    """
    return _USERINFO.sub(r"\1:***@", url)


def scrub(text: str, url: str) -> str:
    """Remove the password of ``url`` (raw and percent-decoded) from ``text``.

    Args:
        text: A message that may quote the URL or the password (e.g. a pika error).
        url: The broker URL the text relates to.

    Returns:
        ``text`` with the password replaced by ``***`` and the URL redacted.
    """
    text = text.replace(url, redact_url(url))
    try:
        password = urlsplit(url).password
    except ValueError:
        return text
    if password:
        for secret in {password, unquote(password)}:
            text = text.replace(secret, "***")
    return text
