"""Several workers' Prometheus expositions merged into the one a single node would serve
(``--workers N``; amqpd/shell/workers/gateway.py fetches them).

Every worker serves the same families (amqpd/shell/metrics.py). A scrape must hold each
family once (one ``# HELP`` / ``# TYPE``: Prometheus rejects a scrape that repeats them), so
the texts are parsed with prometheus_client's parser (it round-trips what the app renders,
byte for byte), their families merged by name, and rendered again. Samples with the same
name and labels are combined:

- node figures of a part of the node (queues, connections, channels, consumers, messages,
  the global counters, store I/O, ``process_*`` memory, CPU seconds and open fds, and the
  fd limits, so that used / limit stays a node's ratio): summed. A per-object sample
  (``queue``, ``channel``, ``vhost`` labels) exists on one worker only, so it is kept as it is;
- ``*_info`` families (build, identity, python): the first worker's (worker 0's) only;
- ``*_start_time_seconds`` and ``*_created``: the earliest; the node's uptime
  (``rabbitmq_erlang_uptime_seconds``): the longest;
- the alarm gauges (``rabbitmq_alarms_*``): 1 if any worker has the alarm;
- the free disk space: the least any worker reports (the workers' stores share a disk, or
  the tightest one matters); the configured watermarks
  (``rabbitmq_resident_memory_limit_bytes``, ``rabbitmq_disk_space_available_limit_bytes``):
  worker 0's.

Families keep the order of the first text that has them (worker 0's), then the others'.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Final

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

Combine = Callable[[float, float], float]

_FIRST_VALUE: Final = frozenset(
    {"rabbitmq_resident_memory_limit_bytes", "rabbitmq_disk_space_available_limit_bytes"}
)
_LONGEST: Final = frozenset({"rabbitmq_erlang_uptime_seconds"})
_LEAST: Final = frozenset({"rabbitmq_disk_space_available_bytes"})


def _sum(a: float, b: float) -> float:
    return a + b


def _first(a: float, b: float) -> float:
    return a


def combiner(sample: str) -> Combine:
    """How two workers' values of the sample called ``sample`` make the node's."""
    if sample in _FIRST_VALUE:
        return _first
    if sample in _LEAST or sample.endswith(("_start_time_seconds", "_created")):
        return min
    if sample in _LONGEST or sample.startswith("rabbitmq_alarms_"):
        return max
    return _sum


def _first_worker_only(family: str) -> bool:
    """Families of which one worker's samples stand for the node (identity, versions)."""
    return family.endswith("_info")


class _Families(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def merge_expositions(texts: Sequence[str]) -> bytes:
    """One exposition (text format 0.0.4) of the families in ``texts`` (worker 0's first).

    Raises:
        ValueError: a text that is not in the exposition format.
    """
    merged: dict[str, Metric] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], Sample]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            into = merged.get(family.name)
            if into is None:
                into = merged[family.name] = Metric(family.name, family.documentation, family.type)
                values[family.name] = {}
            elif _first_worker_only(family.name):
                continue
            _add(values[family.name], family.samples)
    for name, metric in merged.items():
        metric.samples = list(values[name].values())
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(list(merged.values())))
    return generate_latest(registry)


def _add(
    into: dict[tuple[str, tuple[tuple[str, str], ...]], Sample], samples: Iterable[Sample]
) -> None:
    for sample in samples:
        key = (sample.name, tuple(sorted(sample.labels.items())))
        found = into.get(key)
        if found is None:
            into[key] = sample
        else:
            value = combiner(sample.name)(found.value, sample.value)
            into[key] = found._replace(value=value)
