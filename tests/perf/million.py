"""1,000,000 persistent 1 KiB messages in one durable queue: broker RSS, recovery time.

Not part of the pytest run. Usage: python tests/perf/million.py [--count N] [--keep DIR]
Starts amqpd as a subprocess, publishes with a confirm window of 1000 over a raw socket,
reports RSS, restarts it on the same data directory and reports the recovery log line,
the time to serve and RSS, then drains the queue and reports the drain rate.
"""

from __future__ import annotations

import argparse
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pamqp import body, commands, frame, header

from amqpd.wire import codec

LISTENING = re.compile(r"listening on 127\.0\.0\.1:(\d+)")


def start(data_dir: Path) -> tuple[subprocess.Popen[str], int, str, float]:
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "amqpd", "--port", "0", "--data-dir", str(data_dir)],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    log = ""
    for line in proc.stderr:
        log += line
        match = LISTENING.search(line)
        if match:
            return proc, int(match.group(1)), log, time.perf_counter() - started
    raise SystemExit(f"amqpd exited: {log}")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Raw:
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


def publish(port: int, count: int, size: int) -> float:
    raw = Raw(port)
    raw.send(1, commands.Queue.Declare(queue="million", durable=True))
    raw.expect(commands.Queue.DeclareOk)
    raw.send(1, commands.Confirm.Select())
    raw.expect(commands.Confirm.SelectOk)
    one = b"".join(
        (
            frame.marshal(commands.Basic.Publish(exchange="", routing_key="million"), 1),
            frame.marshal(
                header.ContentHeader(0, size, commands.Basic.Properties(delivery_mode=2)), 1
            ),
            frame.marshal(body.ContentBody(b"x" * size), 1),
        )
    )
    sent = confirmed = 0
    started = time.perf_counter()
    last_report = started
    while confirmed < count:
        room = min(1000 - (sent - confirmed), count - sent)
        if room > 0:
            raw.sock.sendall(one * room)
            sent += room
        for frame_type, _ch, payload in raw.frames():
            if frame_type == codec.FRAME_METHOD and codec.method_index(payload) == codec.BASIC_ACK:
                tag = int.from_bytes(payload[4:12], "big")
                confirmed = tag if payload[12] & 1 else confirmed + 1
        if time.perf_counter() - last_report > 5:
            last_report = time.perf_counter()
            print(f"  published {confirmed:,}/{count:,}", flush=True)
    raw.sock.close()
    return count / (time.perf_counter() - started)


def drain(port: int, count: int) -> float:
    raw = Raw(port)
    raw.send(1, commands.Basic.Qos(prefetch_count=1000))
    raw.expect(commands.Basic.QosOk)
    raw.send(1, commands.Basic.Consume(queue="million", no_ack=False))
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
    raw.sock.close()
    return count / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=1024)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        proc, port, _log, _t = start(data_dir)
        rate = publish(port, args.count, args.size)
        print(
            f"publish (confirms, window 1000): {rate:,.0f} msg/s; "
            f"broker RSS {rss_mib(proc.pid):,.0f} MiB with {args.count:,} queued"
        )
        proc.terminate()
        proc.wait()
        proc, port, log, startup = start(data_dir)
        recovered = [line for line in log.splitlines() if "recovered" in line]
        print(f"restart: serving after {startup:.1f} s; {recovered[0] if recovered else log}")
        print(f"broker RSS after recovery: {rss_mib(proc.pid):,.0f} MiB")
        rate = drain(port, args.count)
        print(f"drain (prefetch 1000, multi-ack): {rate:,.0f} msg/s")
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
