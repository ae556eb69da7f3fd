"""The loops tests/perf/forwarding_cost.py compiles with mypyc and times: what a worker's
compiled engine would pay per crossing message for stage 2's records and confirm join."""

from __future__ import annotations

import time

from amqpd.wire.forwarding import (
    NO_EXPIRY,
    NO_PRIORITY,
    PERSISTENT,
    Forwarded,
    RecordReader,
    encode_forward,
    queue_names,
)
from confirms.shards import ShardConfirms


def encode(n: int, header: bytes, body: bytes) -> bytes:
    """``n`` FORWARD records of one message to one queue."""
    exchange, routing_key, names = b"\x0bperf.direct", b"\x01q", queue_names(["q"])
    out = bytearray()
    for i in range(1, n + 1):
        encode_forward(
            out, i, PERSISTENT, NO_PRIORITY, NO_EXPIRY, 1, names, exchange, routing_key, None,
            None, header, body,
        )  # fmt: skip
    return bytes(out)


def decode(data: bytes, chunk: int) -> int:
    """Read ``data`` back, ``chunk`` bytes at a time, as an owner would; the record count."""
    reader = RecordReader()
    count = 0
    for start in range(0, len(data), chunk):
        reader.feed(data[start : start + chunk])
        while True:
            record = reader.next_record()
            if record is None:
                break
            if isinstance(record, Forwarded):
                count += 1
    return count


def join(n: int, per_batch: int) -> int:
    """``n`` sole copies, settled ``per_batch`` at a time; how many were decided."""
    joins = ShardConfirms()
    decided = 0
    for i in range(1, n + 1):
        joins.forwarded(0, i, i, True)
        if i % per_batch == 0:
            decided += len(joins.settled(0, i, []))
    return decided


def run(n: int, header: bytes, body: bytes) -> list[float]:
    """Microseconds per message of encode, decode and join."""
    t0 = time.process_time()
    data = encode(n, header, body)
    t1 = time.process_time()
    if decode(data, 65536) != n:
        raise RuntimeError("the records did not read back")
    t2 = time.process_time()
    if join(n, 100) != n:
        raise RuntimeError("not every copy was decided")
    t3 = time.process_time()
    return [(t1 - t0) / n * 1e6, (t2 - t1) / n * 1e6, (t3 - t2) / n * 1e6]
