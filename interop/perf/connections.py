"""``--idle-connections``: open many connections with one channel each, then hold them.

Reports how long opening all of them took (handshakes ``--connect-concurrency`` at a time),
the per-connection open latency, and with ``--broker-pid`` the broker's resident memory
per connection.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from interop.perf.client import AMQPClient, BrokerClosed
from interop.perf.options import PerfOptions
from interop.perf.procstat import ProcessSample
from interop.perf.stats import Histogram
from interop.perf.wire import BrokerAddress

HANDSHAKE_TIMEOUT = 30.0


@dataclass(slots=True)
class ConnectionsOutcome:
    """What opening and holding the connections cost."""

    count: int
    open_s: float
    latency: Histogram
    before: ProcessSample | None
    opened: ProcessSample | None

    def rss_per_connection_kb(self) -> float | None:
        """Broker RSS growth per open connection, KiB (None without --broker-pid)."""
        if self.before is None or self.opened is None or not self.count:
            return None
        return (self.opened.rss_kb - self.before.rss_kb) / self.count

    def as_json(self) -> dict[str, Any]:
        """Plain JSON data."""
        out: dict[str, Any] = {
            "connections": self.count,
            "open_s": round(self.open_s, 4),
            "open_latency_us": self.latency.summary().as_dict(),
        }
        if self.before is not None and self.opened is not None:
            out["broker"] = {
                "rss_kb_before": self.before.rss_kb,
                "rss_kb": self.opened.rss_kb,
                "hwm_kb": self.opened.hwm_kb,
                "rss_kb_per_connection": self.rss_per_connection_kb(),
            }
        return out

    def text(self) -> str:
        """A human-readable summary."""
        s = self.latency.summary()
        lines = [
            f"opened {self.count:,} connections (one channel each) in {self.open_s:.3f} s; "
            f"per connection p50 {s.percentiles[50.0] / 1000:.2f} ms, "
            f"p99 {s.percentiles[99.0] / 1000:.2f} ms"
        ]
        per = self.rss_per_connection_kb()
        if per is not None and self.before is not None and self.opened is not None:
            lines.append(
                f"broker RSS {self.before.rss_kb / 1024:.1f} -> {self.opened.rss_kb / 1024:.1f}"
                f" MiB: {per:.1f} KiB per connection"
            )
        return "\n".join(lines)


async def _open_one(
    address: BrokerAddress, n: int, gate: asyncio.Semaphore, latency: Histogram
) -> AMQPClient:
    async with gate:
        began = time.perf_counter_ns()
        try:
            client = await asyncio.wait_for(
                AMQPClient.connect(address, f"amqpd perf idle {n}"), HANDSHAKE_TIMEOUT
            )
        except TimeoutError:
            raise BrokerClosed(
                f"connection {n} not open after {HANDSHAKE_TIMEOUT:g} s (a broker limit on "
                "sockets or file descriptors?)"
            ) from None
        latency.record((time.perf_counter_ns() - began) // 1000)
        return client


async def hold_connections(options: PerfOptions, settle: float = 1.0) -> ConnectionsOutcome:
    """Open ``options.idle_connections`` connections, measure, hold, close them all."""
    address = BrokerAddress.parse(options.url)
    pid = options.broker_pid
    before = ProcessSample.take(pid) if pid is not None else None
    gate = asyncio.Semaphore(options.connect_concurrency)
    latency = Histogram()
    began = time.perf_counter()
    tasks = [
        asyncio.create_task(_open_one(address, n, gate, latency))
        for n in range(options.idle_connections)
    ]
    try:
        clients = await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        opened_ok = [
            t.result() for t in tasks if t.done() and not t.cancelled() and not t.exception()
        ]
        await asyncio.gather(*(c.close() for c in opened_ok))
        raise
    open_s = time.perf_counter() - began
    try:
        await asyncio.sleep(settle)  # let the broker finish its per-connection work
        opened = ProcessSample.take(pid) if pid is not None else None
        await asyncio.sleep(max((options.duration or 0) - settle, 0))
    finally:
        gate = asyncio.Semaphore(options.connect_concurrency)

        async def close(client: AMQPClient) -> None:
            async with gate:
                await client.close()

        await asyncio.gather(*(close(c) for c in clients))
    return ConnectionsOutcome(len(clients), open_s, latency, before, opened)
