"""``amqp-stream`` source: options, offset arithmetic and the socket consumer's frame parser
(no Spark session, no broker)."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the Spark connector needs pyspark (the spark extra)")
import itertools

from pamqp import body, commands, frame, header
from pamqp.commands import Basic

from amqpd.model.stream_delivery import with_offset
from amqpd.wire import codec
from interop.spark import AmqpStreamDataSource, ConfigError
from interop.spark.source_options import EARLIEST, LATEST, parse_source_options
from interop.spark.stream_client import StreamError
from interop.spark.stream_ranges import OffsetRange, cap_ends, split_ranges
from interop.spark.stream_rows import Rows
from interop.spark.stream_socket import SocketConsumer

URL = "amqp://guest:s3cret@127.0.0.1:5672/%2F"


def test_defaults_and_mixed_case_names() -> None:
    stream = parse_source_options({"URL": URL, "Streams": "a, b"}, batch=False)
    assert stream.streams == ("a", "b")
    assert stream.starting == {"a": LATEST, "b": LATEST}
    assert stream.max_messages_per_trigger is None and stream.fail_on_data_loss
    batch = parse_source_options({"url": URL, "streams": "a"}, batch=True)
    assert batch.starting == {"a": EARLIEST} and batch.ending == {"a": LATEST}
    given = parse_source_options(
        {
            "url": URL,
            "streams": "a,b",
            "startingoffsets": '{"a": 42, "b": -2}',
            "maxmessagespertrigger": "5000",
            "failondataloss": "false",
            "minpartitions": "4",
            "checkpointLocation": "/tmp/x",
        },
        batch=False,
    )
    assert given.starting == {"a": 42, "b": EARLIEST}
    assert given.max_messages_per_trigger == 5000 and given.min_partitions == 4
    assert not given.fail_on_data_loss
    assert pickle.loads(pickle.dumps(given)) == given


@pytest.mark.parametrize(
    ("options", "batch", "text"),
    [
        ({"streams": "a"}, False, 'option "url" is required'),
        ({"url": "http://x", "streams": "a"}, False, "must start with amqp://"),
        ({"url": URL}, False, 'option "streams" is required'),
        ({"url": URL, "streams": "a,,b"}, False, "has an empty name"),
        ({"url": URL, "streams": "a,a"}, False, "names a stream twice"),
        ({"url": URL, "streams": "a", "startingOffsets": "first"}, False, "must be earliest"),
        ({"url": URL, "streams": "a", "startingOffsets": '{"b": 1}'}, False, "not in streams"),
        ({"url": URL, "streams": "a,b", "startingOffsets": '{"a": 1}'}, False, "no offset for 'b'"),
        ({"url": URL, "streams": "a", "startingOffsets": '{"a": -3}'}, False, "integer >= -2"),
        ({"url": URL, "streams": "a", "endingOffsets": "latest"}, False, "batch reads"),
        ({"url": URL, "streams": "a", "maxMessagesPerTrigger": "0"}, False, "1..2147483647"),
        ({"url": URL, "streams": "a", "maxMessagesPerTrigger": "5"}, True, "streaming reads"),
        ({"url": URL, "streams": "a", "startingOffsets": "latest"}, True, "not allowed"),
        ({"url": URL, "streams": "a", "maxMessagePerTrigger": "5"}, False, "did you mean"),
    ],
)
def test_bad_options_fail_in_one_line(options: dict[str, str], batch: bool, text: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_source_options(options, batch=batch)
    message = str(info.value)
    assert message.startswith("amqp-stream source: ") and text in message
    assert "\n" not in message and "s3cret" not in message


def test_the_data_source_is_named_amqp_stream_with_the_issue_s_columns() -> None:
    assert AmqpStreamDataSource.name() == "amqp-stream"
    assert AmqpStreamDataSource({}).schema() == (
        "stream string, offset long, timestamp timestamp, routing_key string, "
        "message_id string, headers map<string,string>, value binary"
    )


def test_cap_ends_shares_the_limit_by_backlog() -> None:
    start = {"a": 0, "b": 100, "c": 7}
    ends = {"a": 1000, "b": 200, "c": 7}
    assert cap_ends(start, ends, None) == ends
    assert cap_ends(start, ends, 5000) == ends
    capped = cap_ends(start, ends, 110)
    assert capped == {"a": 100, "b": 110, "c": 7}
    assert sum(capped[s] - start[s] for s in start) == 110
    # every stream with a backlog moves while the limit allows, even a small share
    tiny = cap_ends({"a": 0, "b": 0}, {"a": 10_000, "b": 1}, 2)
    assert tiny == {"a": 1, "b": 1}
    # an end behind the start (a stale probe) never moves a stream backwards
    assert cap_ends({"a": 50}, {"a": 40}, 10) == {"a": 50}


def test_split_ranges_one_per_stream_or_more() -> None:
    start = {"a": 0, "b": 10, "c": 5}
    end = {"a": 100, "b": 10, "c": 25}
    assert split_ranges(start, end, None) == [OffsetRange("a", 0, 100), OffsetRange("c", 5, 25)]
    pieces = split_ranges(start, end, 6)
    assert len(pieces) >= 6
    for stream in ("a", "c"):
        mine = [p for p in pieces if p.stream == stream]
        assert mine[0].start == start[stream] and mine[-1].end == end[stream]
        assert all(x.end == y.start for x, y in itertools.pairwise(mine))
    assert split_ranges({"a": 0}, {"a": 2}, 10) == [OffsetRange("a", 0, 1), OffsetRange("a", 1, 2)]
    # a stream without a start in the checkpoint (added later) is planned by the caller
    assert split_ranges({}, {"a": 5}, None) == []
    restored = pickle.loads(pickle.dumps(OffsetRange("a", 1, 2)))
    assert restored == OffsetRange("a", 1, 2)


def _delivery(tag: int, offset: int, payload: bytes, **props: Any) -> bytes:
    headers = {"x-stream-offset": offset, "app": "x", **props.pop("headers", {})}
    properties = Basic.Properties(headers=headers, **props)
    parts = [
        frame.marshal(Basic.Deliver("ctag", tag, False, "ex", "rk.1"), 1),
        frame.marshal(header.ContentHeader(0, len(payload), properties), 1),
    ]
    for at in range(0, len(payload), 10):  # several body frames
        parts.append(frame.marshal(body.ContentBody(payload[at : at + 10]), 1))
    return b"".join(parts)


def test_socket_consumer_parses_deliveries_split_anywhere() -> None:
    wire = (
        _delivery(1, 40, b"first body, longer than one frame", message_id="m1", timestamp=None)
        + _delivery(2, 41, b"", content_type="text/plain", delivery_mode=2)
        + _delivery(3, 43, b"third", message_id="m3", priority=3, correlation_id="c")
    )
    for cut in (1, 7, 13, 64, len(wire)):
        consumer = SocketConsumer(URL, 1.0, "t")
        got = Rows(consumer.headers)
        for at in range(0, len(wire), cut):
            consumer.buf += wire[at : at + cut]
            consumer._parse(got)
        assert got.offsets == [40, 41, 43] and got.last_tag == 3
        assert got.keys == [b"rk.1"] * 3 and got.ids == [b"m1", None, b"m3"]
        assert got.values == [b"first body, longer than one frame", b"", b"third"]
        assert got.stamps == [None, None, None]
        table = got.batch("s").to_pylist()
        assert [row["headers"] for row in table] == [[("app", "x")]] * 3
        assert table[0]["routing_key"] == "rk.1" and table[2]["message_id"] == "m3"


def test_socket_consumer_reads_broker_deliveries_whole_or_cut_and_decodes_each_table_once() -> None:
    """Deliveries as amqpd sends them (``x-stream-offset`` a long, last in the table): read
    in one step when whole in the buffer, frame by frame when cut; the same columns."""
    wire = b""
    for offset in range(100, 150):
        properties = Basic.Properties(
            message_id=f"m{offset}",
            headers={"source": "spark"},
            timestamp=datetime.fromtimestamp(offset, UTC),
        )
        head = with_offset(header.ContentHeader(0, 3, properties).marshal(), offset)
        deliver = frame.marshal(Basic.Deliver("ctag", offset - 99, False, "", "s1"), 1)
        wire += bytes(deliver) + b"".join(codec.encode_content(1, head, b"abc", 4096))
    for cut in (5, 97, len(wire)):
        consumer = SocketConsumer(URL, 1.0, "t")
        got = Rows(consumer.headers)
        for at in range(0, len(wire), cut):
            consumer.buf += wire[at : at + cut]
            consumer._parse(got)
        assert got.offsets == list(range(100, 150)) and got.last_tag == 50
        assert got.ids == [f"m{o}".encode() for o in range(100, 150)]
        assert got.stamps == list(range(100, 150)) and got.keys == [b"s1"] * 50
        assert got.values == [b"abc"] * 50 and got.sets == [0] * 50
        assert consumer.headers.pairs == [[("source", "spark")]]


def test_headers_unique_to_each_message_are_decoded_into_fresh_sets_and_kept_apart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After ``MAX_HEADER_SETS`` distinct tables a consumer starts a fresh `HeaderSets`
    (bounded memory); rows gathered across the switch keep their own headers."""
    from interop.spark import stream_socket

    monkeypatch.setattr(stream_socket, "MAX_HEADER_SETS", 2)
    consumer = SocketConsumer(URL, 1.0, "t")
    gathered = None
    first_sets = consumer.headers
    for offset in range(6):
        properties = Basic.Properties(headers={"trace": f"t{offset}"})
        head = with_offset(header.ContentHeader(0, 1, properties).marshal(), offset)
        deliver = frame.marshal(Basic.Deliver("ctag", offset + 1, False, "", "s1"), 1)
        consumer.buf += bytes(deliver) + b"".join(codec.encode_content(1, head, b"x", 4096))
        polled = consumer.poll(0.0)
        assert polled.offsets == [offset]
        if gathered is None:
            gathered = polled
        else:
            gathered.extend(polled, 0, 1)
    assert consumer.headers is not first_sets and len(consumer.headers.pairs) <= 2
    assert gathered is not None
    table = gathered.batch("s1").to_pylist()
    assert [row["headers"] for row in table] == [[("trace", f"t{o}")] for o in range(6)]


