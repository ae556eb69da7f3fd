"""Reduce a run's raw results to a summary, printed as text or JSON."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from interop.perf.options import PerfOptions
from interop.perf.results import ConsumerStats, ProducerStats, WorkerResult
from interop.perf.runner import BrokerUsage, RunOutcome
from interop.perf.stats import LatencySummary

CLIENT_BOUND = 0.9  # a worker busier than this share of a core may be the bottleneck


@dataclass(frozen=True, slots=True)
class Summary:
    """The figures of one run."""

    options: PerfOptions
    producer_s: float
    consumer_s: float
    producers: ProducerStats
    consumers: ConsumerStats
    workers: list[WorkerResult]
    broker: BrokerUsage | None
    queue_depths: dict[str, int]

    @property
    def published_rate(self) -> float:
        """Messages published per second in the window."""
        return _rate(self.producers.published, self.producer_s)

    @property
    def confirmed_rate(self) -> float:
        """Messages confirmed (or committed) per second in the window."""
        return _rate(self.producers.confirmed, self.producer_s)

    @property
    def consumed_rate(self) -> float:
        """Messages received per second in the window, all consumers together."""
        return _rate(self.consumers.consumed, self.consumer_s)

    @property
    def messages(self) -> int:
        """The message count broker CPU is divided by: received if anyone consumed, else
        confirmed (confirm or tx mode), else published."""
        if self.options.consumers:
            return self.consumers.consumed
        if self.options.confirm or self.options.tx_size:
            return self.producers.confirmed
        return self.producers.published

    def broker_cpu_per_100k(self) -> float | None:
        """Broker CPU seconds per 100,000 messages (None without --broker-pid)."""
        if self.broker is None or not self.messages:
            return None
        return self.broker.cpu_s / self.messages * 100_000


def _rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0


def summarise(outcome: RunOutcome) -> Summary:
    """Merge the workers' results; the window of each role ends when its last task ended."""
    producers, consumers = ProducerStats(), ConsumerStats()
    producer_s = consumer_s = 0.0
    for result in outcome.results:
        producers.merge(result.producers)
        consumers.merge(result.consumers)
        if result.role == "producer":
            producer_s = max(producer_s, result.wall_s)
        else:
            consumer_s = max(consumer_s, result.wall_s)
    workers = sorted(outcome.results, key=lambda r: r.worker)
    return Summary(
        outcome.options,
        producer_s,
        consumer_s,
        producers,
        consumers,
        workers,
        outcome.broker,
        outcome.queue_depths,
    )


def _latency_line(name: str, summary: LatencySummary) -> str:
    if not summary.count:
        return f"{name}: no samples"
    cells = "  ".join(f"p{pct:g} {value / 1000:.3f}" for pct, value in summary.percentiles.items())
    return (
        f"{name} (ms): min {summary.low / 1000:.3f}  {cells}  max {summary.high / 1000:.3f}"
        f"  mean {summary.mean / 1000:.3f}  ({summary.count:,} messages)"
    )


def format_text(summary: Summary) -> str:
    """A human-readable summary, PerfTest-style."""
    o = summary.options
    mode = f"confirm {o.confirm}" if o.confirm else f"tx {o.tx_size}" if o.tx_size else "plain"
    producers = f"{o.producers} producer(s)" + (
        f" in {o.producer_processes} process(es)" if o.producers else ""
    )
    consumers = f"{o.consumers} consumer(s)" + (
        f" in {o.consumer_processes} process(es)" if o.consumers else ""
    )
    lines = [
        f"amqpd perf: {producers}, {consumers}, {o.queues} queue(s), "
        f"{o.size} B {'persistent' if o.persistent else 'transient'}, "
        f"exchange {o.exchange or '(default)'} ({o.exchange_type}), {mode}, "
        f"prefetch {o.prefetch}, multi-ack {o.multi_ack_every}"
        + (", auto-ack" if o.auto_ack else ""),
    ]
    p, c = summary.producers, summary.consumers
    if o.producers:
        lines.append(
            f"sent:      {summary.published_rate:12,.0f} msg/s  ({p.published:,} in "
            f"{summary.producer_s:.2f} s)"
        )
        if o.confirm or o.tx_size:
            lines.append(
                f"confirmed: {summary.confirmed_rate:12,.0f} msg/s  ({p.confirmed:,}"
                + (f", {p.nacked:,} nacked" if p.nacked else "")
                + (f"; {p.confirm_frames:,} ack/nack frames" if o.confirm else "")
                + ")"
            )
            lines.append(_latency_line("publish->confirm", p.confirm_latency.summary()))
        if p.returned:
            lines.append(f"returned:  {p.returned:,}")
    if o.consumers:
        lines.append(
            f"received:  {summary.consumed_rate:12,.0f} msg/s  ({c.consumed:,} in "
            f"{summary.consumer_s:.2f} s)"
        )
        lines.append(_latency_line("publish->deliver", c.latency.summary()))
    for w in summary.workers:
        share = w.cpu_s / w.wall_s if w.wall_s else 0.0
        flag = (
            "  <- near a full core: the client may bound this run" if share > CLIENT_BOUND else ""
        )
        lines.append(
            f"client CPU: {w.role} process {w.worker} ({w.tasks} connection(s)): "
            f"{w.cpu_s:.2f} s = {share:.0%} of a core{flag}"
        )
    b = summary.broker
    if b is not None:
        per = summary.broker_cpu_per_100k()
        lines.append(
            f"broker pid {b.pid}: CPU {b.cpu_s:.2f} s"
            + (f" = {per:.3f} s per 100k messages" if per is not None else "")
            + f"; RSS {b.before.rss_kb / 1024:.1f} -> {b.after.rss_kb / 1024:.1f} MiB"
            f" (peak {b.after.hwm_kb / 1024:.1f} MiB)"
        )
    for name, depth in summary.queue_depths.items():
        lines.append(f"queue {name}: {depth:,} messages ready")
    return "\n".join(lines)


def as_json(summary: Summary) -> dict[str, Any]:
    """The summary as plain JSON data (what tests/perf/compare.py reads)."""
    p, c = summary.producers, summary.consumers
    out: dict[str, Any] = {
        "producer_s": round(summary.producer_s, 4),
        "consumer_s": round(summary.consumer_s, 4),
        "published": p.published,
        "published_rate": round(summary.published_rate, 1),
        "confirmed": p.confirmed,
        "confirmed_rate": round(summary.confirmed_rate, 1),
        "nacked": p.nacked,
        "returned": p.returned,
        "confirm_frames": p.confirm_frames,
        "consumed": c.consumed,
        "consumed_rate": round(summary.consumed_rate, 1),
        "confirm_latency_us": p.confirm_latency.summary().as_dict(),
        "deliver_latency_us": c.latency.summary().as_dict(),
        "workers": [
            {
                "worker": w.worker,
                "role": w.role,
                "connections": w.tasks,
                "cpu_s": round(w.cpu_s, 3),
                "wall_s": round(w.wall_s, 3),
            }
            for w in summary.workers
        ],
        "queue_depths": summary.queue_depths,
        "messages": summary.messages,
    }
    b = summary.broker
    if b is not None:
        out["broker"] = {
            "pid": b.pid,
            "cpu_s": round(b.cpu_s, 3),
            "cpu_s_per_100k": summary.broker_cpu_per_100k(),
            "rss_kb_before": b.before.rss_kb,
            "rss_kb": b.after.rss_kb,
            "hwm_kb": b.after.hwm_kb,
        }
    return out
