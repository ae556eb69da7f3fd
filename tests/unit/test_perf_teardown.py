"""amqpd perf's teardown against a broker that leaves a delete unanswered (no sockets).

GarageMQ 0.0~git20200204 takes exchange.delete and never replies; the teardown must give up
on it, keep the run's results and say what it left behind.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from pamqp import commands
from pamqp.base import Frame as Method

from interop.perf.client import AMQPClient
from interop.perf.options import parse_options
from interop.perf.topology import delete


class FakeClient:
    """Answers every call at once, except the method kinds in ``silent`` (never answered)."""

    def __init__(self, *silent: type[Method]) -> None:
        self.silent = silent
        self.sent: list[Method] = []

    async def call(self, method: Method, reply: type[Method]) -> Any:
        self.sent.append(method)
        if isinstance(method, self.silent):
            await asyncio.Event().wait()  # the reply that never comes
        return reply()


def run_delete(client: FakeClient, argv: list[str]) -> str | None:
    options = parse_options(argv)
    return asyncio.run(delete(cast(AMQPClient, client), options, timeout=0.05))


def test_everything_answered_deletes_queues_then_exchange() -> None:
    client = FakeClient()
    assert run_delete(client, ["--queues", "2"]) is None
    assert [type(m) for m in client.sent] == [
        commands.Queue.Delete,
        commands.Queue.Delete,
        commands.Exchange.Delete,
    ]
    assert [getattr(m, "queue", None) for m in client.sent[:2]] == ["perf-q-1", "perf-q-2"]


def test_unanswered_exchange_delete_is_reported_not_awaited() -> None:
    client = FakeClient(commands.Exchange.Delete)
    left = run_delete(client, ["--queues", "2"])
    assert left is not None
    assert "Exchange.Delete" in left and "left in place: exchange perf.direct" in left
    assert len(client.sent) == 3  # both queues went first


def test_unanswered_queue_delete_ends_the_teardown() -> None:
    client = FakeClient(commands.Queue.Delete)
    left = run_delete(client, ["--queues", "3", "-t", "fanout"])
    assert left is not None
    everything = "queue perf-q-1, queue perf-q-2, queue perf-q-3, exchange perf.fanout"
    assert f"left in place: {everything}" in left
    assert len(client.sent) == 1  # a late reply could be mistaken for the next delete's


def test_builtin_exchange_is_never_deleted() -> None:
    client = FakeClient(commands.Exchange.Delete)
    assert run_delete(client, ["-e", "amq.direct"]) is None
    assert [type(m) for m in client.sent] == [commands.Queue.Delete]
