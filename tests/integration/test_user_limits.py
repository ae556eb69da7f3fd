"""User limits and the vhost queue limit as an operator meets them: set with ``amqpd users
set-limit`` / ``vhosts set-max-queues`` on the stopped broker's store, kept across the
start, enforced for real clients (pika) with RabbitMQ 3.10.8's texts, and changed over
``/api/user-limits`` while clients are connected."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pika
import pika.exceptions
import pytest

from tests.conftest import node_under_test


def _cli(data: Path, *args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "amqpd", *args, "--data-dir", str(data)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_user_and_queue_limits_from_the_cli_and_the_api(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    data = tmp_path / "data"
    _cli(data, "users", "set-limit", "guest", "max-connections", "1")
    _cli(data, "vhosts", "set-max-queues", "/", "1")
    # under AMQPD_TEST_WORKERS a node: each limit counted once over its workers
    with node_under_test(tmp_path_factory, http=True, data_dir=data) as server:
        url = pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{server.port}/%2F")
        first = pika.BlockingConnection(url)
        try:
            with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as refused:
                pika.BlockingConnection(url)  # pika says the same of RabbitMQ's refusal
            assert (
                "(530) \"NOT_ALLOWED - connection refused for user 'guest': user connection "
                'limit (1) is reached"'
            ) in str(refused.value)
            channel = first.channel()
            channel.queue_declare("one")
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as full:
                channel.queue_declare("two")
            assert full.value.args == (
                406,
                "PRECONDITION_FAILED - cannot declare queue 'two': queue limit in vhost '/' (1) "
                "is reached",
            )
            base = f"http://127.0.0.1:{server.management_port}"
            with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=60) as api:
                assert api.get("/api/user-limits").json() == [
                    {"user": "guest", "value": {"max-connections": 1}}
                ]
                put = api.put("/api/user-limits/guest/max-channels", json={"value": 1})
                assert put.status_code == 204
            first.channel()  # guest's one channel (the first was closed by the 406)
            first.channel()  # the second: over the new limit
            pytest.fail("a channel over the user's limit was opened")
        except pika.exceptions.ConnectionClosedByBroker as closed:
            assert closed.reply_code == 530
            assert closed.reply_text == (
                "NOT_ALLOWED - number of channels opened for user 'guest' has reached the "
                "maximum allowed user limit of (1)"
            )
        finally:
            if first.is_open:
                first.close()
