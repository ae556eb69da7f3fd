"""The Celery application tests/integration/test_celery.py runs a worker for (broker URL
from AMQPD_CELERY_BROKER)."""

from __future__ import annotations

import os

from celery import Celery

app = Celery(
    "amqpd_celery_test",
    broker=os.environ.get("AMQPD_CELERY_BROKER", "amqp://guest:guest@127.0.0.1:5672//"),
    backend="rpc://",
)
app.conf.broker_connection_retry_on_startup = True
app.conf.worker_hijack_root_logger = False


@app.task
def add(x: int, y: int) -> int:
    return x + y


@app.task
def later() -> str:
    return "ran"
