"""The rate sampler: turns the always-on counters into per-second rates (sans-IO).

Theory of operation
-------------------
The shell calls `RateSampler.sample(now)` every `SAMPLE_INTERVAL` seconds (RabbitMQ's
``collect_statistics_interval`` is 5 s too). Each queue, exchange, channel and connection
compares its counters with the previous sample (`Counters.sample`); the node totals are
the sum over open channels plus what closed channels left behind. A queue also records its
depth change (``messages_details.rate``), whether a consumer could take a message at that
moment (consumer utilisation, see amqpd/engine/inventory.py) and since when nothing
happened to it (``idle_since``). The cost is one pass over the objects per interval; the
hot path only increments integers.
"""

from __future__ import annotations

from typing import Final

from amqpd.engine import churn, history
from amqpd.engine.client_inventory import open_connections
from amqpd.engine.inventory import UTILISATION_WINDOW
from amqpd.engine.node_inventory import node_totals
from amqpd.engine.stream_inventory import sampled_ready
from amqpd.model.broker import Broker
from amqpd.model.queue import Queue
from amqpd.model.statistics import depth_rates

SAMPLE_INTERVAL: Final = 5.0  # seconds between samples (RabbitMQ's default)


class RateSampler:
    """Samples one broker's counters; `sample` is called by the shell with the time."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._last: float | None = None

    def sample(self, now: float) -> None:
        """Take a sample at ``now`` (unix seconds): rates cover the time since the last."""
        broker = self.broker
        interval = 0.0 if self._last is None else now - self._last
        self._last = now
        unacked: dict[Queue, int] = {}
        for connection in open_connections(broker):
            connection.stats.sample(interval)
            for channel in connection.channels.values():
                channel.stats.sample(interval)
                for record in channel.unacked.records():
                    unacked[record.queue] = unacked.get(record.queue, 0) + 1
        total_ready = total_unacked = 0
        for host in broker.vhosts.values():
            for exchange in host.exchanges.values():
                exchange.stats.sample(interval)
            for queue in host.queues.values():
                ready, held = len(queue.ready), unacked.get(queue, 0)
                total_ready += ready  # as the overview's queue_totals (no stream messages)
                total_unacked += held
                self._sample_queue(queue, sampled_ready(queue), held, interval, now)
        statistics = broker.statistics
        totals = node_totals(broker)
        for name in totals.FIELDS:
            setattr(statistics.totals, name, getattr(totals, name))
        statistics.totals.sample(interval)
        statistics.depth_rates = depth_rates(
            statistics.last_depth, total_ready, total_unacked, interval
        )
        statistics.last_depth = (total_ready, total_unacked)
        statistics.sampled_at = now
        history.record(broker, now)  # the samples behind lengths_age etc.
        churn.sample(statistics, interval)

    @staticmethod
    def _sample_queue(queue: Queue, ready: int, unacked: int, interval: float, now: float) -> None:
        stats = queue.stats
        moved = stats.sample(interval)
        depth = (ready, unacked)
        if depth != stats.last_depth:
            moved = True
        stats.depth_rates = depth_rates(stats.last_depth, ready, unacked, interval)
        stats.last_depth = depth
        if moved:
            stats.idle_since = None
        elif stats.idle_since is None:
            stats.idle_since = now
        consumers = queue.consumers
        could_deliver = (
            any(consumer.channel.has_credit(consumer) for consumer in consumers)
            if consumers
            else None
        )
        stats.sample_utilisation(could_deliver, UTILISATION_WINDOW)
