"""Measure the two costs of docs/multicore.md that can be measured on a 2-core machine.

``shards``: the scaling available when no message crosses a shard. The same total load
(``--groups`` independent ``amqpd perf`` runs, each on its own exchange and queues, W1 by
default) goes either to one amqpd process (``single``) or to one amqpd process per group
(``sharded``: two brokers on two ports stand in for two workers that each own half of the
queues). The two layouts run interleaved, ``--reps`` times each; the figures are the sum of
the groups' delivery rates and the brokers' CPU over the measured window.

``pipe``: the cost of one cross-shard hop. A sender process frames messages the way a
worker would forward them to another shard (per message a 14-byte record header: length,
queue index, sequence number; then the message's publish frames, about the bytes a
``Message`` keeps raw: exchange, routing key, content header, body), joins each chunk of
``--per-chunk`` messages and writes it to a Unix stream socket; a receiver process reads
and splits the records back into one ``bytes`` per message, ready to enqueue. Both run
asyncio (uvloop when installed), like amqpd's shell. The figures are messages/s, MB/s, and
each side's CPU microseconds per message. With ``--records amqpd`` the two sides use the
broker's own stage-2 code instead: the sender writes `amqpd.wire.forwarding` FORWARD records
(the fields a worker already parsed, then the raw header and body) and joins the answers
into confirms with `confirms.shards.ShardConfirms`; the receiver decodes them with
`RecordReader` into the `Forwarded` objects an owner enqueues, and answers each chunk it
read with one SETTLED record, as an owner answers a storage batch.

Examples::

    PYTHONPATH=$PWD .venv/bin/python tests/perf/multicore_prototype.py shards --reps 3
    PYTHONPATH=$PWD .venv/bin/python tests/perf/multicore_prototype.py pipe --per-chunk 1,10,100,400
    PYTHONPATH=$PWD .venv/bin/python tests/perf/multicore_prototype.py pipe --records amqpd

Progress goes to stderr, the result tables (markdown) to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import shlex
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare import free_port, machine_busy_s, perf_results, wait_for_quiet
from pamqp.commands import Basic
from pamqp.header import ContentHeader
from perf_brokers import Amqpd

from amqpd.wire.codec import encode_shortstr
from amqpd.wire.forwarding import (
    NO_EXPIRY,
    NO_PRIORITY,
    PERSISTENT,
    PROMISED,
    Forwarded,
    RecordReader,
    Settled,
    encode_forward,
    encode_settled,
    queue_names,
)
from confirms.shards import ShardConfirms
from interop.perf.procstat import cpu_seconds
from interop.perf.wire import publish_template

REPO = Path(__file__).resolve().parents[2]
W1 = "-x 1 -y 1 -q 100 -A 50"
RECORD = struct.Struct(">IHQ")  # payload length, queue index on the shard, sequence number
READ_SIZE = 262144


def say(text: str) -> None:
    """A progress line on stderr."""
    print(text, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# shards: one process against one process per group, same load
# ---------------------------------------------------------------------------------------------
@dataclass
class ShardRun:
    """One measured run of one layout."""

    layout: str
    rate: float  # delivered msgs/s, all groups
    sent: float  # published msgs/s, all groups
    broker_cpu_s: float  # all brokers, over the measured window
    client_cpu_s: float  # all amqpd perf processes, whole run
    other_load: float  # cores used by other processes during the run
    duration: float

    @property
    def cpu_per_100k(self) -> float:
        """Broker CPU seconds per 100k delivered messages."""
        return self.broker_cpu_s / max(self.rate * self.duration, 1) * 100_000

    @property
    def broker_cores(self) -> float:
        """Cores the brokers used together."""
        return self.broker_cpu_s / self.duration


def _perf_command(url: str, group: int, args: argparse.Namespace, pid: int | None) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "interop.perf.cli",
        "-u",
        url,
        "--json",
        "--interval",
        "0",
        "-e",
        f"perf.g{group}",
        "--queue-prefix",
        f"g{group}",
        "-z",
        str(args.duration + args.warmup),
        "--warmup",
        str(args.warmup),
        *shlex.split(args.perf_args),
    ]
    if pid is not None:
        command += ["--broker-pid", str(pid)]
    return command


def shard_run(layout: str, args: argparse.Namespace, work: Path) -> ShardRun:
    """Start the brokers of ``layout``, run every group at once, stop the brokers."""
    count = 1 if layout == "single" else args.groups
    brokers = [Amqpd(free_port(), work / layout / f"b{i}" / "data", "full") for i in range(count)]
    for broker in brokers:
        broker.start()
    try:
        if args.quiet_timeout > 0:
            wait_for_quiet(args)
        busy, began = machine_busy_s(), time.monotonic()
        cpu_before = [cpu_seconds(b.pid) for b in brokers]
        processes = []
        for group in range(args.groups):
            broker = brokers[group % count]
            pid = broker.pid if group < count else None  # each broker's CPU is read once
            processes.append(
                subprocess.Popen(
                    _perf_command(broker.url, group, args, pid),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    cwd=REPO,
                )
            )
        results = perf_results(processes, timeout=args.duration + args.warmup + 180)
        wall = time.monotonic() - began
        client = sum(w["cpu_s"] for r in results for w in r["workers"])
        brokers_all = sum(cpu_seconds(b.pid) - c for b, c in zip(brokers, cpu_before, strict=True))
        other = max(machine_busy_s() - busy - brokers_all - client, 0.0) / wall
    finally:
        for broker in brokers:
            broker.stop()
    return ShardRun(
        layout,
        rate=sum(r["consumed_rate"] for r in results),
        sent=sum(r["published_rate"] for r in results),
        broker_cpu_s=sum(r["broker"]["cpu_s"] for r in results if "broker" in r),
        client_cpu_s=client,
        other_load=other,
        duration=args.duration,
    )


def shards(args: argparse.Namespace) -> str:
    """Run both layouts interleaved and return the markdown report."""
    runs: list[ShardRun] = []
    with tempfile.TemporaryDirectory(prefix="amqpd-multicore-") as tmp:
        for rep in range(1, args.reps + 1):
            for layout in ("single", "sharded"):
                run = shard_run(layout, args, Path(tmp))
                runs.append(run)
                say(
                    f"rep {rep} {layout:8s} delivered {run.rate:10,.0f} msgs/s  sent "
                    f"{run.sent:10,.0f}  broker CPU {run.broker_cores:.2f} cores = "
                    f"{run.cpu_per_100k:.3f} s/100k  clients {run.client_cpu_s:.1f} s  "
                    f"other load {run.other_load:.2f} cores"
                )
    lines = [
        f"`{args.groups}` groups of `amqpd perf {args.perf_args}` (each its own exchange and "
        f"queues), {args.duration:g} s measured after {args.warmup:g} s, medians of "
        f"{args.reps}, layouts interleaved",
        "",
        "| layout | brokers | delivered msgs/s | sent msgs/s | broker cores | broker CPU s / 100k "
        "| other load (cores) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    medians: dict[str, float] = {}
    for layout in ("single", "sharded"):
        mine = [r for r in runs if r.layout == layout]
        rate = statistics.median(r.rate for r in mine)
        medians[layout] = rate
        lines.append(
            f"| {layout} | {1 if layout == 'single' else args.groups} | {rate:,.0f} | "
            f"{statistics.median(r.sent for r in mine):,.0f} | "
            f"{statistics.median(r.broker_cores for r in mine):.2f} | "
            f"{statistics.median(r.cpu_per_100k for r in mine):.3f} | "
            f"{statistics.median(r.other_load for r in mine):.2f} |"
        )
    lines += [
        "",
        f"sharded / single, delivered: {medians['sharded'] / max(medians['single'], 1):.2f}x",
        "",
        "Every run: "
        + "; ".join(f"{r.layout} {r.rate:,.0f} ({r.other_load:.2f} other)" for r in runs),
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# pipe: one cross-shard hop
# ---------------------------------------------------------------------------------------------
def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


async def _send(sock: socket.socket, payload: bytes, total: int, per_chunk: int) -> None:
    _reader, writer = await asyncio.open_unix_connection(sock=sock)
    pack = RECORD.pack
    size = len(payload)
    seq = 0
    while seq < total:
        parts = []
        for _ in range(min(per_chunk, total - seq)):
            parts.append(pack(size, 0, seq))
            parts.append(payload)
            seq += 1
        writer.write(b"".join(parts))
        await writer.drain()
    writer.close()
    await writer.wait_closed()


async def _receive(sock: socket.socket, total: int) -> int:
    reader, writer = await asyncio.open_unix_connection(sock=sock, limit=READ_SIZE)
    unpack = RECORD.unpack_from
    head = RECORD.size
    buf = bytearray()
    messages: list[bytes] = []
    count = 0
    while count < total:
        data = await reader.read(READ_SIZE)
        if not data:
            break
        buf += data
        offset, end = 0, len(buf)
        while end - offset >= head:
            length, _queue, _seq = unpack(buf, offset)
            stop = offset + head + length
            if stop > end:
                break
            messages.append(bytes(buf[offset + head : stop]))  # what the shard enqueues
            count += 1
            offset = stop
        del buf[:offset]
        messages.clear()  # the shard's queue took them
    writer.close()
    return count


async def _send_records(sock: socket.socket, payload: bytes, total: int, per_chunk: int) -> None:
    """Forward ``total`` messages as a worker would, and join the owner's answers into
    confirms; return once every publish is decided."""
    reader, writer = await asyncio.open_unix_connection(sock=sock, limit=READ_SIZE)
    size = len(payload)
    header = ContentHeader(0, size, Basic.Properties(delivery_mode=2)).marshal()
    exchange, routing_key, names = (
        encode_shortstr("perf.direct"),
        encode_shortstr("q"),
        queue_names(["q"]),
    )
    joins = ShardConfirms()
    decided = 0
    done = asyncio.Event()

    async def answers() -> None:
        nonlocal decided
        records = RecordReader()
        while decided < total:
            data = await reader.read(READ_SIZE)
            if not data:
                raise RuntimeError("the owner closed the link before settling everything")
            records.feed(data)
            while (record := records.next_record()) is not None:
                assert isinstance(record, Settled)
                for _key, ok in joins.settled(0, record.through, record.refused):
                    assert ok
                    decided += 1
        done.set()

    task = asyncio.ensure_future(answers())
    seq = 0
    while seq < total:
        out = bytearray()
        for _ in range(min(per_chunk, total - seq)):
            seq += 1
            joins.forwarded(0, seq, seq, sole=True)
            encode_forward(
                out,
                seq,
                PERSISTENT | PROMISED,
                NO_PRIORITY,
                NO_EXPIRY,
                1,
                names,
                exchange,
                routing_key,
                None,
                None,
                header,
                payload,
            )
        writer.write(bytes(out))
        await writer.drain()
    await done.wait()
    await task
    writer.close()
    await writer.wait_closed()


async def _receive_records(sock: socket.socket, total: int) -> int:
    """Decode forwarded messages as an owner would, one SETTLED answer per chunk read."""
    reader, writer = await asyncio.open_unix_connection(sock=sock, limit=READ_SIZE)
    records = RecordReader()
    count = 0
    while count < total:
        data = await reader.read(READ_SIZE)
        if not data:
            break
        records.feed(data)
        through = 0
        while (record := records.next_record()) is not None:
            assert isinstance(record, Forwarded)
            through = record.publish_id
            count += 1
        if through:
            answer = bytearray()
            encode_settled(answer, through, [])
            writer.write(bytes(answer))
    writer.close()
    await writer.wait_closed()  # flushes the last answer (drain may leave it buffered)
    return count


def _side(
    role: str,
    sock: socket.socket,
    payload: bytes,
    total: int,
    per_chunk: int,
    out: Any,
    amqpd_records: bool,
) -> None:
    loop = _new_loop()
    cpu0, t0 = time.process_time(), time.perf_counter()
    if role == "send":
        send = _send_records if amqpd_records else _send
        loop.run_until_complete(send(sock, payload, total, per_chunk))
        count = total
    else:
        receive = _receive_records if amqpd_records else _receive
        count = loop.run_until_complete(receive(sock, total))
    out.put((role, count, time.process_time() - cpu0, time.perf_counter() - t0))
    loop.close()


@dataclass
class PipeRun:
    """One hop measurement."""

    per_chunk: int
    messages: int
    wall_s: float
    send_cpu_s: float
    receive_cpu_s: float

    @property
    def rate(self) -> float:
        """Messages per second through the hop."""
        return self.messages / self.wall_s

    def us_per_message(self, cpu_s: float) -> float:
        """CPU microseconds per message."""
        return cpu_s / self.messages * 1e6


def pipe_run(payload: bytes, total: int, per_chunk: int, amqpd_records: bool) -> PipeRun:
    """One sender and one receiver process over a Unix socketpair."""
    ctx = multiprocessing.get_context("fork")
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    out = ctx.Queue()
    common = (payload, total, per_chunk, out, amqpd_records)
    receiver = ctx.Process(target=_side, args=("receive", right, *common))
    sender = ctx.Process(target=_side, args=("send", left, *common))
    receiver.start()
    sender.start()
    left.close()
    right.close()
    reports = {}
    for _ in range(2):
        role, count, cpu, wall = out.get(timeout=600)
        reports[role] = (count, cpu, wall)
    sender.join()
    receiver.join()
    if reports["receive"][0] != total:
        raise RuntimeError(f"the receiver got {reports['receive'][0]} of {total} messages")
    return PipeRun(
        per_chunk,
        total,
        wall_s=reports["receive"][2],
        send_cpu_s=reports["send"][1],
        receive_cpu_s=reports["receive"][1],
    )


def pipe(args: argparse.Namespace) -> str:
    """Measure the hop for every ``--per-chunk`` and return the markdown report."""
    amqpd_records = args.records == "amqpd"
    if amqpd_records:  # the body: the record adds its fields (below: their size)
        payload = b"x" * args.size
    else:
        payload = publish_template(1, "perf.direct", "perf-q-1", args.size, 131072).message(0)
    sizes = [int(n) for n in args.per_chunk.split(",")]
    runs: list[PipeRun] = []
    for rep in range(1, args.reps + 1):
        for per_chunk in sizes:
            if args.quiet_timeout > 0:
                wait_for_quiet(args)
            busy, began = machine_busy_s(), time.monotonic()
            run = pipe_run(payload, args.messages, per_chunk, amqpd_records)
            other = max(machine_busy_s() - busy - run.send_cpu_s - run.receive_cpu_s, 0.0)
            other /= time.monotonic() - began
            runs.append(run)
            say(
                f"rep {rep} per-chunk {per_chunk:4d}: {run.rate:12,.0f} msgs/s  send "
                f"{run.us_per_message(run.send_cpu_s):.2f} us/msg  receive "
                f"{run.us_per_message(run.receive_cpu_s):.2f} us/msg  other load {other:.2f}"
            )
    record_size = _record_size(payload) if amqpd_records else len(payload) + RECORD.size
    what = (
        f"amqpd.wire.forwarding records of {record_size} bytes (a {args.size} B body), one "
        "SETTLED answer per chunk read, confirms joined by confirms.shards"
        if amqpd_records
        else f"messages of {len(payload)} bytes (a {args.size} B body's publish frames) + a "
        f"{RECORD.size}-byte record header"
    )
    lines = [
        f"{args.messages:,} {what}, medians of {args.reps}",
        "",
        "| messages per chunk | msgs/s | MB/s | sender CPU us/msg | receiver CPU us/msg "
        "| hop CPU us/msg |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for per_chunk in sizes:
        mine = [r for r in runs if r.per_chunk == per_chunk]
        send = statistics.median(r.us_per_message(r.send_cpu_s) for r in mine)
        receive = statistics.median(r.us_per_message(r.receive_cpu_s) for r in mine)
        hop = statistics.median(r.us_per_message(r.send_cpu_s + r.receive_cpu_s) for r in mine)
        rate = statistics.median(r.rate for r in mine)
        mbs = rate * record_size / 1e6
        lines.append(
            f"| {per_chunk} | {rate:,.0f} | {mbs:,.1f} | {send:.2f} | {receive:.2f} | {hop:.2f} |"
        )
    return "\n".join(lines)


def _record_size(body: bytes) -> int:
    out = bytearray()
    header = ContentHeader(0, len(body), Basic.Properties(delivery_mode=2)).marshal()
    exchange, routing_key = encode_shortstr("perf.direct"), encode_shortstr("q")
    encode_forward(
        out, 1, PERSISTENT, NO_PRIORITY, NO_EXPIRY, 1, queue_names(["q"]), exchange, routing_key,
        None, None,
        header, body,
    )  # fmt: skip
    return len(out)


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("shards", help="one amqpd process against one per group, same load")
    s.add_argument("--groups", type=int, default=2, help="load groups = brokers when sharded [2]")
    s.add_argument("--perf-args", default=W1, help=f"amqpd perf options per group [{W1}]")
    s.add_argument("--reps", type=int, default=3, help="runs of each layout [3]")
    s.add_argument("--duration", type=float, default=8.0, help="measured seconds [8]")
    s.add_argument("--warmup", type=float, default=2.0, help="seconds before measuring [2]")
    q = sub.add_parser("pipe", help="the cost of forwarding messages through a Unix socket")
    q.add_argument("--messages", type=int, default=2_000_000, help="messages per run [2000000]")
    q.add_argument("--size", type=int, default=100, help="message body bytes [100]")
    q.add_argument("--per-chunk", default="1,10,100,400", help="messages per write [1,10,100,400]")
    q.add_argument("--reps", type=int, default=3, help="runs of each chunk size [3]")
    q.add_argument(
        "--records",
        choices=("raw", "amqpd"),
        default="raw",
        help="raw: length-prefixed publish frames; amqpd: the broker's forwarding records "
        "and confirm join (amqpd/wire/forwarding.py, confirms/shards.py) [raw]",
    )
    for parser in (s, q):
        parser.add_argument(
            "--max-other-load",
            type=float,
            default=0.3,
            help="wait until other processes use at most this many cores [0.3]",
        )
        parser.add_argument(
            "--quiet-timeout",
            type=float,
            default=60.0,
            help="longest wait for that before a run, seconds (0: no wait) [60]",
        )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the chosen measurement and print its report."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("PYTHONPATH", str(REPO))
    began = time.monotonic()
    report = shards(args) if args.command == "shards" else pipe(args)
    command = shlex.join(["tests/perf/multicore_prototype.py", *(argv or sys.argv[1:])])
    print(f"`{command}` ({(time.monotonic() - began) / 60:.1f} min)\n")
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
