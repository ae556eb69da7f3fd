"""Options of ``amqpd perf``: the argument parser and the validated `PerfOptions` record.

Option names follow RabbitMQ's PerfTest where one exists (its short flags too: -x -y -s -c
-q -A -a -r -z -C -D -t -e -k -f -u), so a PerfTest command line translates directly.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

EXCHANGE_TYPES: Final = ("direct", "fanout", "topic", "headers")
DEFAULT_URL: Final = "amqp://guest:guest@127.0.0.1:5672/"
DEFAULT_DURATION: Final = 10.0

_EPILOG = """\
examples:
  amqpd perf -u amqp://guest:guest@127.0.0.1:5672/ -z 10 -q 100 -A 50
      1 producer, 1 consumer, transient 100-byte messages for 10 s
  amqpd perf -y 0 -f -c 1000 -z 10
      persistent messages to a durable queue with publisher confirms, window 1000
  amqpd perf -t fanout --queues 10 -y 10 --consumer-processes 2
      one producer, fanout to 10 queues, one consumer on each
  amqpd perf -y 0 -C 1000000 -c 1000 --keep-queues     then
  amqpd perf -x 0 -D 1000000 --predeclared              fill a queue, then drain it
  amqpd perf --idle-connections 1000 -z 5
      open 1000 connections with one channel each, hold them 5 s

