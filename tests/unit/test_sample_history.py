"""The sample history behind RabbitMQ's ``lengths_age`` / ``msg_rates_age`` /
``data_rates_age`` query parameters: what is kept (bounded), and the ``samples`` arrays the
management API answers with (rabbit_mgmt_stats shapes), driven without sockets."""

from __future__ import annotations

import time
from itertools import pairwise
from pathlib import Path
from typing import Any

from pamqp import commands

from amqpd.engine.rates import SAMPLE_INTERVAL, RateSampler
from amqpd.model.broker import Broker
from amqpd.model.history import RETAIN_MS, SampleHistory
from persistence.stream.log import StreamStorage
from tests.unit.management_support import Api
from tests.unit.protocol_support import Client, connect, declare, publish_frames, rpc

RANGE = "lengths_age=60&lengths_incr=5&msg_rates_age=60&msg_rates_incr=5"
KEPT = RETAIN_MS // int(SAMPLE_INTERVAL * 1000) + 1  # points a 5 s range can have


def _broker() -> tuple[Broker, Client]:
    broker = Broker()
    client = connect(broker, 1)
    declare(client, 1, "q1")
    rpc(
        client,
        1,
        commands.Exchange.Declare(exchange="ex", exchange_type="fanout"),
        commands.Exchange.DeclareOk,
    )
    rpc(client, 1, commands.Queue.Bind(queue="q1", exchange="ex"), commands.Queue.BindOk)
    return broker, client


def _check_samples(details: dict[str, Any], incr_ms: int = 5000) -> list[dict[str, int]]:
    samples = details["samples"]
    assert samples, details
    stamps = [sample["timestamp"] for sample in samples]
    assert all(stamp % incr_ms == 0 for stamp in stamps)
    assert stamps == sorted(stamps, reverse=True)  # newest first, as RabbitMQ
    assert all(a - b == incr_ms for a, b in pairwise(stamps))
    assert all(set(sample) == {"sample", "timestamp"} for sample in samples)
    return list(samples)


def test_a_series_keeps_changes_only_and_forgets_beyond_the_window() -> None:
    history = SampleHistory()
    busy, idle = object(), object()
    for step in range(1000):  # 5000 s at 5 s
        history.begin(step * 5000)
        history.record(busy, (step,))
        history.record(idle, (7,))
        history.end()
    busy_series, idle_series = history.series(busy), history.series(idle)
    assert busy_series is not None and idle_series is not None
    assert len(busy_series.times) <= KEPT + 1  # bounded by the window, not by the run
    assert len(idle_series.times) == 1  # an idle object costs one entry
    # a point inside the window has its value; none are given before the window
    points = history.points(busy_series, 0, 999 * 5000, 5000, 1)
    assert len(points) == KEPT
    assert points[0] == (999 * 5000, (999,)) and points[-1][1] == (999 - KEPT + 1,)
    # an object not recorded in a pass (deleted) is forgotten
    history.begin(1000 * 5000)
    history.record(busy, (1000,))
    history.end()
    assert history.series(idle) is None


def test_points_before_an_object_existed_are_zero() -> None:
    history = SampleHistory()
    old, new = object(), object()
    history.begin(10_000)
    history.record(old, (1, 2))
    history.end()
    history.begin(15_000)
    history.record(old, (1, 2))
    history.record(new, (5, 6))
    history.end()
    points = history.points(history.series(new), 0, 20_000, 5000, 2)
    # nothing before the history's start (10 s); zeros before the object's first sample
    assert points == [(20_000, (5, 6)), (15_000, (5, 6)), (10_000, (0, 0))]
    assert history.points(None, 0, 20_000, 5000, 2) == []


def test_queue_exchange_connection_and_overview_samples() -> None:
    broker, client = _broker()
    sampler = RateSampler(broker)
    start = time.time() // 5 * 5 - 35  # the last sample before the range's last point
    sampler.sample(start)
    for step in range(1, 7):
        for _ in range(step):
            client.send(1, *publish_frames("", b"x", exchange="ex"))
        sampler.sample(start + 5 * step)
    api = Api(broker)
    queue = api.get(f"/api/queues/%2F/q1?{RANGE}").json()
    lengths = _check_samples(queue["messages_details"])
    assert lengths[0]["sample"] == queue["messages"] == 21  # 1 + 2 + ... + 6
    assert [s["sample"] for s in lengths] == sorted(s["sample"] for s in lengths)[::-1]
    assert "rate" in queue["messages_details"] and "avg_rate" in queue["messages_details"]
    ready = _check_samples(queue["messages_ready_details"])
    assert ready[0]["sample"] == 21
    publish = _check_samples(queue["message_stats"]["publish_details"])
    assert publish[0]["sample"] == queue["message_stats"]["publish"] == 21
    details = queue["message_stats"]["publish_details"]
    assert details["avg"] == sum(s["sample"] for s in publish) / len(publish)
    span = (publish[0]["timestamp"] - publish[-1]["timestamp"]) / 1000
    assert details["avg_rate"] == (publish[0]["sample"] - publish[-1]["sample"]) / span
    _check_samples(queue["message_stats"]["deliver_get_details"])

    [listed] = api.get(f"/api/queues?{RANGE}").json()
    assert listed["messages_details"]["samples"] == queue["messages_details"]["samples"]

    exchange = api.get("/api/exchanges/%2F/ex?msg_rates_age=60&msg_rates_incr=5").json()
    assert _check_samples(exchange["message_stats"]["publish_in_details"])[0]["sample"] == 21

    [connection] = api.get("/api/connections?data_rates_age=60&data_rates_incr=5").json()
    received = _check_samples(connection["recv_oct_details"])
    assert received[0]["sample"] > received[-1]["sample"] > 0

    overview = api.get(f"/api/overview?{RANGE}").json()
    totals = _check_samples(overview["queue_totals"]["messages_details"])
    assert totals[0]["sample"] == 21
    _check_samples(overview["message_stats"]["publish_details"])


