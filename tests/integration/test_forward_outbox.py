"""Stage 2's sending side (amqpd/shell/workers/forward_outbox.py) against a running worker:
publishes forwarded to worker 1 of a ``--workers 2`` node come back as confirms once the
owner settled them (a nack where its queue refuses), a worker killed with publishes in flight
nacks exactly those, and the link comes back by itself once the supervisor restarted the
worker. This test plays the publishing worker; no worker of the node sends yet."""

from __future__ import annotations

import os
import signal
from collections.abc import Hashable
from pathlib import Path

import anyio
import pytest
from pamqp.commands import Basic
from pamqp.header import ContentHeader

from amqpd.model.message import Message
from amqpd.model.queue import Queue
from amqpd.model.replica import RemoteQueue
from amqpd.shell.workers.forward_outbox import Forwarder
from amqpd.wire.codec import encode_shortstr
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_forward_links import _runtime
from tests.integration.test_workers import _add_v1, _channel, _wait_for, _workers

pytestmark = pytest.mark.usefixtures("whole_vhosts")  # tests/conftest.py

TIMEOUT = 60


def _message(queue: str, body: bytes) -> Message:
    header = ContentHeader(0, len(body), Basic.Properties(delivery_mode=2)).marshal()
    routing_key = encode_shortstr(queue)
    return Message("", queue, b"\x00", routing_key, header, body, True)


class Publisher:
    """The test's stand-in for a publishing worker: a `Forwarder` and the verdicts."""

    def __init__(self, link: Path) -> None:
        self.decided: dict[Hashable, bool] = {}
        self.changed = anyio.Event()
        self.forwarder = Forwarder({1: link}, self._decided)
        self._next = 0
        self._stubs: dict[str, RemoteQueue] = {}

    def _decided(self, decided: list[tuple[Hashable, bool]]) -> None:
        for key, ok in decided:
            assert key not in self.decided, f"{key} decided twice"
            self.decided[key] = ok
        self.changed.set()

    def publish(self, queues: list[str], body: bytes) -> int:
        self._next += 1
        stubs: list[Queue] = [
            self._stubs.setdefault(name, RemoteQueue(name, "v1", 1, True, False, False, {}))
            for name in queues
        ]
        message = _message(queues[0], body)
        self.forwarder.copies.forward("v1", message, None, True, stubs, self._next, False)
        return self._next

    async def until_decided(self, keys: range | list[int]) -> dict[int, bool]:
        with anyio.fail_after(TIMEOUT):
            while not all(key in self.decided for key in keys):
                self.changed = anyio.Event()
                await self.changed.wait()
        return {key: self.decided[key] for key in keys}

    async def until_connected(self) -> None:
        with anyio.fail_after(TIMEOUT):
            while not self.forwarder.connected(1):
                await anyio.sleep(0.02)


def test_forwarded_publishes_are_confirmed_nacked_where_refused_and_nacked_when_the_owner_dies(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    broker = BrokerProcess(data, extra=("--workers", "2", "--no-management", "--no-prometheus"))
    try:
        _add_v1(data)
        with _channel(broker.port, "v1") as channel:
            channel.queue_declare("orders", durable=True)
            channel.queue_declare(
                "capped", arguments={"x-max-length": 1, "x-overflow": "reject-publish"}
            )
        worker = _workers(broker.proc.pid)[1]
        link = _runtime(worker) / "w1.forward"

        async def main() -> None:
            publisher = Publisher(link)
            async with anyio.create_task_group() as group:
                group.start_soon(publisher.forwarder.run)
                await publisher.until_connected()
                for chunk in range(10):  # ten chunks of 100, one flush (one write) each
                    for i in range(100):
                        publisher.publish(["orders"], b"%d" % (chunk * 100 + i))
                    publisher.forwarder.flush()
                confirmed = await publisher.until_decided(range(1, 1001))
                assert all(confirmed.values())
                first = publisher.publish(["capped"], b"fits")
                second = publisher.publish(["capped"], b"refused")
                publisher.forwarder.flush()
                assert await publisher.until_decided([first, second]) == {
                    first: True,
                    second: False,
                }

                # the owner stops reading, then dies with 50 publishes in flight: all nacked
                os.kill(worker, signal.SIGSTOP)
                in_flight = [publisher.publish(["orders"], b"lost") for _ in range(50)]
                publisher.forwarder.flush()
                os.kill(worker, signal.SIGKILL)
                assert set((await publisher.until_decided(in_flight)).values()) == {False}

                # the supervisor restarts worker 1; the link comes back by itself
                _wait_for(lambda: _workers(broker.proc.pid).get(1) not in (None, worker), "restart")
                await publisher.until_connected()
                after = publisher.publish(["orders"], b"after")
                publisher.forwarder.flush()
                assert await publisher.until_decided([after]) == {after: True}
                group.cancel_scope.cancel()

        anyio.run(main)
        with _channel(broker.port, "v1") as channel:
            # the 1000 confirmed and the one after the restart; none of the 50 nacked
            assert channel.queue_declare("orders", passive=True).method.message_count == 1001
        broker.stop()
    finally:
        if broker.proc.poll() is None:
            broker.kill()
