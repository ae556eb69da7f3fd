"""``churn_rates`` of ``/api/overview`` (sans-IO): RabbitMQ's counts of connections,
channels and queues created, declared, closed and deleted since the node started, each
with the per-second rate over the last sample interval (``*_details.rate``). The counters
are the model's (`Churn`); the rate sampler (engine/rates.py) calls `sample`."""

from __future__ import annotations

from typing import Any, Final

from amqpd.model.statistics import Churn, NodeStatistics

KEYS: Final = (  # RabbitMQ's key -> amqpd's counter
    ("channel_closed", "channels_closed"),
    ("channel_created", "channels_opened"),
    ("connection_closed", "connections_closed"),
    ("connection_created", "connections_opened"),
    ("queue_created", "queues_created"),
    ("queue_declared", "queues_declared"),
    ("queue_deleted", "queues_deleted"),
)


def _counts(churn: Churn) -> dict[str, int]:
    return {key: int(getattr(churn, attribute)) for key, attribute in KEYS}


def sample(statistics: NodeStatistics, interval: float) -> None:
    """Refresh the rates from the counters' change since the last sample."""
    counts = _counts(statistics.churn)
    last = statistics.churn_last
    if last and interval > 0:
        statistics.churn_rates = {key: (counts[key] - last[key]) / interval for key in counts}
    statistics.churn_last = counts


def churn_rates(statistics: NodeStatistics) -> dict[str, Any]:
    """``churn_rates`` in RabbitMQ's shape."""
    out: dict[str, Any] = {}
    rates = statistics.churn_rates
    for key, value in _counts(statistics.churn).items():
        out[key] = value
        out[f"{key}_details"] = {"rate": round(rates.get(key, 0.0), 1)}
    return out