def test_no_range_no_samples_and_bad_ranges_are_refused() -> None:
    broker, _client = _broker()
    RateSampler(broker).sample(time.time())
    api = Api(broker)
    plain = api.get("/api/queues/%2F/q1").json()
    assert plain["messages_details"] == {"rate": 0.0}
    # half a pair, or a value that is not an integer: no range (RabbitMQ ignores them)
    for query in ("lengths_age=60", "lengths_age=x&lengths_incr=5"):
        assert "samples" not in api.get(f"/api/queues/%2F/q1?{query}").json()["messages_details"]
    for age, incr in ((0, 5), (60, 0), (5000, 1)):
        answer = api.get(f"/api/queues/%2F/q1?lengths_age={age}&lengths_incr={incr}")
        assert answer.status_code == 400
        assert answer.json() == {
            "error": "bad_request",
            "reason": f"Invalid range parameters: age {age}, incr {incr}",
        }


def test_a_long_range_is_bounded_by_the_history_kept() -> None:
    broker, client = _broker()
    sampler = RateSampler(broker)
    start = time.time() // 5 * 5 - 3005
    for step in range(600):  # 50 minutes of samples, a message each time
        client.send(1, *publish_frames("", b"x", exchange="ex"))
        sampler.sample(start + 5 * step)
    api = Api(broker)
    queue = api.get("/api/queues/%2F/q1?lengths_age=2500&lengths_incr=5").json()
    samples = queue["messages_details"]["samples"]
    assert 0 < len(samples) <= KEPT
    series = broker.statistics.history.series(broker.vhosts["/"].queues["q1"])
    assert series is not None and len(series.times) <= KEPT + 1


def test_the_node_history_is_for_monitoring_users() -> None:
    broker, _client = _broker()
    RateSampler(broker).sample(time.time() // 5 * 5 - 5)
    api = Api(broker)
    api.add_user("watcher", "monitoring")
    api.add_user("plain", "management")
    seen = api.get(f"/api/overview?{RANGE}", auth=("watcher", "pw")).json()
    assert "samples" in seen["queue_totals"]["messages_details"]
    narrowed = api.get(f"/api/overview?{RANGE}", auth=("plain", "pw")).json()
    assert "samples" not in narrowed["queue_totals"].get("messages_details", {})
    assert "samples" not in narrowed["message_stats"]["publish_details"]
    # a queue of a vhost the user may use has its samples
    queue = api.get(f"/api/queues/%2F/q1?{RANGE}", auth=("plain", "pw")).json()
    assert queue["messages_details"]["samples"][0]["sample"] == 0


def test_a_streams_length_samples_are_its_kept_messages(tmp_path: Path) -> None:
    broker = Broker()
    broker.set_stream_logs(StreamStorage(tmp_path / "streams"))
    client = connect(broker, 1)
    stream = {"x-queue-type": "stream"}
    declare(client, 1, "s", durable=True, arguments=stream)
    sampler = RateSampler(broker)
    start = time.time() // 5 * 5 - 10
    sampler.sample(start)
    for _ in range(4):
        client.send(1, *publish_frames("s", b"x"))
    sampler.sample(start + 5)
    queue = Api(broker).get(f"/api/queues/%2F/s?{RANGE}").json()
    assert queue["messages_ready"] == queue["messages"] == 4
    ready = _check_samples(queue["messages_ready_details"])
    assert ready[0]["sample"] == 4  # the stream keeps them: its ready deque stays empty
    overview = Api(broker).get(f"/api/overview?{RANGE}").json()
    totals = _check_samples(overview["queue_totals"]["messages_details"])
    assert totals[0]["sample"] == overview["queue_totals"]["messages"]  # as before
