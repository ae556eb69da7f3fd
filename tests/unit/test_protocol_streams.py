"""Stream queues through the sans-IO core: RabbitMQ 3.10's declare and consume rules and
reply texts, offsets, confirms after the fsync, acks as credit, filters, offset tracking."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
from pamqp import commands

from amqpd.model.broker import Broker
from amqpd.model.stream import StreamQueue
from persistence.journal import Journal
from persistence.stream.log import StreamStorage, fsync_all
from tests.unit.engine_driver import Client
from tests.unit.protocol_support import connect

STREAM = {"x-queue-type": "stream"}


def _broker(tmp_path: Path, stored: bool = True) -> Broker:
    broker = Broker(journal=Journal() if stored else None, now=1000.0)
    broker.set_stream_logs(StreamStorage(tmp_path / "streams"))
    return broker


def _commit(broker: Broker) -> None:
    """What the shell's group committer does: fsync the dirty streams, then the batch."""
    journal = broker.journal
    assert isinstance(journal, Journal)
    batch = journal.take_batch()
    dirty = broker.dirty_streams
    assert dirty is not None
    for queue in list(dirty):
        fds, upto = queue.log.sync_targets()
        fsync_all(fds)
        queue.log_synced(upto)
    dirty.clear()
    if batch is not None:
        broker.batch_committed(batch.id)


def _declare(client: Client, name: str = "s", **arguments: Any) -> list[Any]:
    client.send(
        1,
        commands.Queue.Declare(queue=name, durable=True, arguments={**STREAM, **arguments}),
    )
    return client.methods()


def _consume(client: Client, prefetch: int = 100, name: str = "s", **arguments: Any) -> None:
    if prefetch:
        client.send(1, commands.Basic.Qos(prefetch_count=prefetch))
    client.send(1, commands.Basic.Consume(queue=name, consumer_tag="c1", arguments=arguments))


def _deliveries(client: Client) -> list[tuple[int, int, bytes, dict[str, Any]]]:
    """(delivery tag, x-stream-offset, body, headers) of each delivery received."""
    out = []
    tag = 0
    headers: dict[str, Any] = {}
    for _channel, value in client.received():
        if isinstance(value, commands.Basic.Deliver):
            tag = value.delivery_tag
            assert not value.redelivered
        elif hasattr(value, "properties"):
            headers = dict(value.properties.headers or {})
        elif hasattr(value, "value"):
            out.append((tag, headers["x-stream-offset"], value.value, headers))
    return out


def _closed(client: Client) -> tuple[int, str]:
    methods = client.methods()
    close = methods[-1]
    assert isinstance(close, commands.Channel.Close | commands.Connection.Close), methods
    return close.reply_code, close.reply_text


@pytest.mark.parametrize(
    ("name", "flags", "arguments", "text"),
    [
        (
            "nd",
            {"durable": False},
            {},
            "invalid property 'non-durable' for queue 'nd' in vhost '/'",
        ),
        (
            "ex",
            {"durable": True, "exclusive": True},
            {},
            "invalid property 'exclusive-owner' for queue 'ex' in vhost '/'",
        ),
        (
            "ad",
            {"durable": True, "auto_delete": True},
            {},
            "invalid property 'auto-delete' for queue 'ad' in vhost '/'",
        ),
        (
            "",
            {"durable": True},
            {},
            "Cannot declare a server-named queue for type rabbit_stream_queue",
        ),
        (
            "ml",
            {"durable": True},
            {"x-max-length": 10},
            "invalid arg 'x-max-length' for queue 'ml' in vhost '/' of queue type "
            "rabbit_stream_queue",
        ),
        (
            "t",
            {"durable": True},
            {"x-message-ttl": 10},
            "invalid arg 'x-message-ttl' for queue 't' in vhost '/' of queue type "
            "rabbit_stream_queue",
        ),
        (
            "d",
            {"durable": True},
            {"x-dead-letter-exchange": "x"},
            "invalid arg 'x-dead-letter-exchange' for queue 'd' in vhost '/' of queue type "
            "rabbit_stream_queue",
        ),
        (
            "a",
            {"durable": True},
            {"x-max-age": "1 day"},
            "invalid arg 'x-max-age' for queue 'a' in vhost '/': invalid_max_age",
        ),
        (
            "a",
            {"durable": True},
            {"x-max-age": 5},
            "invalid arg 'x-max-age' for queue 'a' in vhost '/': {unacceptable_type,signedint}",
        ),
    ],
)
def test_declare_refusals_as_rabbitmq(
    tmp_path: Path, name: str, flags: dict[str, bool], arguments: dict[str, Any], text: str
) -> None:
    broker = _broker(tmp_path)
    client = connect(broker)
    client.send(1, commands.Queue.Declare(queue=name, arguments={**STREAM, **arguments}, **flags))
    assert _closed(client) == (406, f"PRECONDITION_FAILED - {text}")
    assert not (tmp_path / "streams" / "%2F" / (name or "x")).exists()


