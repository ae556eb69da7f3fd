"""The shovel link's source acks (amqpd/shell/links/shovel.py `_Acker`): settled deliveries
are acked in order with as few `basic.ack multiple` frames as possible, never past one that
is still in flight, and never on a tag that was nacked back."""

from __future__ import annotations

import asyncio
from typing import Any

from amqpd.shell.links.client import Acker as _Acker
from amqpd.shell.links.link_specs import LocalEndpoint


class FakeChannel:
    def __init__(self) -> None:
        self.acks: list[tuple[int, bool]] = []

    async def basic_ack(self, tag: int, multiple: bool = False) -> None:
        self.acks.append((tag, multiple))


def _acker() -> tuple[_Acker, FakeChannel]:
    channel = FakeChannel()
    fake: Any = channel
    return _Acker(fake), channel


def test_forwards_settled_in_one_turn_are_acked_with_one_frame() -> None:
    async def scenario() -> list[tuple[int, bool]]:
        acker, channel = _acker()
        for tag in (1, 2, 3):
            acker.received(tag)
        await asyncio.gather(*(acker.settled(tag) for tag in (1, 2, 3)))
        return channel.acks

    assert asyncio.run(scenario()) == [(3, True)]


def test_no_ack_reaches_past_a_delivery_in_flight() -> None:
    async def scenario() -> list[tuple[int, bool]]:
        acker, channel = _acker()
        for tag in (1, 2, 3):
            acker.received(tag)
        await acker.settled(2)
        await acker.settled(3)
        assert channel.acks == []  # 1 is still in flight
        await acker.settled(1)
        return channel.acks

    assert asyncio.run(scenario()) == [(3, True)]


def test_a_nacked_tag_is_never_the_acks_tag() -> None:
    async def scenario() -> list[tuple[int, bool]]:
        acker, channel = _acker()
        for tag in (1, 2):
            acker.received(tag)
        await acker.settled(1)
        await acker.settled(2, nacked=True)
        acker.received(3)
        await acker.settled(3)
        return channel.acks

    assert asyncio.run(scenario()) == [(1, True), (3, True)]


def test_local_endpoint_keeps_the_vhost_of_a_host_less_uri() -> None:
    """``amqp:///%2F`` and ``amqp:///my%20vhost`` reach the local listener in that vhost
    (quoted once, as aiormq reads it)."""
    local = LocalEndpoint("0.0.0.0", 5672, "links", "s/cret")
    assert local.resolve("amqp://") == "amqp://links:s%2Fcret@127.0.0.1:5672/?heartbeat=10"
    assert local.resolve("amqp:///%2F").startswith("amqp://links:s%2Fcret@127.0.0.1:5672/%2F?")
    assert local.resolve("amqp:///my%20vhost?heartbeat=3") == (
        "amqp://links:s%2Fcret@127.0.0.1:5672/my%20vhost?heartbeat=3"
    )
    assert local.resolve("amqp://u:p@h:1/v") == "amqp://u:p@h:1/v?heartbeat=10"