Latency is measured from a timestamp in the first 8 bytes of each body (so --size must be
at least 8 for publish->deliver latency); producers and consumers must share a clock
(same host, or --wall-clock with synchronised clocks).
"""


@dataclass(frozen=True, slots=True)
class PerfOptions:
    """Everything one ``amqpd perf`` run needs (see `build_parser` for the meaning)."""

    url: str = DEFAULT_URL
    producers: int = 1
    consumers: int = 1
    producer_processes: int = 1
    consumer_processes: int = 1
    queues: int = 1
    queue_prefix: str = "perf-q"
    queue_args: dict[str, str | int] = field(default_factory=dict)
    size: int = 100
    exchange_type: str = "direct"
    exchange: str = "perf.direct"
    routing_key: str | None = None
    persistent: bool = False
    durable: bool = False
    confirm: int = 0
    tx_size: int = 0
    prefetch: int = 0
    multi_ack_every: int = 0
    auto_ack: bool = False
    rate: float = 0.0
    duration: float | None = DEFAULT_DURATION
    warmup: float = 0.0
    pmessages: int = 0
    cmessages: int = 0
    batch: int = 500
    mandatory: bool = False
    predeclared: bool = False
    keep_queues: bool = False
    wall_clock: bool = False
    interval: float = 1.0
    json: bool = False
    broker_pid: int | None = None
    idle_connections: int = 0
    connect_concurrency: int = 50

    def queue_names(self) -> list[str]:
        """The queue names, ``<prefix>-1`` ... ``<prefix>-N``."""
        return [f"{self.queue_prefix}-{i}" for i in range(1, self.queues + 1)]


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def _queue_arg(text: str) -> tuple[str, str | int]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, int(value)
    except ValueError:
        return key, value


def build_parser() -> argparse.ArgumentParser:
    """The ``amqpd perf`` argument parser (every option is explained in ``--help``)."""
    p = argparse.ArgumentParser(
        prog="amqpd perf",
        description="Load generator for any AMQP 0-9-1 broker, in the spirit of RabbitMQ's "
        "PerfTest. Producers and consumers run as asyncio tasks in separate processes, "
        "write pre-encoded frames in batches, and report msgs/s, publish->deliver and "
        "publish->confirm latency percentiles, and their own CPU use.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    conn = p.add_argument_group("broker")
    conn.add_argument(
        "-u",
        "--url",
        "--uri",
        default=DEFAULT_URL,
        help=f"broker URL amqp://user:pass@host:port/vhost [default {DEFAULT_URL}]",
    )
    conn.add_argument(
        "--broker-pid",
        type=int,
        metavar="PID",
        help="also report this local broker process's CPU seconds (per 100k "
        "messages) and RSS from /proc, over the measured interval",
    )

    roles = p.add_argument_group("producers and consumers")
    roles.add_argument(
        "-x",
        "--producers",
        type=_count,
        default=1,
        help="number of producers, one connection each [default 1]",
    )
    roles.add_argument(
        "-y",
        "--consumers",
        type=_count,
        default=1,
        help="number of consumers, one connection each [default 1]",
    )
    roles.add_argument(
        "--producer-processes",
        type=_positive_int,
        default=1,
        metavar="N",
        help="processes the producers are spread over [default 1]",
    )
    roles.add_argument(
        "--consumer-processes",
        type=_positive_int,
        default=1,
        metavar="N",
        help="processes the consumers are spread over [default 1]",
    )

    topo = p.add_argument_group("topology")
    topo.add_argument(
        "-t",
        "--exchange-type",
        choices=EXCHANGE_TYPES,
        default="direct",
        help="type of the exchange producers publish to [default direct]. "
        "Queue i is bound as: direct: key=<queue name>; topic: <queue name>.#; "
        "fanout: all queues; headers: x-match=all, perf-queue=<queue name>",
    )
    topo.add_argument(
        "-e",
        "--exchange",
        metavar="NAME",
        help="exchange name [default perf.<type>]; '' publishes through the "
        "default exchange (direct only)",
    )
    topo.add_argument(
        "-k",
        "--routing-key",
        metavar="KEY",
        help="one routing key for every publish and binding (direct/topic) "
        "instead of the per-queue keys",
    )
    topo.add_argument(
        "--queues",
        type=_positive_int,
        default=1,
        metavar="N",
        help="number of queues; producer i publishes to queue i mod N and "
        "consumer j consumes from queue j mod N [default 1]",
    )
    topo.add_argument(
        "--queue-prefix",
        default="perf-q",
        metavar="PREFIX",
        help="queues are named PREFIX-1 ... PREFIX-N [default perf-q]",
    )
    topo.add_argument(
        "--queue-arg",
        type=_queue_arg,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="queue.declare argument, repeatable (integers are sent as "
        "integers), e.g. --queue-arg x-queue-type=quorum",
    )
    topo.add_argument(
        "--durable",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="declare durable queues [default: durable when --persistent]",
    )
    topo.add_argument(
        "--predeclared",
        action="store_true",
        help="the exchange, queues and bindings exist: declare, purge and delete nothing",
    )
    topo.add_argument(
        "--keep-queues",
        action="store_true",
        help="do not delete the queues and exchange at the end (they are "
        "purged at the start unless --predeclared)",
    )

    msg = p.add_argument_group("publishing")
    msg.add_argument(
        "-s",
        "--size",
        type=_count,
        default=100,
        metavar="BYTES",
        help="message body size; at least 8 to carry the latency timestamp [default 100]",
    )
    msg.add_argument(
        "-f",
        "--persistent",
        action="store_true",
        help="publish with delivery_mode 2 (persistent) [default transient]",
    )
    msg.add_argument(
        "-c",
        "--confirm",
        type=_count,
        default=0,
        metavar="WINDOW",
        help="publisher confirms with at most WINDOW unconfirmed messages per "
        "producer; 0 disables confirms [default 0]",
    )
    msg.add_argument(
        "--tx-size",
        type=_count,
        default=0,
        metavar="N",
        help="transactional producers: tx.commit after every N publishes and "
        "wait for commit-ok; 0 disables [default 0]",
    )
    msg.add_argument(
        "-r",
        "--rate",
        type=float,
        default=0.0,
        metavar="MSGS",
        help="publish rate limit per producer, msgs/s; 0 is unlimited [default 0]",
    )
    msg.add_argument(
        "--batch",
        type=_positive_int,
        default=500,
        metavar="N",
        help="most messages a producer writes to its socket at once [default 500]",
    )
    msg.add_argument(
        "--mandatory",
        action="store_true",
        help="publish with the mandatory flag (returns are counted)",
    )

    cons = p.add_argument_group("consuming")
    cons.add_argument(
        "-q",
        "--prefetch",
        type=_count,
        default=0,
        metavar="N",
        help="basic.qos prefetch count per consumer; 0 is unlimited [default 0]",
    )
    cons.add_argument(
        "-A",
        "--multi-ack-every",
        type=_count,
        default=0,
        metavar="N",
        help="ack with multiple=true once every N messages; 0 acks each message singly [default 0]",
    )
    cons.add_argument(
        "-a",
        "--auto-ack",
        action="store_true",
        help="consume with no-ack (the broker forgets a message once sent)",
    )

    run = p.add_argument_group("run length and output")
    run.add_argument(
        "-z",
        "--duration",
        type=_seconds,
        metavar="SECONDS",
        help=f"stop after this long [default {DEFAULT_DURATION:g} s unless "
        "-C/-D give message counts, which then end the run]",
    )
    run.add_argument(
        "--warmup",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help="leave the first SECONDS out of rates, latencies and CPU [default 0]",
    )
    run.add_argument(
        "-C",
        "--pmessages",
        type=_count,
        default=0,
        metavar="N",
        help="each producer stops after N messages (and their confirms)",
    )
    run.add_argument(
        "-D",
        "--cmessages",
        type=_count,
        default=0,
        metavar="N",
        help="each consumer stops after N messages",
    )
    run.add_argument(
        "--wall-clock",
        action="store_true",
        help="stamp messages with the wall clock instead of the monotonic clock "
        "(producers and consumers on different hosts with synchronised clocks)",
    )
    run.add_argument(
        "--interval",
        type=_seconds,
        default=1.0,
        metavar="SECONDS",
        help="progress line period on stderr; 0 prints none [default 1]",
    )
    run.add_argument(
        "--json",
        action="store_true",
        help="print the final summary as JSON on stdout instead of text",
    )

    conns = p.add_argument_group("connection churn")
    conns.add_argument(
        "--idle-connections",
        type=_count,
        default=0,
        metavar="N",
        help="instead of messaging: open N connections with one channel each, "
        "report the open time (and the broker's RSS per connection with "
        "--broker-pid), hold them for --duration, close them",
    )
    conns.add_argument(
        "--connect-concurrency",
        type=_positive_int,
        default=50,
        metavar="N",
        help="handshakes in flight at once for --idle-connections [default 50]",
    )
    return p


def parse_options(argv: Sequence[str]) -> PerfOptions:
    """Parse and validate ``amqpd perf`` arguments (exits with status 2 on an error)."""
    parser = build_parser()
    ns = parser.parse_args(list(argv))
    exchange = f"perf.{ns.exchange_type}" if ns.exchange is None else ns.exchange
    duration = ns.duration
    if duration is None and not (ns.pmessages or ns.cmessages):
        duration = DEFAULT_DURATION
    problems = []
    if exchange == "" and ns.exchange_type != "direct":
        problems.append("the default exchange ('') is a direct exchange: drop -t or set -e")
    if ns.confirm and ns.tx_size:
        problems.append("--confirm and --tx-size are exclusive (a channel is in one mode)")
    if ns.auto_ack and ns.multi_ack_every:
        problems.append("--auto-ack sends no acks: drop --multi-ack-every")
    if ns.prefetch and ns.multi_ack_every > ns.prefetch:
        problems.append("--multi-ack-every above --prefetch would stall every consumer")
    if not (ns.producers or ns.consumers or ns.idle_connections):
        problems.append("nothing to run: no producers, consumers or idle connections")
    if ns.rate < 0:
        problems.append("--rate must not be negative")
    if problems:
        parser.error("; ".join(problems))
    return PerfOptions(
        url=ns.url,
        producers=ns.producers,
        consumers=ns.consumers,
        producer_processes=min(ns.producer_processes, max(ns.producers, 1)),
        consumer_processes=min(ns.consumer_processes, max(ns.consumers, 1)),
        queues=ns.queues,
        queue_prefix=ns.queue_prefix,
        queue_args=dict(ns.queue_arg),
        size=ns.size,
        exchange_type=ns.exchange_type,
        exchange=exchange,
        routing_key=ns.routing_key,
        persistent=ns.persistent,
        durable=ns.persistent if ns.durable is None else ns.durable,
        confirm=ns.confirm,
        tx_size=ns.tx_size,
        prefetch=ns.prefetch,
        multi_ack_every=ns.multi_ack_every,
        auto_ack=ns.auto_ack,
        rate=ns.rate,
        duration=duration,
        warmup=ns.warmup,
        pmessages=ns.pmessages,
        cmessages=ns.cmessages,
        batch=ns.batch,
        mandatory=ns.mandatory,
        predeclared=ns.predeclared,
        keep_queues=ns.keep_queues,
        wall_clock=ns.wall_clock,
        interval=ns.interval,
        json=ns.json,
        broker_pid=ns.broker_pid,
        idle_connections=ns.idle_connections,
        connect_concurrency=ns.connect_concurrency,
    )