def test_declare_accepts_stream_arguments_and_compares_them_on_redeclare(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    client = connect(broker)
    args = {
        "x-max-age": "7D",
        "x-max-length-bytes": 1_000_000,
        "x-stream-max-segment-size-bytes": 100_000,
        "x-initial-cluster-size": 1,
    }
    ok = _declare(client, **args)[-1]
    assert isinstance(ok, commands.Queue.DeclareOk) and ok.message_count == 0
    assert isinstance(broker.vhosts["/"].queues["s"], StreamQueue)
    close = _declare(client, **{**args, "x-max-age": "8D"})[-1]
    assert (close.reply_code, close.reply_text) == (
        406,
        "PRECONDITION_FAILED - inequivalent arg 'x-max-age' for queue 's' in vhost '/': "
        "received '8D' but current is '7D'",
    )
    client.send(1, commands.Channel.CloseOk())
    client.open_channel(1)
    for age in ("10m", "2s", "1h", "1Y", "1M"):
        assert isinstance(
            _declare(client, f"age-{age}", **{"x-max-age": age})[-1], commands.Queue.DeclareOk
        )


def test_publish_confirm_waits_for_fsync_and_count_is_exact(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    client = connect(broker)
    _declare(client)
    client.send(1, commands.Confirm.Select())
    client.methods()
    for number in range(3):
        client.publish(1, "s", b"m%d" % number)  # not persistent: a stream confirms after fsync
    assert client.methods() == []
    client.send(1, commands.Queue.Declare(queue="s", passive=True))
    assert client.methods()[-1].message_count == 3  # exact at once, before the fsync
    _commit(broker)
    acks = client.methods()
    assert [(a.delivery_tag, a.multiple) for a in acks] == [(3, True)]


def test_consume_offsets_headers_and_prefetch_as_hard_cap(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    client = connect(broker)
    _declare(client)
    for number in range(10):
        client.publish(1, "s", b"m%d" % number, headers={"a": number})
    _commit(broker)
    client.methods()
    _consume(client, prefetch=4, **{"x-stream-offset": "first"})
    got = _deliveries(client)
    assert [(tag, offset, body) for tag, offset, body, _h in got] == [
        (1, 0, b"m0"),
        (2, 1, b"m1"),
        (3, 2, b"m2"),
        (4, 3, b"m3"),
    ]
    assert got[2][3] == {"a": 2, "x-stream-offset": 2}
    client.send(1, commands.Basic.Ack(delivery_tag=2, multiple=True))
    assert [offset for _t, offset, _b, _h in _deliveries(client)] == [4, 5]
    client.send(1, commands.Queue.Declare(queue="s", passive=True))
    assert client.methods()[-1].message_count == 10  # nothing removed by consumption


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("first", [0, 1, 2, 3, 4, 5]),
        ("last", [4, 5]),  # the last chunk
        ("next", []),
        (None, []),
        (2, [2, 3, 4, 5]),
        (-5, [0, 1, 2, 3, 4, 5]),
        (99, []),
        ("10m", [0, 1, 2, 3, 4, 5]),
    ],
)
def test_offset_specs(tmp_path: Path, spec: Any, expected: list[int]) -> None:
    broker = _broker(tmp_path)
    client = connect(broker)
    _declare(client)
    for batch in ((0, 1), (2, 3), (4, 5)):
        for number in batch:
            client.publish(1, "s", b"m%d" % number)
        _commit(broker)  # one chunk per commit
    client.methods()
    _consume(client, **({} if spec is None else {"x-stream-offset": spec}))
    assert [offset for _t, offset, _b, _h in _deliveries(client)] == expected
    client.publish(1, "s", b"later")
    _commit(broker)
    assert [offset for _t, offset, _b, _h in _deliveries(client)] == [6]  # then follows


def test_timestamp_offset_is_chunk_granular(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    client = connect(broker, now=1000.0)
    _declare(client)
    client.publish(1, "s", b"old")
    _commit(broker)
    client.advance(100.0)
    client.publish(1, "s", b"new")
    _commit(broker)
    client.methods()
    when = datetime.datetime.fromtimestamp(1050, tz=datetime.UTC)
    _consume(client, **{"x-stream-offset": when})
    assert [body for _t, _o, body, _h in _deliveries(client)] == [b"new"]


@pytest.mark.parametrize(
    ("prefetch", "global_", "arguments", "no_ack", "code", "text"),
    [
        (
            0,
            False,
            {},
            False,
            406,
            "consumer prefetch count is not set for 'queue 's' in vhost '/''",
        ),
        (
            10,
            True,
            {},
            False,
            406,
            "consumer prefetch count is not set for 'queue 's' in vhost '/''",
        ),
        (
            10,
            False,
            {},
            True,
            540,
            "automatic acknowledgement not supported by stream queues queue 's' in vhost '/'",
        ),
        (
            10,
            False,
            {"x-stream-offset": "10x"},
            False,
            406,
            "invalid arg 'x-stream-offset' for queue 's' in vhost '/': "
            '{invalid_stream_offset_arg,{longstr,<<"10x">>}}',
        ),
        (
            10,
            False,
            {"x-stream-offset": "foo"},
            False,
            406,
            "invalid arg 'x-stream-offset' for queue 's' in vhost '/': "
            '{invalid_stream_offset_arg,{longstr,<<"foo">>}}',
        ),
        (
            10,
            False,
            {"x-stream-offset": True},
            False,
            406,
            "invalid arg 'x-stream-offset' for queue 's' in vhost '/': "
            "{invalid_stream_offset_arg,{bool,true}}",
        ),
    ],
)
def test_consume_refusals(
    tmp_path: Path,
    prefetch: int,
    global_: bool,
    arguments: dict[str, Any],
    no_ack: bool,
    code: int,
    text: str,
) -> None:
    broker = _broker(tmp_path)
    client = connect(broker)
    _declare(client)
    client.send(1, commands.Basic.Qos(prefetch_count=prefetch, global_=global_))
    client.send(1, commands.Basic.Consume(queue="s", no_ack=no_ack, arguments=arguments))
    reply_code, reply_text = _closed(client)
    assert reply_code == code
    assert reply_text.endswith(text)


@pytest.mark.parametrize(
    ("method", "text"),
    [
        (commands.Basic.Get(queue="s"), "basic.get not supported by stream queues"),
        (commands.Queue.Purge(queue="s"), "queue.purge not supported by stream queues"),
        (commands.Basic.Nack(delivery_tag=1), "basic.nack and basic.reject not supported"),
        (commands.Basic.Reject(delivery_tag=1), "basic.nack and basic.reject not supported"),
    ],
)
def test_connection_errors_540(tmp_path: Path, method: Any, text: str) -> None:
    broker = _broker(tmp_path)
    client = connect(broker)
    _declare(client)
    client.publish(1, "s", b"x")
    _commit(broker)
    _consume(client, **{"x-stream-offset": "first"})
    assert len(_deliveries(client)) == 1
    client.send(1, method)
    close = client.methods()[-1]
    assert isinstance(close, commands.Connection.Close)
    assert close.reply_code == 540
    assert text in close.reply_text and "queue 's' in vhost '/'" in close.reply_text


def test_filtering_skips_chunks_and_filters_messages(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    client = connect(broker)
    _declare(client)
    for color, count in (("red", 3), ("blue", 3), (None, 2)):
        for number in range(count):
            headers = {} if color is None else {"x-stream-filter-value": color}
            client.publish(1, "s", f"{color}-{number}".encode(), headers=headers)
        _commit(broker)
    client.publish(1, "s", b"blue-late", headers={"x-stream-filter-value": "blue"})
    client.publish(1, "s", b"red-late", headers={"x-stream-filter-value": "red"})
    _commit(broker)
    client.methods()
    _consume(client, **{"x-stream-offset": "first", "x-stream-filter": "red"})
    bodies = [body for _t, _o, body, _h in _deliveries(client)]
    assert bodies == [b"red-0", b"red-1", b"red-2", b"red-late"]
    client.send(1, commands.Basic.Cancel(consumer_tag="c1"))
    client.methods()
    client.send(
        1,
        commands.Basic.Consume(
            queue="s",
            consumer_tag="c2",
            arguments={
                "x-stream-offset": "first",
                "x-stream-filter": ["blue"],
                "x-stream-match-unfiltered": True,
            },
        ),
    )
    bodies = [body for _t, _o, body, _h in _deliveries(client)]
    assert bodies == [b"blue-0", b"blue-1", b"blue-2", b"None-0", b"None-1", b"blue-late"]


def test_automatic_offset_tracking_resumes_after_reconnect_and_restart(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    client = connect(broker)
    _declare(client)
    for number in range(6):
        client.publish(1, "s", b"m%d" % number)
    _commit(broker)
    client.methods()
    tracking = {"x-stream-automatic-offset-tracking": True}
    _consume(client, prefetch=3, **tracking, **{"x-stream-offset": "first"})
    got = _deliveries(client)
    client.send(1, commands.Basic.Ack(delivery_tag=got[1][0], multiple=True))  # offsets 0, 1
    _commit(broker)
    client.send(
        0, commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
    )
    again = connect(broker)
    _consume(again, prefetch=2, **tracking)
    assert [offset for _t, offset, _b, _h in _deliveries(again)] == [2, 3]
    # a broker restart: a new core over the same files resumes there too
    queue = broker.vhosts["/"].queues["s"]
    assert isinstance(queue, StreamQueue)
    queue.log.close()
    restarted = _broker(tmp_path)
    fresh = connect(restarted)
    _declare(fresh)
    _consume(fresh, prefetch=10, **tracking)
    assert [offset for _t, offset, _b, _h in _deliveries(fresh)] == [2, 3, 4, 5]


def test_memory_only_broker_delivers_at_once_and_delete_removes_files(tmp_path: Path) -> None:
    broker = _broker(tmp_path, stored=False)
    client = connect(broker)
    _declare(client)
    _consume(client, **{"x-stream-offset": "first"})
    client.methods()
    client.publish(1, "s", b"now")
    assert [body for _t, _o, body, _h in _deliveries(client)] == [b"now"]
    assert (tmp_path / "streams" / "%2F" / "s").exists()
    client.send(1, commands.Queue.Delete(queue="s"))
    assert not (tmp_path / "streams" / "%2F" / "s").exists()


def test_offset_header_is_added_whatever_the_publisher_sent(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    client = connect(broker)
    _declare(client)
    client.publish(1, "s", b"plain")
    client.publish(1, "s", b"typed", content_type="text/plain", content_encoding="gzip")
    client.publish(1, "s", b"forged", headers={"x-stream-offset": 99, "k": "v"}, message_id="m")
    _commit(broker)
    client.methods()
    client.send(1, commands.Basic.Qos(prefetch_count=10))
    client.send(
        1,
        commands.Basic.Consume(queue="s", consumer_tag="c", arguments={"x-stream-offset": 0}),
    )
    properties = [v.properties for _c, v in client.received() if hasattr(v, "properties")]
    assert [p.headers for p in properties] == [
        {"x-stream-offset": 0},
        {"x-stream-offset": 1},
        {"k": "v", "x-stream-offset": 2},
    ]
    assert (properties[1].content_type, properties[1].content_encoding) == ("text/plain", "gzip")
    assert properties[2].message_id == "m"


def test_retention_by_size_removes_whole_old_segments(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    client = connect(broker)
    _declare(client, **{"x-max-length-bytes": 3000, "x-stream-max-segment-size-bytes": 1000})
    for _round in range(20):
        for _ in range(5):
            client.publish(1, "s", b"x" * 50)
        _commit(broker)
    client.methods()
    queue = broker.vhosts["/"].queues["s"]
    assert isinstance(queue, StreamQueue)
    first = queue.log.first_offset
    assert first > 0 and first % 5 == 0  # whole segments (of whole chunks) went
    assert queue.log.size_bytes <= 3000
    client.send(1, commands.Queue.Declare(queue="s", passive=True))
    assert client.methods()[-1].message_count == 100 - first
    _consume(client, **{"x-stream-offset": 0})  # below the oldest kept: the oldest
    offsets = [offset for _t, offset, _b, _h in _deliveries(client)]
    assert offsets == list(range(first, 100))


def test_stream_retention_and_segment_size_from_a_policy(tmp_path: Path) -> None:
    """RabbitMQ's stream policies: max-length-bytes and stream-max-segment-size-bytes (the
    lower of argument and policy), max-age (the shorter), applied to a stream declared
    before or after the policy, live, and undone when the policy goes."""
    from amqpd.model.policy_admin import clear_policy, set_policy

    broker = _broker(tmp_path)
    client = connect(broker)
    _declare(client, "early", **{"x-max-length-bytes": 10_000_000})
    definition = {"max-length-bytes": 3000, "stream-max-segment-size-bytes": 1000}
    set_policy(broker, "/", "retain", {"pattern": "^(early|late)$", "definition": definition})
    _declare(client, "late")
    _declare(client, "other")  # no policy
    for _round in range(20):
        for name in ("early", "late", "other"):
            for _ in range(5):
                client.publish(1, name, b"x" * 50)
        _commit(broker)
    client.methods()
    queues = broker.vhosts["/"].queues
    for name in ("early", "late"):
        stream = queues[name]
        assert isinstance(stream, StreamQueue)
        assert stream.stream_settings.max_bytes == 3000
        assert stream.log.first_offset > 0 and stream.log.size_bytes <= 3000
    other = queues["other"]
    assert isinstance(other, StreamQueue) and other.log.first_offset == 0
    clear_policy(broker, "/", "retain")
    early = queues["early"]
    assert isinstance(early, StreamQueue)
    assert early.stream_settings.max_bytes == 10_000_000  # back to its argument
    assert early.stream_settings.max_segment_bytes is None


def test_stream_max_age_from_a_policy_takes_the_shorter_age(tmp_path: Path) -> None:
    from amqpd.model.policy_admin import set_policy

    broker = _broker(tmp_path)
    client = connect(broker)
    _declare(client, "long", **{"x-max-age": "7D"})
    _declare(client, "short", **{"x-max-age": "10s"})
    _declare(client, "none")
    set_policy(broker, "/", "age", {"pattern": ".*", "definition": {"max-age": "1h"}})
    queues = broker.vhosts["/"].queues
    ages = {}
    for name in ("long", "short", "none"):
        stream = queues[name]
        assert isinstance(stream, StreamQueue)
        ages[name] = stream.stream_settings.max_age
        assert stream.needs_ticks  # retention by age is checked on the tick
    assert ages == {"long": 3600, "short": 10, "none": 3600}
