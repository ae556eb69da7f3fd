"""Where the broker's memory goes, in the shape of RabbitMQ 3.10.8's
``/api/nodes/{node}/memory``, and the per-queue residency counts behind the Prometheus
``rabbitmq_queue_messages_persistent*`` / ``..._paged_out*`` families (sans-IO).

Python has no per-object accounting like the Erlang VM's, so the breakdown is an estimate
from what the core holds, each figure under the RabbitMQ key whose meaning is closest:

- ``binary``: message bodies held in memory (ready and unacked; a paged-out body is not
  held);
- ``queue_procs``: the queues' own structures: one `QueueEntry` and one `Message` object per
  ready message, its content header included (``ENTRY_BYTES``), plus ``QUEUE_BYTES`` per
  queue;
- ``connection_readers``: bytes received and not yet parsed, ``connection_writers``: output
  waiting to be written, ``connection_channels``: channels and their unacked records,
  ``connection_other``: ``CONNECTION_BYTES`` per connection;
- ``msg_index``: the store's page caches (SQLite's writer cache, given by the shell);
- ``other_system``: the rest of the process's resident memory: the Python interpreter, its
  modules and allocator, libraries (RSS minus everything above);
- the other RabbitMQ keys (mnesia, plugins, mgmt_db, code, atom, ...) are 0.

``total``: ``rss`` is the process's resident set (what the memory alarm compares with the
watermark), ``erlang`` the sum of the estimated items, ``allocated`` the RSS again.

Cost: O(1) per queue (the queues keep their residency counters, model/residency.py).
"""

from __future__ import annotations

from typing import Any, Final

from amqpd.engine.client_inventory import open_connections
from amqpd.model.broker import Broker

ENTRY_BYTES: Final = 320  # a QueueEntry + a Message (slotted objects) + the deque slot
QUEUE_BYTES: Final = 4096  # a queue's objects: settings, statistics, consumer ring
CONNECTION_BYTES: Final = 16384  # a connection's engine objects, TLS and socket buffers
CHANNEL_BYTES: Final = 2048
UNACKED_BYTES: Final = 120  # one unacked record (tag, entry, consumer)

RABBIT_KEYS: Final = (
    "connection_readers",
    "connection_writers",
    "connection_channels",
    "connection_other",
    "queue_procs",
    "queue_slave_procs",
    "quorum_queue_procs",
    "quorum_queue_dlx_procs",
    "stream_queue_procs",
    "stream_queue_replica_reader_procs",
    "stream_queue_coordinator_procs",
    "plugins",
    "other_proc",
    "metrics",
    "mgmt_db",
    "mnesia",
    "quorum_ets",
    "other_ets",
    "binary",
    "msg_index",
    "code",
    "atom",
    "other_system",
    "allocated_unused",
    "reserved_unallocated",
)


def breakdown(broker: Broker, rss: int, store_cache: int) -> dict[str, Any]:
    """``/api/nodes/{node}/memory``'s ``memory`` object (see the module's text)."""
    items = dict.fromkeys(RABBIT_KEYS, 0)
    messages = 0
    queues = 0
    for vhost in broker.vhosts.values():
        for queue in vhost.queues.values():
            queues += 1
            messages += len(queue.ready)
            items["binary"] += queue.ready_bytes - queue.residency.paged_out_bytes
    for connection in open_connections(broker):
        items["connection_other"] += CONNECTION_BYTES
        items["connection_readers"] += connection.input_buffered
        items["connection_writers"] += connection.output_size
        for channel in connection.channels.values():
            unacked = list(channel.unacked.records())
            items["connection_channels"] += CHANNEL_BYTES + UNACKED_BYTES * len(unacked)
            for record in unacked:
                if record.entry.message.body is not None:
                    items["binary"] += record.entry.message.body_size
    items["queue_procs"] = QUEUE_BYTES * queues + ENTRY_BYTES * messages
    items["msg_index"] = store_cache
    accounted = sum(items.values())
    items["other_system"] = max(rss - accounted, 0)
    total = sum(items.values())
    return {**items, "strategy": "rss", "total": {"erlang": total, "rss": rss, "allocated": rss}}
