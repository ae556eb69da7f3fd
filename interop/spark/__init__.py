"""PySpark connector: publish DataFrames to an AMQP 0-9-1 broker with publisher confirms.

Usage::

    from interop.spark import AmqpDataSource

    spark.dataSource.register(AmqpDataSource)
    df.write.format("amqp").option("url", url).option("routingKey", "q").mode("append").save()

Needs the ``spark`` extra (``pip install amqpd[spark]``: pyspark >= 4.0, pyarrow, pika). The
pure parts (``publisher``, ``window``, ``mapping``) import no Spark, so ``AmqpDataSource`` is
imported lazily.
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

if TYPE_CHECKING:
    from interop.spark.datasource import AmqpDataSource

__all__ = [
    "AmqpDataSource",
    "BrokerNacked",
    "ChannelClosed",
    "ConfigError",
    "ConfirmTimeout",
    "ConnectError",
    "ConnectionLost",
    "MessageReturned",
    "PublishError",
    "RowError",
]


def __getattr__(name: str) -> Any:
    if name == "AmqpDataSource":
        from interop.spark.datasource import AmqpDataSource

        return AmqpDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
