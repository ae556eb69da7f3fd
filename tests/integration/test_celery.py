"""Celery on amqpd, tried as a new user would (issue 21, item 10: a default prefork
worker, prefetch 1): countdown tasks must not hold back an ordinary task.

The worker holds ETA/countdown tasks unacked and raises its prefetch for each (kombu's
QoS.increment_eventually); on RabbitMQ that basic.qos is global=true and reaches the
running consumer. Before amqpd announced itself as RabbitMQ 3.10, kombu sent global=false,
which (RabbitMQ's semantics, amqpd's too) only applies to later consumers: the worker
stayed at prefetch 1 with a countdown task and the ordinary task waited until the
countdown ran out."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from amqpd.shell.server import Server

REPO = Path(__file__).resolve().parents[2]
COUNTDOWN = 300  # seconds: far beyond the test's deadline
DEADLINE = 60.0  # generous for a busy machine: worker start-up and one round trip


@pytest.fixture
def worker(server: Server, tmp_path: Path) -> Iterator[str]:
    url = f"amqp://guest:guest@127.0.0.1:{server.port}//"
    env = {**os.environ, "AMQPD_CELERY_BROKER": url, "PYTHONPATH": str(REPO)}
    log = (tmp_path / "worker.log").open("w")  # never a pipe nobody reads
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "tests.integration.celery_app",
            "worker",
            "--concurrency=1",
            "--prefetch-multiplier=1",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "--loglevel=WARNING",
        ],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    try:
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


def test_countdown_tasks_do_not_hold_back_an_ordinary_task(worker: str) -> None:
    from tests.integration.celery_app import add, app, later

    app.conf.broker_url = worker
    try:
        held = [later.apply_async(countdown=COUNTDOWN) for _ in range(2)]
        result = add.delay(2, 3)
        assert result.get(timeout=DEADLINE) == 5
        assert all(not r.ready() for r in held)  # the countdown tasks are still waiting
    finally:
        app.close()
