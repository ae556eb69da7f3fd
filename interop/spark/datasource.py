"""``AmqpDataSource``: the ``amqp`` format for ``df.write`` and ``df.writeStream``."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from interop.spark.columns import plan_columns
from interop.spark.errors import ConfigError
from interop.spark.options import parse_options
from interop.spark.preflight import check_exchange
from interop.spark.writer import AmqpBatchWriter, AmqpStreamWriter

__all__ = ["AmqpDataSource"]

APPEND_ONLY = (
    "amqp sink: only append is supported, use .mode('append'); overwrite would need to take "
    "back messages already published, which AMQP cannot do"
)


class AmqpDataSource(DataSource):
    """Publish DataFrame rows to an AMQP 0-9-1 broker with publisher confirms.

    Register it once per session, then write with ``format("amqp")``::

        spark.dataSource.register(AmqpDataSource)
        (df.write.format("amqp")
           .option("url", "amqp://guest:guest@127.0.0.1:5672/%2F")
           .option("routingKey", "orders")
           .mode("append")
           .save())

    Options and the schema are validated in ``writer()`` / ``streamWriter()``, which Spark
    runs before any task, so mistakes surface as ``AnalysisException``.
    """

    @classmethod
    def name(cls) -> str:
        """The format name: ``amqp``."""
        return "amqp"

    def writer(self, schema: StructType, overwrite: bool) -> AmqpBatchWriter:
        """Validate options and schema and return the batch writer.

        Raises:
            ConfigError: Overwrite mode, a bad option or column, or a missing exchange.
        """
        if overwrite:
            raise ConfigError(APPEND_ONLY)
        options = parse_options(self.options)
        plan_columns(schema, options)
        check_exchange(options)
        return AmqpBatchWriter(options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> AmqpStreamWriter:
        """Validate options and schema and return the streaming writer.

        Every output mode is accepted, as in Spark's Kafka sink: in ``complete`` mode each
        micro-batch republishes the whole result table.

        Raises:
            ConfigError: A bad option or column, or a missing exchange.
        """
        options = parse_options(self.options, streaming=True)
        plan_columns(schema, options)
        check_exchange(options)
        return AmqpStreamWriter(options, schema)
