"""A worker process: runs some producers or some consumers in one event loop.

Protocol with the coordinator (over one multiprocessing queue): the worker connects and
sets up every client, sends ``("ready", worker)``, waits for the shared start time, runs,
sends ``("progress", worker, sent, confirmed, received)`` every interval and finally
``("result", worker, WorkerResult)``; on failure ``("error", worker, text)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import traceback
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from multiprocessing.queues import Queue
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from typing import Any

from interop.perf.client import AMQPClient, BrokerClosed
from interop.perf.consumer import Consumer
from interop.perf.options import PerfOptions
from interop.perf.procstat import self_cpu_seconds
from interop.perf.producer import Producer
from interop.perf.results import ConsumerStats, ProducerStats, RunWindow, WorkerResult
from interop.perf.wire import BrokerAddress

PRODUCER = "producer"
CONSUMER = "consumer"


@dataclass(frozen=True, slots=True)
class WorkerPlan:
    """What one worker process runs."""

    worker: int
    role: str
    indices: tuple[int, ...]
    options: PerfOptions


def split(count: int, parts: int) -> list[tuple[int, ...]]:
    """Spread indices 0..count-1 round-robin over at most ``parts`` non-empty groups."""
    groups = [tuple(range(start, count, parts)) for start in range(min(parts, count))]
    return [group for group in groups if group]


def worker_main(
    plan: WorkerPlan, messages: Queue[Any], go: Event, start: Synchronized[int]
) -> None:
    """Process entry point (must be importable for the spawn start method)."""
    try:
        _run_loop(_work(plan, messages, go, start))
    except (BrokerClosed, OSError) as exc:
        messages.put(("error", plan.worker, str(exc)))
    except BaseException as exc:  # everything goes back to the coordinator
        messages.put(("error", plan.worker, f"{exc!r}\n{traceback.format_exc()}"))


def _run_loop(main: Coroutine[Any, Any, None]) -> None:
    """Run ``main`` on uvloop when it is installed, else on asyncio's default loop."""
    factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    with contextlib.suppress(ImportError):
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main)


async def _work(
    plan: WorkerPlan, messages: Queue[Any], go: Event, start: Synchronized[int]
) -> None:
    options = plan.options
    address = BrokerAddress.parse(options.url)
    clients: list[AMQPClient] = []
    producer_stats = ProducerStats()
    consumer_stats = ConsumerStats()
    workers: list[Producer | Consumer] = []
    try:
        for index in plan.indices:
            client = await AMQPClient.connect(address, f"amqpd perf {plan.role} {index}")
            clients.append(client)
            if plan.role == PRODUCER:
                stats = ProducerStats()
                workers.append(Producer(client, options, index, stats))
            else:
                workers.append(Consumer(client, options, index, ConsumerStats()))
        for worker in workers:
            await worker.setup()
        messages.put(("ready", plan.worker))
        await asyncio.get_running_loop().run_in_executor(None, go.wait)
        window = _window(options, start.value)
        await asyncio.sleep(max(window.start_ns - window.now(), 0) / 1e9)
        cpu = asyncio.create_task(_cpu_at(window.warm_ns, window))
        progress = asyncio.create_task(_progress(plan, messages, workers, window))
        try:
            await asyncio.gather(*(worker.run(window) for worker in workers))
        finally:
            progress.cancel()
        cpu_end = self_cpu_seconds()
        cpu_warm = await cpu if cpu.done() else cpu_end
        cpu.cancel()
        for worker in workers:
            if isinstance(worker, Producer):
                producer_stats.merge(worker.stats)
            else:
                consumer_stats.merge(worker.stats)
        finished = max(producer_stats.finished_ns, consumer_stats.finished_ns)
        result = WorkerResult(
            worker=plan.worker,
            role=plan.role,
            tasks=len(workers),
            cpu_s=cpu_end - cpu_warm,
            wall_s=max(finished - window.warm_ns, 0) / 1e9,
            producers=producer_stats,
            consumers=consumer_stats,
        )
    finally:
        await asyncio.gather(*(client.close() for client in clients))
    messages.put(("result", plan.worker, result))


def _window(options: PerfOptions, start_ns: int) -> RunWindow:
    warm = start_ns + int(options.warmup * 1e9)
    end = None if options.duration is None else start_ns + int(options.duration * 1e9)
    return RunWindow(start_ns, warm, end, options.wall_clock)


async def _cpu_at(when_ns: int, window: RunWindow) -> float:
    """This process's CPU seconds at ``when_ns`` (the end of the warm-up)."""
    await asyncio.sleep(max(when_ns - window.now(), 0) / 1e9)
    return self_cpu_seconds()


async def _progress(
    plan: WorkerPlan,
    messages: Queue[Any],
    workers: list[Producer | Consumer],
    window: RunWindow,
) -> None:
    """Report running totals every interval (aligned on the start time)."""
    interval = plan.options.interval
    if not interval:
        return
    tick = 1
    while True:
        due = window.start_ns + int(tick * interval * 1e9)
        await asyncio.sleep(max(due - window.now(), 0) / 1e9)
        sent = confirmed = received = 0
        for worker in workers:
            if isinstance(worker, Producer):
                sent += worker.stats.sent_total
                confirmed += worker.stats.confirmed
            else:
                received += worker.stats.received_total
        messages.put(("progress", plan.worker, tick, sent, confirmed, received))
        tick += 1
