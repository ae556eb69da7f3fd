"""One producer: a connection publishing pre-encoded batches, in plain, confirm or tx mode.

The publish loop writes up to ``--batch`` messages per socket write, all stamped with the
time of the write, and yields to the event loop after each write. A reader task handles
what the broker sends back: coalesced confirms (settled in `ConfirmTracker`, giving the
publish->confirm latency), tx.commit-ok, returns, and a channel or connection close.
"""

from __future__ import annotations

import asyncio
import contextlib

from pamqp import commands

from interop.perf.client import CHANNEL, AMQPClient, BrokerClosed, closed_error, decode_method
from interop.perf.confirms import ConfirmTracker
from interop.perf.options import PerfOptions
from interop.perf.results import ProducerStats, RunWindow
from interop.perf.topology import producer_route
from interop.perf.wire import (
    BASIC_ACK,
    BASIC_NACK,
    BASIC_RETURN,
    FRAME_METHOD,
    METHOD_INDEX,
    TX_COMMIT_OK,
    decode_confirm,
    encode_tx_commit,
    publish_template,
)

RATE_TICK = 0.002  # seconds: a rate-limited producer writes at most this often


class Producer:
    """Publishes for one run; `setup` before the start, then `run`."""

    def __init__(
        self, client: AMQPClient, options: PerfOptions, index: int, stats: ProducerStats
    ) -> None:
        self.client = client
        self.options = options
        self.stats = stats
        route = producer_route(options, index)
        self.template = publish_template(
            CHANNEL,
            options.exchange,
            route.routing_key,
            options.size,
            client.frame_max,
            persistent=options.persistent,
            headers=route.headers,
            mandatory=options.mandatory,
        )
        self.tracker = ConfirmTracker()
        self.commits_ok = 0
        self.error: BaseException | None = None
        self._wakeup = asyncio.Event()
        self._window: RunWindow | None = None

    async def setup(self) -> None:
        """Put the channel in confirm or tx mode, as the options ask."""
        if self.options.confirm:
            await self.client.call(commands.Confirm.Select(), commands.Confirm.SelectOk)
        elif self.options.tx_size:
            await self.client.call(commands.Tx.Select(), commands.Tx.SelectOk)

    async def run(self, window: RunWindow) -> None:
        """Publish until the window ends or ``--pmessages`` are published (and settled).

        Raises:
            BrokerClosed: if the broker closes the channel or connection.
        """
        self._window = window
        reader = asyncio.create_task(self._read_loop())
        try:
            if self.options.tx_size:
                await self._publish_tx(window)
            else:
                await self._publish(window)
        finally:
            self.stats.finished_ns = min(window.now(), window.end_ns or 1 << 63)
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        if self.error is not None:
            raise self.error

    async def _wait(self, deadline_ns: int | None) -> None:
        """Wait for the reader to report progress, or until ``deadline_ns``."""
        if not self._wakeup.is_set():
            assert self._window is not None
            timeout = None
            if deadline_ns is not None:
                timeout = max(deadline_ns - self._window.now(), 0) / 1e9
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wakeup.wait()
        self._wakeup.clear()
        if self.error is not None:
            raise self.error

    async def _publish(self, window: RunWindow) -> None:
        opts = self.options
        template, tracker, stats = self.template, self.tracker, self.stats
        writer = self.client.writer
        now_ns = window.now
        end, warm, start = window.end_ns, window.warm_ns, window.start_ns
        limit, confirm, rate = opts.pmessages, opts.confirm, opts.rate
        step = max(1, int(rate * RATE_TICK))  # messages per wake-up when rate-limited
        sent = 0
        while True:
            if self.error is not None:
                raise self.error
            now = now_ns()
            if end is not None and now >= end:
                return
            room = opts.batch
            if limit:
                room = min(room, limit - sent)
                if room <= 0:
                    if confirm and tracker.outstanding:
                        await self._wait(end)
                        continue
                    return
            if confirm:
                room = min(room, confirm - tracker.outstanding)
            deadline = end
            if rate:
                due = int(rate * (now - start) / 1e9) + 1 - sent
                if due < room:
                    room = due
                    if room <= 0:  # sleep until a tick's worth of messages is due
                        deadline = start + int((sent + step - 1) / rate * 1e9)
            if room <= 0:
                await self._wait(deadline)
                continue
            writer.write(template.batch(now, room))
            if confirm:
                tracker.publish(room, now)
            sent += room
            stats.sent_total += room
            if now >= warm:
                stats.published += room
            await writer.drain()
            await asyncio.sleep(0)

    async def _publish_tx(self, window: RunWindow) -> None:
        opts = self.options
        template, stats = self.template, self.stats
        writer = self.client.writer
        commit = encode_tx_commit(CHANNEL)
        end, warm = window.end_ns, window.warm_ns
        limit = opts.pmessages
        sent = commits = 0
        while True:
            now = window.now()
            if end is not None and now >= end:
                return
            room = opts.tx_size if not limit else min(opts.tx_size, limit - sent)
            if room <= 0:
                return
            writer.write(template.batch(now, room) + commit)
            commits += 1
            sent += room
            stats.sent_total += room
            while self.commits_ok < commits:
                await self._wait(end)
                if end is not None and window.now() >= end:
                    return
            done = window.now()
            if now >= warm:
                stats.published += room
                stats.confirmed += room
                stats.confirm_latency.record((done - now) // 1000, room)

    async def _read_loop(self) -> None:
        """Handle confirms, commit-oks, returns and closes until cancelled."""
        assert self._window is not None
        window = self._window
        stats, tracker = self.stats, self.tracker
        try:
            while True:
                for frame_type, _channel, payload in await self.client.read_frames():
                    if frame_type != FRAME_METHOD:
                        continue
                    index = METHOD_INDEX.unpack_from(payload, 0)[0]
                    if index in (BASIC_ACK, BASIC_NACK):
                        tag, multiple = decode_confirm(payload)
                        stats.confirm_frames += 1
                        now = window.now()
                        for stamp, count in tracker.confirm(tag, multiple):
                            if stamp >= window.warm_ns:
                                if index == BASIC_ACK:
                                    stats.confirmed += count
                                else:
                                    stats.nacked += count
                                stats.confirm_latency.record((now - stamp) // 1000, count)
                    elif index == TX_COMMIT_OK:
                        self.commits_ok += 1
                    elif index == BASIC_RETURN:
                        stats.returned += 1
                    else:
                        method = decode_method(payload)
                        if method is not None and (error := closed_error(method)) is not None:
                            raise error
                self._wakeup.set()
        except (BrokerClosed, OSError) as exc:
            self.error = exc
            self._wakeup.set()
