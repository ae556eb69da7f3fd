"""Driver-side check that the configured exchange exists (``checkExchange``)."""

from __future__ import annotations

import pika
import pika.exceptions

from interop.spark.errors import ConfigError, scrub
from interop.spark.options import SinkOptions

__all__ = ["check_exchange"]


def check_exchange(options: SinkOptions) -> None:
    """Passive-declare ``options.exchange`` so a missing exchange fails before any task.

    Does nothing for the default exchange (``""``), when no exchange option is set (the
    column decides per row) or when ``checkExchange`` is false.

    Raises:
        ConfigError: The exchange does not exist (404) or the broker cannot be reached.
    """
    if not options.check_exchange or not options.exchange:
        return
    params = pika.URLParameters(options.url)
    params.socket_timeout = params.stack_timeout = options.connect_timeout_ms / 1000
    params.blocked_connection_timeout = options.confirm_timeout_ms / 1000
    try:
        conn = pika.BlockingConnection(params)
    except pika.exceptions.AMQPError as exc:
        raise ConfigError(
            f"amqp sink: checkExchange: cannot connect to {options.redacted_url}: "
            f"{scrub(repr(exc), options.url)}"
        ) from None
    try:
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
