"""amqpd: an AMQP 0-9-1 message broker that RabbitMQ clients use unchanged."""

from amqpd.buildinfo import BuildInfo, select

__version__ = "0.1.0"

# Before any compiled module is imported: the mypyc-compiled core, or pure Python when the
# build is pure, AMQPD_PURE is set or a compiled module's source changed (amqpd/buildinfo.py).
BUILD: BuildInfo = select()
