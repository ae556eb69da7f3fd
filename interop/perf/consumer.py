"""One consumer: a connection with basic.qos and basic.consume, acking in batches.

Each received chunk is parsed in place by `DeliveryParser`; the publish->deliver latency is
taken once per chunk (one clock read) for every distinct publish stamp in it, and the acks
the chunk calls for (one per message, or one ``multiple`` ack every N messages, exactly
as PerfTest's -A does) are written with a single socket write.
"""

from __future__ import annotations

import asyncio

from pamqp import commands

from interop.perf.client import READ_SIZE, AMQPClient, BrokerClosed, closed_error, decode_method
from interop.perf.deliveries import DeliveryParser
from interop.perf.options import PerfOptions
from interop.perf.results import ConsumerStats, RunWindow
from interop.perf.topology import consumer_queue
from interop.perf.wire import encode_ack


def ack_frames(
    channel: int, tags: list[int], previous: int, count: int, every: int, tag_offset: int
) -> bytes:
    """The acks for deliveries ``previous+1 .. count`` (1-based delivery numbers).

    Args:
        channel: the consumer's channel.
        tags: the delivery tags of those deliveries (used when ``every`` is 0).
        previous: deliveries already acked or skipped before this chunk.
        count: deliveries received so far.
        every: 0 to ack each message singly, else one ``multiple`` ack per ``every``.
        tag_offset: delivery tag minus delivery number (0 when the broker numbers the
            channel's deliveries 1, 2, 3 ... as RabbitMQ does).
    """
    if every == 0:
        return b"".join([encode_ack(channel, tag, False) for tag in tags])
    first = (previous // every + 1) * every
    return b"".join(
        [encode_ack(channel, n + tag_offset, True) for n in range(first, count + 1, every)]
    )


class Consumer:
    """Consumes for one run; `setup` before the start, then `run`."""

    def __init__(
        self, client: AMQPClient, options: PerfOptions, index: int, stats: ConsumerStats
    ) -> None:
        self.client = client
        self.options = options
        self.index = index
        self.stats = stats
        self.queue = consumer_queue(options, index)
        self.parser = DeliveryParser(keep_tags=not options.auto_ack and not options.multi_ack_every)

    async def setup(self) -> None:
        """Set the prefetch count (basic.qos) if one is asked for."""
        if self.options.prefetch:
            await self.client.call(
                commands.Basic.Qos(prefetch_count=self.options.prefetch), commands.Basic.QosOk
            )

    async def run(self, window: RunWindow) -> None:
        """Consume until the window ends or ``--cmessages`` have arrived.

        Raises:
            BrokerClosed: if the broker closes the channel or connection.
        """
        self.client.send_method(
            commands.Basic.Consume(
                queue=self.queue, consumer_tag=f"perf-{self.index}", no_ack=self.options.auto_ack
            )
        )
        try:
            if window.end_ns is None:
                await self._consume(window)
            else:
                remaining = max(window.end_ns - window.now(), 0) / 1e9
                async with asyncio.timeout(remaining):
                    await self._consume(window)
        except TimeoutError:
            self.stats.finished_ns = window.end_ns or window.now()

    async def _consume(self, window: RunWindow) -> None:
        opts = self.options
        parser, stats = self.parser, self.stats
        reader, writer = self.client.reader, self.client.writer
        now_ns = window.now
        warm, limit = window.warm_ns, opts.cmessages
        every = opts.multi_ack_every
        acking = not opts.auto_ack
        record = stats.latency.record
        done = 0
        while True:
            data = await reader.read(READ_SIZE)
            if not data:
                raise BrokerClosed("the broker closed the socket")
            now = now_ns()
            parser.feed(data)
            if parser.methods:
                self._cold(parser.take_methods())
            count = parser.deliveries
            if count == done:
                continue
            if acking:
                tags = parser.take_tags()
                writer.write(ack_frames(1, tags, done, count, every, parser.last_tag - count))
            new = count - done
            if limit and count >= limit:
                new -= count - limit
            stats.received_total += new
            if now >= warm:
                stats.consumed += new
                for stamp, n in parser.take_stamps():
                    record((now - stamp) // 1000, n)
            else:
                parser.stamps.clear()
            done = count
            if limit and count >= limit:
                stats.finished_ns = now
                return
            stats.finished_ns = now

    def _cold(self, payloads: list[bytes]) -> None:
        for payload in payloads:
            method = decode_method(payload)
            if method is None:
                continue
            if isinstance(method, commands.Basic.Cancel):
                raise BrokerClosed(f"the broker cancelled consumer perf-{self.index}")
            if (error := closed_error(method)) is not None:
                raise error
