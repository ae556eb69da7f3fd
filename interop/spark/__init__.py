"""PySpark connector: publish DataFrames to an AMQP 0-9-1 broker with publisher confirms
(``amqp``), and read streams (``x-queue-type: stream``) back into Spark (``amqp-stream``).

Usage::

    from interop.spark import AmqpDataSource

    spark.dataSource.register(AmqpDataSource)
    df.write.format("amqp").option("url", url).option("routingKey", "q").mode("append").save()

Needs the ``spark`` extra (``pip install amqpd[spark]``: pyspark >= 4.0, pyarrow, pika). The
pure parts (``publisher``, ``window``, ``mapping``) import no Spark, so ``AmqpDataSource`` and
``activate_session`` are imported lazily. ``wait_for_broker(url)`` waits until a broker
answers (for scripts that start one and publish at once).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from interop.spark.errors import (
    BrokerNacked,
    ChannelClosed,
    ConfigError,
    ConfirmTimeout,
    ConnectError,
    ConnectionLost,
    MessageReturned,
    PublishError,
    RowError,
)
from interop.spark.preflight import wait_for_broker

if TYPE_CHECKING:
    from interop.spark.datasource import AmqpDataSource
    from interop.spark.session import activate_session
    from interop.spark.stream_source import AmqpStreamDataSource

__all__ = [
    "AmqpDataSource",
    "AmqpStreamDataSource",
    "BrokerNacked",
    "ChannelClosed",
    "ConfigError",
    "ConfirmTimeout",
    "ConnectError",
    "ConnectionLost",
    "MessageReturned",
    "PublishError",
    "RowError",
    "activate_session",
    "wait_for_broker",
]


def __getattr__(name: str) -> Any:
    if name == "AmqpDataSource":
        from interop.spark.datasource import AmqpDataSource

        return AmqpDataSource
    if name == "AmqpStreamDataSource":
        from interop.spark.stream_source import AmqpStreamDataSource

        return AmqpStreamDataSource
    if name == "activate_session":
        from interop.spark.session import activate_session

        return activate_session
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
