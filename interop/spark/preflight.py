"""Driver-side checks before any task runs (``checkExchange``), and ``wait_for_broker``.

``check_exchange`` connects once from the driver: wrong credentials, an unknown vhost and a
missing ``exchange`` then fail the write before any task (a task would fail the same way on
every attempt). A broker that cannot be reached is not an error here: the tasks wait for it
for up to ``deliveryTimeoutMs``, so a write started during a broker restart still succeeds.
"""

from __future__ import annotations

import logging
import time

import pika
import pika.exceptions

from interop.spark.errors import ConfigError, redact_url, scrub
from interop.spark.options import SinkOptions

__all__ = ["check_exchange", "wait_for_broker"]

log = logging.getLogger("interop.spark")

_REFUSALS = (
    pika.exceptions.AuthenticationError,
    pika.exceptions.ProbableAuthenticationError,
    pika.exceptions.ProbableAccessDeniedError,
)


def check_exchange(options: SinkOptions) -> None:
    """Connect from the driver and passive-declare ``options.exchange`` if it is set.

    Does nothing when ``checkExchange`` is false. The default exchange (``""``) and an unset
    ``exchange`` option (the column decides per row) are not declared.

    Raises:
        ConfigError: The broker refused the credentials or the vhost, or the exchange does
            not exist (404).
    """
    if not options.check_exchange:
        return
    params = pika.URLParameters(options.url)
    params.socket_timeout = params.stack_timeout = options.connect_timeout_ms / 1000
    params.blocked_connection_timeout = options.confirm_timeout_ms / 1000
    try:
        conn = pika.BlockingConnection(params)
    except _REFUSALS as exc:
        raise ConfigError(
            f"amqp sink: {options.redacted_url} refused the connection: "
            f"{scrub(repr(exc), options.url)}; check the user, password and vhost in the url "
            "option"
        ) from None
    except pika.exceptions.AMQPError as exc:
        log.warning(
            "amqp sink: checkExchange: cannot reach %s (%s); the tasks will wait for it for up "
            "to deliveryTimeoutMs",
            options.redacted_url,
            scrub(repr(exc), options.url),
        )
        return
    try:
        if options.exchange:
            channel = conn.channel()
            channel.exchange_declare(options.exchange, passive=True)
    except pika.exceptions.ChannelClosedByBroker as exc:
        vhost = params.virtual_host
        raise ConfigError(
            f"amqp sink: exchange {options.exchange!r} not found in vhost {vhost!r} "
            f"({exc.reply_code} {exc.reply_text}); declare it first or set checkExchange=false"
        ) from None
    finally:
        if conn.is_open:
            conn.close()


def wait_for_broker(url: str, timeout: float = 60.0) -> None:
    """Return once an AMQP broker accepts a connection at ``url``.

    For scripts that start a broker and publish right away: the broker's port may not be
    open yet.

    Args:
        url: ``amqp://user:pass@host:port/vhost``.
        timeout: Seconds to keep trying.

    Raises:
        ConfigError: The broker refused the credentials or vhost (no point waiting).
        TimeoutError: No broker answered within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    params = pika.URLParameters(url)
    params.socket_timeout = params.stack_timeout = 5.0
    while True:
        try:
            pika.BlockingConnection(params).close()
            return
        except _REFUSALS as exc:
            raise ConfigError(
                f"{redact_url(url)} refused the connection: {scrub(repr(exc), url)}"
            ) from None
        except pika.exceptions.AMQPConnectionError as exc:
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"no AMQP broker answered at {redact_url(url)} within {timeout:.0f} s "
                    f"(last error: {scrub(repr(exc), url)}); is it running?"
                ) from None
        time.sleep(0.25)
