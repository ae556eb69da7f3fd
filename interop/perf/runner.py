"""The coordinator: declare the topology, start the worker processes, collect, clean up.

Workers are started with the ``spawn`` method (no state inherited from this process). The
run starts at one shared instant, shortly after every worker reported ready; the broker's
CPU and memory (``--broker-pid``) are read at the end of the warm-up and at the end of the
run, so they cover the same window as the message counts.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import queue
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from interop.perf import topology
from interop.perf.client import AMQPClient
from interop.perf.options import PerfOptions
from interop.perf.procstat import ProcessSample
from interop.perf.results import WorkerResult, clock_for
from interop.perf.wire import BrokerAddress
from interop.perf.worker import CONSUMER, PRODUCER, WorkerPlan, split, worker_main

START_DELAY_NS = 100_000_000  # between "everyone is ready" and the start
READY_TIMEOUT = 60.0


class RunFailed(Exception):
    """A worker failed or the broker refused the topology."""


@dataclass(slots=True)
class BrokerUsage:
    """The broker process over the measured window."""

    pid: int
    before: ProcessSample
    after: ProcessSample

    @property
    def cpu_s(self) -> float:
        """CPU seconds the broker used in the window."""
        return self.after.cpu_s - self.before.cpu_s


@dataclass(slots=True)
class RunOutcome:
    """Everything a run produced, before aggregation."""

    options: PerfOptions
    results: list[WorkerResult]
    broker: BrokerUsage | None = None
    queue_depths: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def plans(options: PerfOptions) -> list[WorkerPlan]:
    """The worker processes of a run: producers first, then consumers."""
    out: list[WorkerPlan] = []
    for group in split(options.producers, options.producer_processes):
        out.append(WorkerPlan(len(out), PRODUCER, group, options))
    for group in split(options.consumers, options.consumer_processes):
        out.append(WorkerPlan(len(out), CONSUMER, group, options))
    return out


async def _with_client(options: PerfOptions, action: Callable[[AMQPClient], Any]) -> Any:
    client = await AMQPClient.connect(BrokerAddress.parse(options.url), "amqpd perf setup")
    try:
        return await action(client)
    finally:
        await client.close()


def run(options: PerfOptions, progress: TextIO | None = sys.stderr) -> RunOutcome:
    """Run one measurement and return the raw results.

    Raises:
        RunFailed: if a worker fails (its error text is in the message).
        OSError: if the broker cannot be reached.
    """
    if not options.predeclared:
        asyncio.run(_with_client(options, lambda c: topology.declare(c, options)))
    teardown = not (options.predeclared or options.keep_queues)
    try:
        outcome = _run_workers(options, progress)
        if not teardown:
            outcome.queue_depths = asyncio.run(
                _with_client(options, lambda c: topology.queue_depths(c, options))
            )
    except BaseException:
        if teardown:
            asyncio.run(_with_client(options, lambda c: topology.delete(c, options)))
        raise
    if teardown:
        left = asyncio.run(_with_client(options, lambda c: topology.delete(c, options)))
        if left is not None:
            outcome.warnings.append(left)
    return outcome


def _run_workers(options: PerfOptions, progress: TextIO | None) -> RunOutcome:
    ctx = multiprocessing.get_context("spawn")
    messages = ctx.Queue()
    go = ctx.Event()
    start = ctx.Value("q", 0)
    worker_plans = plans(options)
    processes = [
        ctx.Process(target=worker_main, args=(plan, messages, go, start), daemon=True)
        for plan in worker_plans
    ]
    for process in processes:
        process.start()
    try:
        _await_ready(messages, len(processes))
        clock = clock_for(options.wall_clock)
        start_ns = clock() + START_DELAY_NS
        start.value = start_ns
        go.set()
        return _collect(options, messages, processes, start_ns, clock, progress)
    except BaseException:
        for process in processes:  # a failed run: the others would wait or run on
            process.terminate()
        raise
    finally:
        for process in processes:
            process.join(timeout=10)
            if process.is_alive():
                process.terminate()


def _await_ready(messages: Any, count: int) -> None:
    ready = 0
    deadline = time.monotonic() + READY_TIMEOUT
    while ready < count:
        try:
            message = messages.get(timeout=max(deadline - time.monotonic(), 0.01))
        except queue.Empty:
            raise RunFailed("workers did not get ready in time") from None
        if message[0] == "error":
            raise RunFailed(f"worker {message[1]} failed: {message[2]}")
        if message[0] == "ready":
            ready += 1


def _collect(
    options: PerfOptions,
    messages: Any,
    processes: list[Any],
    start_ns: int,
    clock: Callable[[], int],
    progress: TextIO | None,
) -> RunOutcome:
    warm_ns = start_ns + int(options.warmup * 1e9)
    end_ns = None if options.duration is None else start_ns + int(options.duration * 1e9)
    pid = options.broker_pid
    before = after = None
    results: list[WorkerResult] = []
    ticker = _Progress(len(processes), options.interval, progress)
    while len(results) < len(processes):
        now = clock()
        if pid is not None and before is None and now >= warm_ns:
            before = ProcessSample.take(pid)
        if pid is not None and after is None and end_ns is not None and now >= end_ns:
            after = ProcessSample.take(pid)
        waits = [t for t in (warm_ns if before is None else None, end_ns) if t and t > now]
        timeout = min([(t - now) / 1e9 for t in waits] + [0.5])
        try:
            message = messages.get(timeout=max(timeout, 0.001))
        except queue.Empty:
            if not any(p.is_alive() for p in processes):
                raise RunFailed("every worker exited without a result") from None
            continue
        kind = message[0]
        if kind == "error":
            raise RunFailed(f"worker {message[1]} failed: {message[2]}")
        if kind == "progress":
            ticker.update(*message[1:])
        elif kind == "result":
            results.append(message[2])
    broker = None
    if pid is not None:
        if after is None:
            after = ProcessSample.take(pid)
        broker = BrokerUsage(pid, before or after, after)
    return RunOutcome(options, results, broker)


class _Progress:
    """Prints one line per interval once every worker has reported it."""

    def __init__(self, workers: int, interval: float, out: TextIO | None) -> None:
        self.workers = workers
        self.interval = interval
        self.out = out
        self.ticks: dict[int, dict[int, tuple[int, int, int]]] = {}
        self.last = (0, 0, 0)

    def update(self, worker: int, tick: int, sent: int, confirmed: int, received: int) -> None:
        """Record a worker's totals at ``tick``; print the tick when it is complete."""
        reports = self.ticks.setdefault(tick, {})
        reports[worker] = (sent, confirmed, received)
        if len(reports) < self.workers or self.out is None:
            return
        totals = tuple(sum(r[i] for r in reports.values()) for i in range(3))
        rates = [(totals[i] - self.last[i]) / self.interval for i in range(3)]
        self.last = (totals[0], totals[1], totals[2])
        del self.ticks[tick]
        print(
            f"time {tick * self.interval:6.1f} s  sent {rates[0]:10,.0f} msg/s  "
            f"confirmed {rates[1]:10,.0f} msg/s  received {rates[2]:10,.0f} msg/s",
            file=self.out,
            flush=True,
        )
