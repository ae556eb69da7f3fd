"""Streams: publish with confirms, then replay everything from ``first``, against amqpd and
a private RabbitMQ node (Debian's rabbitmq-server), one after the other in the same run.

Not part of the pytest run. Usage (from the repository root):
    python -m tests.perf.streams [--count 1000000] [--size 100] [--broker amqpd|rabbitmq|both]

Publishing uses one raw-socket connection with a confirm window of 1000 (plain messages:
a stream fsyncs every message before its confirm on amqpd); the replay consumes with
prefetch 1000, ``x-stream-offset: first`` and one multiple ack per received socket read.
For amqpd it also reports RSS after publishing, the restart time with the stream stored and
RSS after the restart.
"""

from __future__ import annotations

import argparse
import os
import socket
import tempfile
import time
from pathlib import Path

from pamqp import body, commands, frame, header

from amqpd.wire import codec
from tests.perf.million import Raw, rss_mib, start

STREAM = "bench-stream"
os.environ.setdefault("AMQPD_MANAGEMENT_PORT", "0")  # free ports: other brokers may run here
os.environ.setdefault("AMQPD_PROMETHEUS_PORT", "0")


class _Raw(Raw):
    """million.py's raw client with a channel_max RabbitMQ accepts (it refuses 0)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.reader = codec.FrameReader(131072)
        self.sock.sendall(codec.PROTOCOL_HEADER)
        self.expect(commands.Connection.Start)
        self.send(
            0,
            commands.Connection.StartOk(
                client_properties={}, mechanism="PLAIN", response="\0guest\0guest"
            ),
        )
        self.expect(commands.Connection.Tune)
        self.send(0, commands.Connection.TuneOk(channel_max=2047, frame_max=131072, heartbeat=0))
        self.send(0, commands.Connection.Open(virtual_host="/"))
        self.expect(commands.Connection.OpenOk)
        self.send(1, commands.Channel.Open())
        self.expect(commands.Channel.OpenOk)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _per_message(pid: int, before: float, count: int) -> str:
    return f"(broker CPU {(cpu_seconds(pid) - before) / count * 1e6:.1f} us/msg)"


def _connect(port: int) -> Raw:
    return _Raw(port)


def publish(port: int, count: int, size: int) -> float:
    raw = _connect(port)
    raw.send(
        1,
        commands.Queue.Declare(queue=STREAM, durable=True, arguments={"x-queue-type": "stream"}),
    )
    raw.expect(commands.Queue.DeclareOk)
    raw.send(1, commands.Confirm.Select())
    raw.expect(commands.Confirm.SelectOk)
    one = b"".join(
        (
            frame.marshal(commands.Basic.Publish(exchange="", routing_key=STREAM), 1),
            frame.marshal(header.ContentHeader(0, size, commands.Basic.Properties()), 1),
            frame.marshal(body.ContentBody(b"x" * size), 1),
        )
    )
    sent = confirmed = 0
    started = time.perf_counter()
    while confirmed < count:
        room = min(1000 - (sent - confirmed), count - sent)
        if room > 0:
            raw.sock.sendall(one * room)
            sent += room
        for frame_type, _ch, payload in raw.frames():
            if frame_type == codec.FRAME_METHOD and codec.method_index(payload) == codec.BASIC_ACK:
                tag = int.from_bytes(payload[4:12], "big")
                confirmed = tag if payload[12] & 1 else confirmed + 1
    elapsed = time.perf_counter() - started
    raw.sock.close()
    return count / elapsed


def replay(port: int, count: int) -> float:
    raw = _connect(port)
    raw.send(1, commands.Basic.Qos(prefetch_count=1000))
    raw.expect(commands.Basic.QosOk)
    raw.send(
        1,
        commands.Basic.Consume(
            queue=STREAM, consumer_tag="replay", arguments={"x-stream-offset": "first"}
        ),
    )
    started = time.perf_counter()
    received = 0
    while received < count:
        last_tag = 0
        for frame_type, _ch, payload in raw.frames():
            if (
                frame_type == codec.FRAME_METHOD
                and codec.method_index(payload) == codec.BASIC_DELIVER
            ):
                received += 1
                tag_at = 5 + payload[4]
                last_tag = int.from_bytes(payload[tag_at : tag_at + 8], "big")
        if last_tag:
            raw.sock.sendall(codec.encode_ack(1, last_tag, True))
    elapsed = time.perf_counter() - started
    raw.sock.close()
    return count / elapsed


def bench_amqpd(count: int, size: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        proc, port, _log, _startup = start(data_dir)
        try:
            cpu = cpu_seconds(proc.pid)
            rate = publish(port, count, size)
            print(
                f"amqpd    publish (confirms, window 1000): {rate:>10,.0f} msg/s "
                f"{_per_message(proc.pid, cpu, count)}",
                flush=True,
            )
            print(f"amqpd    RSS with {count:,} stored: {rss_mib(proc.pid):,.0f} MiB", flush=True)
            cpu = cpu_seconds(proc.pid)
            rate = replay(port, count)
            print(
                f"amqpd    replay from first (prefetch 1000): {rate:>10,.0f} msg/s "
                f"{_per_message(proc.pid, cpu, count)}",
                flush=True,
            )
        finally:
            proc.terminate()
            proc.wait()
        proc, port, _log, startup = start(data_dir)
        try:
            print(f"amqpd    restart with the stream stored: serving after {startup:.2f} s")
            print(f"amqpd    RSS after restart: {rss_mib(proc.pid):,.0f} MiB", flush=True)
        finally:
            proc.terminate()
            proc.wait()


def _beam_pid(node_name: str) -> int:
    """The node's beam.smp process (found by RABBITMQ_NODENAME in its environment); 0 if
    there is none."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if b"beam.smp" in cmdline and f"RABBITMQ_NODENAME={node_name}".encode() in environ:
            return int(proc.name)
    return 0


def bench_rabbitmq(count: int, size: int) -> None:
    from tests.integration.rabbit_node import RabbitNode

    node = RabbitNode(prefix="streambench")
    try:
        node.wait()
        pid = _beam_pid(node.node)
        cpu = cpu_seconds(pid)
        rate = publish(node.port, count, size)
        print(
            f"RabbitMQ publish (confirms, window 1000): {rate:>10,.0f} msg/s "
            f"{_per_message(pid, cpu, count)}",
            flush=True,
        )
        print(f"RabbitMQ RSS with {count:,} stored: {rss_mib(pid):,.0f} MiB", flush=True)
        cpu = cpu_seconds(pid)
        rate = replay(node.port, count)
        print(
            f"RabbitMQ replay from first (prefetch 1000): {rate:>10,.0f} msg/s "
            f"{_per_message(pid, cpu, count)}",
            flush=True,
        )
    finally:
        node.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--broker", choices=("amqpd", "rabbitmq", "both"), default="both")
    args = parser.parse_args()
    print(f"{args.count:,} messages of {args.size} bytes into one stream", flush=True)
    if args.broker in ("amqpd", "both"):
        bench_amqpd(args.count, args.size)
    if args.broker in ("rabbitmq", "both"):
        bench_rabbitmq(args.count, args.size)


if __name__ == "__main__":
    main()
