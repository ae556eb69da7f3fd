"""amqpd.model.deadletter: the x-death / x-first-death-* headers and the cycle rule, as
RabbitMQ 3.x's rabbit_dead_letter builds and applies them."""

from __future__ import annotations

import datetime
import struct
from typing import Any

from pamqp import commands, encode
from pamqp.header import ContentHeader

from amqpd.model.deadletter import dead_letter_header, is_cycle
from amqpd.wire.properties import RawProperties

UTC = datetime.UTC
NOW = 1_700_000_000.75


def publish_header(**properties: Any) -> bytes:
    return ContentHeader(0, 3, commands.Basic.Properties(**properties)).marshal()


def decode(header: bytes) -> commands.Basic.Properties:
    content = ContentHeader()
    content.unmarshal(header)
    assert content.body_size == 3
    return content.properties


def headers_of(header: bytes) -> dict[str, Any]:
    headers = decode(header).headers
    assert headers is not None
    return dict(headers)


def test_first_death_adds_x_death_and_first_death_headers_and_drops_expiration() -> None:
    raw = publish_header(
        content_type="text/plain",
        expiration="5000",
        headers={"app": "v", "CC": ["cc-key"]},
        delivery_mode=2,
    )
    out, deaths = dead_letter_header(raw, "q1", "rejected", "ex", ["rk", "cc-key"], NOW)
    props = decode(out)
    assert props.expiration is None
    assert (props.content_type, props.delivery_mode) == ("text/plain", 2)
    expected_death = {
        "count": 1,
        "reason": "rejected",
        "queue": "q1",
        "time": datetime.datetime.fromtimestamp(1_700_000_000, UTC),  # whole seconds
        "exchange": "ex",
        "routing-keys": ["rk", "cc-key"],
        "original-expiration": "5000",
    }
    assert props.headers == {
        "x-death": [expected_death],
        "x-first-death-reason": "rejected",
        "x-first-death-queue": "q1",
        "x-first-death-exchange": "ex",
        "app": "v",
        "CC": ["cc-key"],
    }
    assert deaths == [expected_death]
    # the publisher's own entries are kept byte for byte, after the broker's
    original = RawProperties(raw).table_entries()
    assert RawProperties(out).table_entries()[-len(original) :] == original
    # the count is a 64-bit long, like RabbitMQ's (Java clients read it as a Long)
    x_death_raw = RawProperties(out).table_entries()[0][1]
    assert encode.short_string("count") + b"l" + struct.pack(">q", 1) in x_death_raw


def test_without_expiration_there_is_no_original_expiration() -> None:
    out, deaths = dead_letter_header(publish_header(), "q", "expired", "", ["q"], NOW)
    assert "original-expiration" not in deaths[0]
    assert headers_of(out)["x-death"][0]["reason"] == "expired"


def test_same_queue_and_reason_increments_and_moves_to_the_front() -> None:
    raw = publish_header(expiration="100")
    first, _ = dead_letter_header(raw, "a", "rejected", "ex", ["k"], NOW)
    second, _ = dead_letter_header(first, "b", "expired", "dlx", ["k"], NOW + 60)
    third, deaths = dead_letter_header(second, "a", "rejected", "dlx", ["k"], NOW + 120)
    assert [(d["queue"], d["reason"], d["count"]) for d in deaths] == [
        ("a", "rejected", 2),
        ("b", "expired", 1),
    ]
    # an incremented entry keeps its first time, exchange and original expiration
    assert deaths[0]["time"] == datetime.datetime.fromtimestamp(1_700_000_000, UTC)
    assert (deaths[0]["exchange"], deaths[0]["original-expiration"]) == ("ex", "100")
    assert "original-expiration" not in deaths[1]  # already dropped by the first death
    headers = headers_of(third)
    assert headers["x-death"] == deaths
    assert (
        headers["x-first-death-reason"],
        headers["x-first-death-queue"],
        headers["x-first-death-exchange"],
    ) == ("rejected", "a", "ex")  # set once, by the first death
    assert len(RawProperties(third).table_entries()) == 4  # no duplicated keys


def test_same_queue_other_reason_is_a_new_entry() -> None:
    first, _ = dead_letter_header(publish_header(), "a", "rejected", "", ["a"], NOW)
    _out, deaths = dead_letter_header(first, "a", "expired", "", ["a"], NOW)
    assert [(d["reason"], d["count"]) for d in deaths] == [("expired", 1), ("rejected", 1)]


def test_drop_cc_removes_only_the_cc_header() -> None:
    raw = publish_header(headers={"CC": ["x"], "keep": 1})
    out, deaths = dead_letter_header(raw, "q", "maxlen", "", ["q", "x"], NOW, drop_cc=True)
    headers = headers_of(out)
    assert "CC" not in headers
    assert headers["keep"] == 1
    assert deaths[0]["routing-keys"] == ["q", "x"]  # the death still records the CC key


def _deaths(*items: tuple[str, str]) -> list[dict[str, Any]]:
    """x-death entries, newest first, from (queue, reason) pairs."""
    return [{"queue": queue, "reason": reason, "count": 1} for queue, reason in items]


def test_is_cycle_follows_rabbitmq() -> None:
    # never died in the target queue: no cycle
    assert not is_cycle(_deaths(("a", "expired")), "b")
    assert not is_cycle([], "a")
    # back to a queue it expired from, fully automatically
    assert is_cycle(_deaths(("a", "expired")), "a")
    assert is_cycle(_deaths(("b", "maxlen"), ("a", "expired")), "a")
    assert is_cycle(_deaths(("b", "delivery_limit"), ("a", "expired")), "a")
    # a rejection since the latest death in the target breaks the cycle (a client decided)
    assert not is_cycle(_deaths(("a", "rejected")), "a")
    assert not is_cycle(_deaths(("b", "rejected"), ("a", "expired")), "a")
    # ...but a rejection before that latest death does not
    assert is_cycle(_deaths(("a", "expired"), ("a", "rejected")), "a")
    assert is_cycle(_deaths(("b", "expired"), ("a", "maxlen"), ("c", "rejected")), "a")