def test_a_delivery_cut_across_the_switch_to_fresh_header_sets_keeps_its_headers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A delivery whose header frame was read before the switch to a fresh `HeaderSets`
    and whose body arrives after it keeps the headers it was read with (CI at c2501bc:
    RabbitMQ's tables are decoded one by one, so its reads switch every 1,024 rows)."""
    from interop.spark import stream_socket

    monkeypatch.setattr(stream_socket, "MAX_HEADER_SETS", 2)
    consumer = SocketConsumer(URL, 1.0, "t")
    frames: list[bytes] = []
    for offset in range(3):
        properties = Basic.Properties(headers={"trace": f"t{offset}"})
        head = with_offset(header.ContentHeader(0, 1, properties).marshal(), offset)
        deliver = frame.marshal(Basic.Deliver("ctag", offset + 1, False, "", "s1"), 1)
        frames.append(bytes(deliver) + b"".join(codec.encode_content(1, head, b"x", 4096)))
    cut = len(frames[1]) - 9  # message 1's body frame (8 bytes of framing, 1 of body)
    consumer.buf += frames[0] + frames[1][:cut]
    first = consumer.poll(0.0)
    assert first.offsets == [0] and len(consumer.headers.pairs) == 2
    consumer.buf += frames[1][cut:] + frames[2]
    second = consumer.poll(0.0)
    assert second.headers is consumer.headers and second.headers is not first.headers
    assert second.offsets == [1, 2]
    first.extend(second, 0, 2)
    table = first.batch("s1").to_pylist()
    assert [row["headers"] for row in table] == [[("trace", f"t{o}")] for o in range(3)]


def test_socket_consumer_reports_a_channel_close_and_a_queue_that_is_no_stream() -> None:
    consumer = SocketConsumer(URL, 1.0, "t")
    consumer.stream = "nope"
    close = commands.Channel.Close(404, "NOT_FOUND - no queue 'nope'", 60, 20)
    consumer.buf += frame.marshal(close, 1)
    sent: list[bytes] = []
    consumer._send = lambda *frames: sent.extend(frames)  # type: ignore[method-assign]
    with pytest.raises(StreamError, match="stream 'nope' not found in vhost '/'") as info:
        consumer._parse(Rows())
    assert info.value.reply_code == 404 and info.value.refused and sent
    plain = SocketConsumer(URL, 1.0, "t")
    properties = Basic.Properties(message_id="m")
    plain.buf += frame.marshal(Basic.Deliver("c", 1, False, "", "q"), 1)
    plain.buf += frame.marshal(header.ContentHeader(0, 1, properties), 1)
    plain.buf += frame.marshal(body.ContentBody(b"x"), 1)
    with pytest.raises(StreamError, match="not a stream"):
        plain._parse(Rows())


class FakePositions:
    """Stands in for the driver's broker probes: fixed first and end offsets per stream."""

    def __init__(self, first: dict[str, int], end: dict[str, int | None]) -> None:
        self.first, self.ends = first, end

    def check(self) -> None:
        pass

    def earliest(self, stream: str) -> int:
        return self.first[stream]

    def end(self, stream: str) -> int | None:
        return self.ends[stream]

    def resolve(self, spec: dict[str, int]) -> dict[str, int]:
        return {s: self.first[s] if v == EARLIEST else v for s, v in spec.items()}

    def close(self) -> None:
        pass


def _reader(monkeypatch: pytest.MonkeyPatch, positions: FakePositions, **options: str) -> Any:
    from interop.spark import stream_source

    monkeypatch.setattr(stream_source, "_Positions", lambda _options: positions)
    parsed = parse_source_options({"url": URL, "streams": "a,b", **options}, batch=False)
    return stream_source.AmqpStreamReader(parsed)


def test_stream_reader_limits_available_now_and_streams_added_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    positions = FakePositions({"a": 10, "b": 0}, {"a": 1010, "b": 100})
    reader = _reader(monkeypatch, positions, maxMessagesPerTrigger="550")
    assert reader.getDefaultReadLimit() == ReadMaxRows(550)
    start = {"a": 10, "b": 0}
    assert reader.latestOffset(start, ReadMaxRows(550)) == {"a": 510, "b": 50}
    assert reader.latestOffset(start, ReadAllAvailable()) == {"a": 1010, "b": 100}
    # AvailableNow: the ends when it started, even if the streams grow
    reader.prepareForTriggerAvailableNow()
    positions.ends = {"a": 5000, "b": 5000}
    assert reader.latestOffset(start, ReadAllAvailable()) == {"a": 1010, "b": 100}
    assert reader.latestOffset({"a": 1010, "b": 100}, ReadAllAvailable()) == {
        "a": 1010,
        "b": 100,
    }
    # a checkpoint written when only "a" was read: "b" starts at its earliest offset
    assert reader.partitions({"a": 1000}, {"a": 1010, "b": 3}) == [
        OffsetRange("a", 1000, 1010),
        OffsetRange("b", 0, 3),
    ]
    # an empty stream (no end) stays where it is
    plain = _reader(monkeypatch, FakePositions({"a": 0, "b": 0}, {"a": None, "b": 7}))
    assert plain.getDefaultReadLimit() == ReadAllAvailable()
    assert plain.latestOffset({"a": 0, "b": 0}, ReadAllAvailable()) == {"a": 0, "b": 7}
    assert pickle.loads(pickle.dumps(plain)).options == plain.options


def test_an_empty_stream_is_waited_for_only_where_the_count_may_lag() -> None:
    from types import SimpleNamespace

    from interop.spark.stream_client import StreamClient
    from interop.spark.stream_source import _Positions

    options = parse_source_options({"url": URL, "streams": "a", "emptyProbeMs": "700"}, batch=True)
    client = StreamClient(URL, 1.0, "test")
    for information, exact in (
        (b"amqpd 0.1.0: an AMQP 0-9-1 broker in Python", True),
        ("Licensed under the MPL 2.0. Website: https://rabbitmq.com", False),
    ):
        client.conn = SimpleNamespace(server_properties={"information": information})
        assert client.exact_counts is exact
        counted = SimpleNamespace(exact_counts=exact, message_count=lambda _s: 0)
        assert _Positions._wait(counted, "a", options) == (0.0 if exact else 0.7)  # type: ignore[arg-type]
        counted.message_count = lambda _s: 5
        assert _Positions._wait(counted, "a", options) == options.read_timeout_ms / 1000  # type: ignore[arg-type]
    client.conn = None  # not connected: no claim
    assert not client.exact_counts
    client.ioloop.close()


class StallingConsumer:
    """A subscription that delivers ``offsets`` from where it was opened, then nothing."""

    opened: list[int]

    def __init__(self, stored: list[int]) -> None:
        self.stored = stored
        self.queue: list[int] = []

    def open(self, _stream: str, offset: int, _prefetch: int) -> StallingConsumer:
        StallingConsumer.opened.append(offset)
        self.queue = [o for o in self.stored if o >= offset]
        return self

    def poll(self, _timeout: float) -> Rows:
        batch, self.queue = self.queue[:7], self.queue[7:]
        rows = Rows()
        for o in batch:
            rows.add(o, o + 1, "rk", None, f"m{o}", {}, b"x")
        return rows

    def ack(self, _tag: int) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.mark.parametrize("first", [40, 100])
def test_a_reader_stalled_by_retention_reports_the_loss_or_resumes_at_the_first_offset(
    monkeypatch: pytest.MonkeyPatch, first: int
) -> None:
    """RabbitMQ can leave a consumer at a removed offset with no delivery at all: the
    reader probes the stream's first offset instead of waiting out ``readTimeoutMs``."""
    from interop.spark import stream_read

    stored = list(range(first, 120))  # retention removed everything below ``first``
    monkeypatch.setattr(stream_read, "STALL_PROBE_S", 0.001)
    monkeypatch.setattr(stream_read, "_first_offset", lambda *_args: first)
    # each query's first subscription (at 0) stalls; a resubscription delivers what is stored
    consumers = iter([StallingConsumer([]), StallingConsumer([]), StallingConsumer(stored)])
    monkeypatch.setattr(stream_read, "_consumer", lambda *_args: next(consumers))
    StallingConsumer.opened = []
    options = {"url": URL, "streams": "s", "readTimeoutMs": "60000"}
    part = OffsetRange("s", 0, 100)
    strict = parse_source_options(options, batch=True)
    with pytest.raises(stream_read.DataLossError, match=f"offsets 0..{min(first, 100) - 1} were"):
        list(stream_read.read_range(strict, part, "t"))
    lenient = parse_source_options({**options, "failOnDataLoss": "false"}, batch=True)
    batches = list(stream_read.read_range(lenient, part, "t"))
    offsets = [o for b in batches for o in b.column("offset").to_pylist()]
    assert offsets == list(range(first, 100))
    assert StallingConsumer.opened == [0, 0] + ([first] if first < 100 else [])


def test_a_stalled_reader_whose_offsets_still_exist_fails_after_read_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from interop.spark import stream_read

    monkeypatch.setattr(stream_read, "STALL_PROBE_S", 0.001)
    probes: list[int] = []

    def first_offset(*_args: Any) -> int:
        probes.append(0)
        return 0  # nothing removed: the reader must keep waiting

    monkeypatch.setattr(stream_read, "_first_offset", first_offset)
    monkeypatch.setattr(stream_read, "_consumer", lambda *_a: StallingConsumer(list(range(5))))
    StallingConsumer.opened = []
    options = parse_source_options({"url": URL, "streams": "s", "readTimeoutMs": "20"}, batch=True)
    with pytest.raises(StreamError, match=r"no message .* for 20 ms .* \(last offset read 4\)"):
        list(stream_read.read_range(options, OffsetRange("s", 0, 10), "t"))
    assert len(probes) >= 2 and StallingConsumer.opened == [0]
