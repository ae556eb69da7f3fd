"""What a channel checks when a client consumes from or settles deliveries of a stream
(amqpd/model/stream.py), with RabbitMQ 3.10's reply codes and texts:

* basic.consume: ``no_ack`` is a connection error (540); no per-consumer prefetch (none, 0,
  or only a global basic.qos) is 406; the consumer arguments (``x-stream-offset`` …) are
  checked before basic.consume-ok is sent (406).
* basic.nack / basic.reject / basic.recover of a stream delivery: 540 (a connection error;
  RabbitMQ answers basic.recover with 541 INTERNAL_ERROR).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from amqpd.engine.unacked import Unacked
from amqpd.model.queue import Queue
from amqpd.model.stream_args import not_supported, parse_consumer_args, prefetch_not_set


def check_stream_consume(
    queue: Queue, no_ack: bool, consumer_prefetch: int, arguments: dict[str, Any], now: float
) -> None:
    """Refuse a consumer a stream does not take (see the module docstring).

    Raises:
        AMQPError: 540 for no_ack, 406 for a missing prefetch or a bad argument.
    """
    if queue.settings.queue_type != "stream":  # a StreamQueue, or another worker's stream
        return
    if no_ack:
        raise not_supported("automatic acknowledgement", queue.name, queue.vhost_name)
    if not consumer_prefetch:
        raise prefetch_not_set(queue.name, queue.vhost_name)
    parse_consumer_args(arguments, now, f"for queue '{queue.name}' in vhost '{queue.vhost_name}'")


def refuse_stream_settlement(records: Iterable[Unacked], what: str) -> None:
    """basic.nack / basic.reject / basic.recover of a stream's delivery: 540.

    Raises:
        AMQPError: 540 NOT_IMPLEMENTED, a connection error.
    """
    for record in records:
        queue = record.queue
        if queue.settings.queue_type == "stream":  # here or on another worker
            raise not_supported(what, queue.name, queue.vhost_name)
