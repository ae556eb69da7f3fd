"""Several workers' Prometheus expositions merged into the one a single node would serve
(``--workers N``; amqpd/shell/workers/gateway.py fetches them).

Every worker serves the same families (amqpd/shell/metrics.py). A scrape must hold each
family once (one ``# HELP`` / ``# TYPE``: Prometheus rejects a scrape that repeats them), so
the families are merged by name and samples with the same name and labels combined:

- node figures of a part of the node (queues, connections, channels, consumers, messages,
  the global counters, store I/O, ``process_*`` memory, CPU seconds and open fds, and the
  fd limits, so that used / limit stays a node's ratio): summed. A per-object sample
  (``queue``, ``channel``, ``vhost`` labels) exists on one worker only, so it is kept as it is;
- ``*_info`` families (build, identity, python): the first worker's (worker 0's) only;
- the cluster-wide families of ``/metrics/detailed`` (``rabbitmq_cluster_*``: a vhost's
  status, an exchange's name and bindings, RabbitMQ's "This value is cluster-wide"): the
  first worker's value of each sample. Every worker holds a spread vhost and each of its
  exchanges and bindings (docs/multicore.md "Stage 2"), so a sum would count them once per
  worker; a vhost or exchange of one worker only has its one sample. The per-exchange
  counters (``queue_messages_published_total`` by ``exchange``: the copies routed on each
  worker) and the messages an x-delayed-message exchange holds (each worker holds its
  own) are summed;
- ``*_start_time_seconds`` and ``*_created``: the earliest; the node's uptime
  (``rabbitmq_erlang_uptime_seconds``): the longest;
- the alarm gauges (``rabbitmq_alarms_*``): 1 if any worker has the alarm;
- the free disk space: the least any worker reports (the workers' stores share a disk, or
  the tightest one matters); the configured watermarks
  (``rabbitmq_resident_memory_limit_bytes``, ``rabbitmq_disk_space_available_limit_bytes``):
  worker 0's.

Families keep the order of the first text that has them (worker 0's), then the others'.

The texts are what prometheus_client's ``generate_latest`` wrote on each worker (format
0.0.4: ``# HELP``, ``# TYPE``, then one ``name{labels} value`` line per sample, labels in the
same order on every worker), so they are merged line by line: a sample is keyed by its text
up to its value, a sample only one worker has keeps its line unchanged and a combined one is
written as ``generate_latest`` writes values. prometheus_client's parser reads the same
(tests/unit/test_worker_metrics_merge.py checks that the merged text parses back) but takes
~27 µs per sample (5.4 s for 200,000 samples: the per-object scrape of 10,000 queues over
four workers); this takes ~2 µs, output included (0.43 s).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from prometheus_client.utils import floatToGoString

Combine = Callable[[float, float], float]

_FIRST_VALUE: Final = frozenset(
    {"rabbitmq_resident_memory_limit_bytes", "rabbitmq_disk_space_available_limit_bytes"}
)
_CLUSTER_WIDE: Final = "rabbitmq_cluster_"  # amqpd/shell/metrics.py's CLUSTER_PREFIX
_LONGEST: Final = frozenset({"rabbitmq_erlang_uptime_seconds"})
_LEAST: Final = frozenset({"rabbitmq_disk_space_available_bytes"})
_go_float: Callable[[float], str] = floatToGoString  # the value as generate_latest writes it


def _sum(a: float, b: float) -> float:
    return a + b


def _first(a: float, b: float) -> float:
    return a


def combiner(sample: str) -> Combine:
    """How two workers' values of the sample called ``sample`` make the node's."""
    if sample in _FIRST_VALUE or sample.startswith(_CLUSTER_WIDE):
        return _first
    if sample in _LEAST or sample.endswith(("_start_time_seconds", "_created")):
        return min
    if sample in _LONGEST or sample.startswith("rabbitmq_alarms_"):
        return max
    return _sum


def _first_worker_only(family: str) -> bool:
    """Families of which one worker's samples stand for the node (identity, versions)."""
    return family.endswith("_info")


@dataclass(slots=True)
class _Family:
    header: list[str] = field(default_factory=list)  # its # HELP and # TYPE lines
    # sample text up to the value -> (the line as received, or None once combined; value)
    samples: dict[str, tuple[str | None, float]] = field(default_factory=dict)


def _split(line: str) -> tuple[str, float]:
    """(name{labels}, value) of a sample line (a label value may hold spaces and braces,
    the value and a timestamp cannot)."""
    brace = line.rfind("}")
    if brace >= 0:
        key, rest = line[: brace + 1], line[brace + 1 :]
    else:
        key, _, rest = line.partition(" ")
    return key, float(rest.split()[0])


def merge_expositions(texts: Sequence[str]) -> bytes:
    """One exposition (text format 0.0.4) of the families in ``texts`` (worker 0's first).

    Raises:
        ValueError: a sample line without a number.
        IndexError: a sample line without a value.
    """
    families: dict[str, _Family] = {}
    for text in texts:
        new: set[str] = set()  # the families this text is the first to have
        family: _Family | None = None
        skip = False  # the samples of a first-worker-only family a former text had
        for line in text.splitlines():
            if line.startswith("#"):
                parts = line.split(" ", 3)
                if len(parts) < 3 or parts[1] not in ("HELP", "TYPE"):
                    continue  # another comment
                name = parts[2]
                family = families.get(name)
                if family is None:
                    family = families[name] = _Family()
                    new.add(name)
                if name in new:
                    family.header.append(line)
                skip = name not in new and _first_worker_only(name)
                continue
            if not line or family is None or skip:
                continue
            key, value = _split(line)
            found = family.samples.get(key)
            if found is None:
                family.samples[key] = (line, value)
            else:
                combine = combiner(key.split("{", 1)[0])
                family.samples[key] = (None, combine(found[1], value))
    out: list[str] = []
    for merged in families.values():
        out.extend(merged.header)
        for key, (kept, value) in merged.samples.items():
            out.append(kept if kept is not None else f"{key} {_go_float(value)}")
    return ("\n".join(out) + "\n").encode("utf-8") if out else b""
