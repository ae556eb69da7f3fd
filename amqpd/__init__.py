"""amqpd: an AMQP 0-9-1 message broker that RabbitMQ clients use unchanged."""

from amqpd.buildinfo import BuildInfo, select

__version__ = "0.1.0"

# Before any compiled module is imported: the mypyc-compiled core, or pure Python when the
# build is pure, AMQPD_PURE is set or a compiled module's source changed (amqpd/buildinfo.py).
BUILD: BuildInfo = select()

RABBITMQ_VERSION = "3.10.8"
"""The one RabbitMQ release amqpd presents itself as, everywhere: Connection.Start's
``version``, /api/overview's ``rabbitmq_version`` and ``management_version``,
``rabbitmq_build_info``, and definitions exports' ``rabbit_version``. Clients and tools
decide behaviour from it, and it is the release amqpd's behaviour is compared with."""
