"""Delayed messages at scale: lateness, broker RSS and restart time with N pending.

Not part of the pytest run. Usage (progress on stderr, results on stdout)::

    python tests/perf/delayed.py --pending 1000                   # lateness at 1,000
    python tests/perf/delayed.py --pending 1000000 --restart      # RSS, restart, lateness

Starts amqpd as a subprocess on a fresh data directory, declares a durable
``x-delayed-message`` exchange (x-delayed-type direct) bound to a durable queue, and
publishes ``--pending`` persistent messages of ``--size`` bytes over a raw socket with a
confirm window of 1000. Each message is due at a random time in the ``--spread`` seconds
that start ``--lead`` seconds after the run began (chosen so that every message is pending
at once: publishing must end before the first one is due); its ``x-delay`` is that time
minus the moment it is published, and its body starts with the due time. With
``--restart`` the broker is stopped (SIGTERM, or SIGKILL with ``--kill``) once everything is
published and started again on the same data directory. A consumer (no-ack) receives every
message and reports lateness = arrival time - due time (p50, p99, max), the number that
arrived early (must be 0), the broker RSS with everything pending, and the restart time.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pamqp import commands, frame

from amqpd.wire import codec

LISTENING = re.compile(r"listening on 127\.0\.0\.1:(\d+)")
EXCHANGE, QUEUE, KEY = "bench.delayed", "bench.fired", "k"
_DUE = struct.Struct(">d")


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def start(data_dir: Path) -> tuple[subprocess.Popen[str], int, str, float]:
    """amqpd on a free port; (process, port, its log until it listens, seconds to listen)."""
    started = time.perf_counter()
    env = {"AMQPD_MANAGEMENT_PORT": "0", "AMQPD_PROMETHEUS_PORT": "0", **os.environ}
    proc = subprocess.Popen(
        [sys.executable, "-m", "amqpd", "--port", "0", "--data-dir", str(data_dir)],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stderr is not None
    text = ""
    for line in proc.stderr:
        text += line
        match = LISTENING.search(line)
        if match:
            return proc, int(match.group(1)), text, time.perf_counter() - started
    raise SystemExit(f"amqpd exited: {text}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (a busy machine stretches wall time)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Raw:
    """A minimal AMQP client on a blocking socket (channel 1)."""

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
        self.send(0, commands.Connection.TuneOk(channel_max=0, frame_max=131072, heartbeat=0))
        self.send(0, commands.Connection.Open(virtual_host="/"))
        self.expect(commands.Connection.OpenOk)
        self.send(1, commands.Channel.Open())
        self.expect(commands.Channel.OpenOk)

    def send(self, channel: int, method: object) -> None:
        self.sock.sendall(frame.marshal(method, channel))  # type: ignore[arg-type]

    def frames(self) -> list[tuple[int, int, bytes]]:
        out: list[tuple[int, int, bytes]] = []
        while not out:
            data = self.sock.recv(1 << 20)
            if not data:
                raise SystemExit("broker closed the connection")
            self.reader.feed(data)
            while (item := self.reader.next_frame()) is not None:
                out.append(item)
            self.reader.compact()
        return out

    def expect(self, kind: type) -> object:
        while True:
            for frame_type, _ch, payload in self.frames():
                if frame_type == codec.FRAME_METHOD:
                    method = codec.decode_method(codec.method_index(payload), payload)
                    if isinstance(method, kind):
                        return method


def _frame(kind: int, payload: bytes) -> bytes:
    return struct.pack(">BHI", kind, 1, len(payload)) + payload + b"\xce"


def message_frames(publish: bytes, delay_ms: int, due: float, size: int) -> bytes:
    """Publish + content header (delivery_mode 2, headers {x-delay: long}) + body."""
    table = b"\x07x-delay" + b"l" + struct.pack(">q", delay_ms)
    props = struct.pack(">H", 0x3000) + struct.pack(">I", len(table)) + table + b"\x02"
    header = struct.pack(">HHQ", 60, 0, size) + props
    body = _DUE.pack(due) + b"x" * (size - _DUE.size)
    return publish + _frame(2, header) + _frame(3, body)


def setup(port: int) -> None:
    raw = Raw(port)
    raw.send(
        1,
        commands.Exchange.Declare(
            exchange=EXCHANGE,
            exchange_type="x-delayed-message",
            durable=True,
            arguments={"x-delayed-type": "direct"},
        ),
    )
    raw.expect(commands.Exchange.DeclareOk)
    raw.send(1, commands.Queue.Declare(queue=QUEUE, durable=True))
    raw.expect(commands.Queue.DeclareOk)
    raw.send(1, commands.Queue.Bind(queue=QUEUE, exchange=EXCHANGE, routing_key=KEY))
    raw.expect(commands.Queue.BindOk)
    raw.sock.close()


def publish(port: int, dues: list[float], size: int, window: int) -> float:
    """Publish one message per due time (confirm window ``window``); returns msg/s."""
    raw = Raw(port)
    raw.send(1, commands.Confirm.Select())
    raw.expect(commands.Confirm.SelectOk)
    method = frame.marshal(commands.Basic.Publish(exchange=EXCHANGE, routing_key=KEY), 1)
    count = len(dues)
    sent = confirmed = 0
    started = last_report = time.perf_counter()
    while confirmed < count:
        room = min(window - (sent - confirmed), count - sent)
        if room > 0:
            now = time.time()
            chunk = [
                message_frames(method, max(1, round((due - now) * 1000)), due, size)
                for due in dues[sent : sent + room]
            ]
            raw.sock.sendall(b"".join(chunk))
            sent += room
        for frame_type, _ch, payload in raw.frames():
            if frame_type == codec.FRAME_METHOD and codec.method_index(payload) == codec.BASIC_ACK:
                tag = int.from_bytes(payload[4:12], "big")
                confirmed = tag if payload[12] & 1 else confirmed + 1
        if time.perf_counter() - last_report > 5:
            last_report = time.perf_counter()
            log(f"  published {confirmed:,}/{count:,}")
    raw.sock.close()
    return count / (time.perf_counter() - started)


def consume(port: int, count: int) -> list[float]:
    """Receive ``count`` deliveries (no-ack); the lateness of each, in seconds."""
    raw = Raw(port)
    raw.send(1, commands.Basic.Consume(queue=QUEUE, no_ack=True))
    raw.expect(commands.Basic.ConsumeOk)
    lateness: list[float] = []
    expect_body = False
    last_report = time.perf_counter()
    while len(lateness) < count:
        frames = raw.frames()
        now = time.time()
        for frame_type, _ch, payload in frames:
            if frame_type == codec.FRAME_METHOD:
                expect_body = codec.method_index(payload) == codec.BASIC_DELIVER
            elif frame_type == 3 and expect_body:
                (due,) = _DUE.unpack_from(payload)
                lateness.append(now - due)
                expect_body = False
        if time.perf_counter() - last_report > 5:
            last_report = time.perf_counter()
            log(f"  received {len(lateness):,}/{count:,}")
    raw.sock.close()
    return lateness


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pending", type=int, default=1000, help="messages (default 1000)")
    parser.add_argument("--size", type=int, default=1024, help="body bytes (default 1024)")
    parser.add_argument(
        "--lead",
        type=float,
        default=None,
        help="seconds from the start to the first due time "
        "(default: 5 + 1 per 2,000, +20 with --restart)",
    )
    parser.add_argument(
        "--spread",
        type=float,
        default=None,
        help="seconds over which the messages fall due (default: 10 + 1 per 5,000)",
    )
    parser.add_argument(
        "--window",
        type=int,
        default=100,
        help="unconfirmed publishes at most (default 100). A message's due time is taken "
        "when it is sent and the broker's when it reads it: a large window makes lateness "
        "look worse by the time a publish waits in the broker's input",
    )
    parser.add_argument("--restart", action="store_true", help="restart with all pending")
    parser.add_argument("--kill", action="store_true", help="restart after SIGKILL")
    parser.add_argument("--seed", type=int, default=27)
    args = parser.parse_args()
    count = args.pending
    lead = args.lead if args.lead is not None else 5 + count / 2_000 + (20 if args.restart else 0)
    spread = args.spread if args.spread is not None else 10 + count / 5_000
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # so the brokers are stopped
    with tempfile.TemporaryDirectory() as tmp:
        brokers: list[subprocess.Popen[str]] = []
        try:
            run(args, Path(tmp) / "data", lead, spread, brokers)
        finally:
            for proc in brokers:  # never leave a broker behind, whatever happened
                if proc.poll() is None:
                    proc.terminate()
                    proc.wait()


def run(
    args: argparse.Namespace,
    data_dir: Path,
    lead: float,
    spread: float,
    brokers: list[subprocess.Popen[str]],
) -> None:
    count = args.pending
    rng = random.Random(args.seed)
    proc, port, _text, _t = start(data_dir)
    brokers.append(proc)
    setup(port)
    first_due = time.time() + lead
    dues = [first_due + rng.random() * spread for _ in range(count)]
    log(f"publishing {count:,} x {args.size} B, due in [{lead:.0f}, {lead + spread:.0f}] s")
    rate = publish(port, dues, args.size, args.window)
    if time.time() >= first_due:
        raise SystemExit("publishing outlasted --lead: not everything was pending at once")
    print(f"publish (confirms, window {args.window}): {rate:,.0f} msg/s")
    print(f"broker RSS with {count:,} pending: {rss_mib(proc.pid):,.0f} MiB", flush=True)
    if args.restart:
        proc.send_signal(signal.SIGKILL if args.kill else signal.SIGTERM)
        proc.wait()
        proc, port, text, startup = start(data_dir)
        brokers.append(proc)
        recovered = [line for line in text.splitlines() if "recovered" in line]
        print(f"restart ({'kill -9' if args.kill else 'SIGTERM'}): serving after "
              f"{startup:.2f} s ({cpu_seconds(proc.pid):.2f} s of broker CPU); "
              f"{recovered[0].strip() if recovered else ''}")  # fmt: skip
        print(f"broker RSS after restart: {rss_mib(proc.pid):,.0f} MiB", flush=True)
        if time.time() >= first_due:
            raise SystemExit("the restart outlasted --lead: some messages were late")
    log(f"waiting for {count:,} deliveries (the last in {max(dues) - time.time():.0f} s)")
    lateness = consume(port, count)
    early = sum(1 for value in lateness if value < 0)
    p50, p99 = (percentile(lateness, f) * 1000 for f in (0.5, 0.99))
    print(
        f"lateness over {len(lateness):,} messages: p50 {p50:.1f} ms, p99 {p99:.1f} ms, "
        f"max {max(lateness) * 1000:.1f} ms; early: {early}"
    )  # fmt: skip
    print(f"broker RSS at the end: {rss_mib(proc.pid):,.0f} MiB")


if __name__ == "__main__":
    main()
