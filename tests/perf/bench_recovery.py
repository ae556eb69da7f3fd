"""Benchmark: write N persistent messages through Store.apply, then time Store.load.

Not a test. Run it as::

    python tests/perf/bench_recovery.py                    # 1,000,000 x 1 KiB, FULL
    python tests/perf/bench_recovery.py -n 200000 --synchronous NORMAL --skip-load

The write phase journals ``--batch`` messages at a time (``Journal.insert_message``, then
``take_batch``) and times ``Store.apply`` alone. The load phase runs in a fresh child process
(so the writer's memory does not count) and reports the seconds ``Store.load`` took and the
process RSS before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from persistence.journal import Journal
from persistence.records import MessageRecord, QueueDef
from persistence.store import Store

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _rss_mib() -> float:
    """Current resident set size in MiB (Linux), else the peak."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE / 2**20
    except OSError:
        return _peak_rss_mib()


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _content_header(body_size: int) -> bytes:
    """A typical raw content header: persistent, ``application/octet-stream``."""
    content_type = b"application/octet-stream"
    flags = 0x8000 | 0x1000  # content-type, delivery-mode
    return (
        struct.pack(">HHQH", 60, 0, body_size, flags)
        + bytes([len(content_type)])
        + content_type
        + b"\x02"
    )


async def _write(data_dir: Path, n: int, batch_size: int, body_size: int, sync: str) -> None:
    store = await Store.open(data_dir, synchronous=sync)
    journal = Journal()
    queues = [("/", "bench")]
    journal.put_queue(QueueDef("/", "bench", False, {"x-queue-mode": "lazy"}))
    setup = journal.take_batch()
    assert setup is not None
    await store.apply(setup)
    body = os.urandom(body_size)
    header = _content_header(body_size)
    applying = 0.0
    started = time.perf_counter()
    for start in range(0, n, batch_size):
        for seq in range(start, min(start + batch_size, n)):
            journal.insert_message(
                queues[0], seq, MessageRecord("amq.direct", "bench", header, body)
            )
        batch = journal.take_batch()
        assert batch is not None
        t0 = time.perf_counter()
        await store.apply(batch)
        applying += time.perf_counter() - t0
    total = time.perf_counter() - started
    await store.close()
    size = sum(p.stat().st_size for p in data_dir.iterdir())
    print(
        f"write: {n:,} x {body_size} B messages, batches of {batch_size}, synchronous={sync}: "
        f"apply {n / applying:,.0f} msg/s ({applying * 1000 / max(1, n // batch_size):.2f} ms "
        f"per batch), end to end {n / total:,.0f} msg/s; data dir {size / 2**20:,.0f} MiB"
    )


async def _load(data_dir: Path) -> None:
    store = await Store.open(data_dir)
    before = _rss_mib()
    t0 = time.perf_counter()
    state = await store.load()
    seconds = time.perf_counter() - t0
    after = _rss_mib()
    count = sum(len(m) for m in state.messages.values())
    await store.close()
    print(
        f"load: {count:,} messages in {seconds:.2f} s ({count / seconds:,.0f} msg/s); RSS "
        f"{before:,.0f} MiB before, {after:,.0f} MiB after (+{after - before:,.0f} MiB), peak "
        f"{_peak_rss_mib():,.0f} MiB"
    )


def main(argv: list[str] | None = None) -> None:
    """Parse the command line and run the benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("-n", "--messages", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--body-size", type=int, default=1024)
    parser.add_argument("--synchronous", default="FULL", choices=["FULL", "NORMAL", "EXTRA"])
    parser.add_argument("--dir", type=Path, help="use (and keep) this data directory")
    parser.add_argument("--skip-load", action="store_true", help="only measure writes")
    parser.add_argument("--load-only", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.load_only is not None:
        asyncio.run(_load(args.load_only))
        return
    data_dir = args.dir or Path(tempfile.mkdtemp(prefix="amqpd-bench-"))
    try:
        asyncio.run(_write(data_dir, args.messages, args.batch, args.body_size, args.synchronous))
        if not args.skip_load:
            subprocess.run(
                [sys.executable, __file__, "--load-only", str(data_dir)],
                check=True,
            )
    finally:
        if args.dir is None:
            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
