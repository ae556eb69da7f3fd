"""amqpd perf options, topology routes, worker split and the summary (no sockets)."""

from __future__ import annotations

import pytest

from interop.perf.options import build_parser, parse_options
from interop.perf.report import as_json, format_text, summarise
from interop.perf.results import ConsumerStats, ProducerStats, WorkerResult
from interop.perf.runner import RunOutcome, plans
from interop.perf.topology import consumer_queue, producer_route, route_for
from interop.perf.worker import split


def test_defaults() -> None:
    o = parse_options([])
    assert (o.producers, o.consumers, o.queues, o.size) == (1, 1, 1, 100)
    assert (o.exchange, o.exchange_type, o.duration) == ("perf.direct", "direct", 10.0)
    assert not (o.persistent or o.durable or o.confirm or o.tx_size)


def test_perftest_short_flags() -> None:
    argv = "-x 2 -y 3 -s 1000 -c 500 -q 100 -A 50 -r 1000 -z 5 -t topic -f -u amqp://h/"
    o = parse_options(argv.split(" "))
    assert (o.producers, o.consumers, o.size, o.confirm) == (2, 3, 1000, 500)
    assert (o.prefetch, o.multi_ack_every, o.rate, o.duration) == (100, 50, 1000.0, 5.0)
    assert (o.exchange_type, o.exchange, o.url) == ("topic", "perf.topic", "amqp://h/")
    assert o.persistent and o.durable


def test_durable_follows_persistent_unless_told() -> None:
    assert not parse_options(["-f", "--no-durable"]).durable
    assert parse_options(["--durable"]).durable


def test_counts_replace_the_default_duration() -> None:
    assert parse_options(["-C", "1000"]).duration is None
    assert parse_options(["-C", "1000", "-z", "3"]).duration == 3.0


def test_queue_args_and_names() -> None:
    o = parse_options(
        [
            "--queues",
            "3",
            "--queue-arg",
            "x-max-length=10",
            "--queue-arg",
            "x-queue-type=quorum",
            "--queue-prefix",
            "p",
        ]
    )
    assert o.queue_args == {"x-max-length": 10, "x-queue-type": "quorum"}
    assert o.queue_names() == ["p-1", "p-2", "p-3"]


def test_processes_capped_by_roles() -> None:
    o = parse_options(["-y", "2", "--consumer-processes", "4", "--producer-processes", "3"])
    assert (o.producer_processes, o.consumer_processes) == (1, 2)


@pytest.mark.parametrize(
    "argv",
    [
        ["-c", "10", "--tx-size", "1"],
        ["-a", "-A", "10"],
        ["-q", "10", "-A", "20"],
        ["-x", "0", "-y", "0"],
        ["-e", "", "-t", "fanout"],
        ["--queues", "0"],
        ["-s", "-1"],
        ["--queue-arg", "novalue"],
    ],
)
def test_invalid_combinations_exit(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse_options(argv)


def test_help_explains_every_option() -> None:
    parser = build_parser()
    for action in parser._actions:  # the help text is what we check
        assert action.help, action.option_strings
    text = parser.format_help()
    for flag in (
        "--producers",
        "--confirm",
        "--tx-size",
        "--prefetch",
        "--multi-ack-every",
        "--rate",
        "--duration",
        "--exchange-type",
        "--idle-connections",
    ):
        assert flag in text


def test_routes_by_exchange_type() -> None:
    direct = route_for(parse_options([]), "q-1")
    assert (direct.binding_key, direct.routing_key) == ("q-1", "q-1")
    topic = route_for(parse_options(["-t", "topic"]), "q-1")
    assert (topic.binding_key, topic.routing_key) == ("q-1.#", "q-1.perf")
    fanout = route_for(parse_options(["-t", "fanout"]), "q-1")
    assert (fanout.binding_key, fanout.routing_key) == ("", "")
    headers = route_for(parse_options(["-t", "headers"]), "q-1")
    assert headers.headers == {"perf-queue": "q-1"}
    assert headers.binding_args == {"x-match": "all", "perf-queue": "q-1"}
    default = route_for(parse_options(["-e", ""]), "q-1")
    assert (default.binding_key, default.routing_key) == ("", "q-1")
    fixed = route_for(parse_options(["-k", "key"]), "q-1")
    assert (fixed.binding_key, fixed.routing_key) == ("key", "key")


def test_producers_and_consumers_spread_over_queues() -> None:
    o = parse_options(["--queues", "2", "-x", "3", "-y", "3"])
    assert [producer_route(o, i).queue for i in range(3)] == ["perf-q-1", "perf-q-2", "perf-q-1"]
    assert [consumer_queue(o, i) for i in range(3)] == ["perf-q-1", "perf-q-2", "perf-q-1"]


def test_split_and_plans() -> None:
    assert split(5, 2) == [(0, 2, 4), (1, 3)]
    assert split(1, 4) == [(0,)]
    assert split(0, 2) == []
    p = plans(parse_options(["-x", "2", "-y", "10", "--consumer-processes", "2"]))
    assert [(w.worker, w.role, len(w.indices)) for w in p] == [
        (0, "producer", 2),
        (1, "consumer", 5),
        (2, "consumer", 5),
    ]


def test_summary_rates_and_json() -> None:
    o = parse_options(["-y", "2", "--consumer-processes", "2", "-c", "100"])
    prod = ProducerStats(published=1000, confirmed=900, sent_total=1000)
    prod.confirm_latency.record(2000, 900)
    cons = [ConsumerStats(consumed=400), ConsumerStats(consumed=500)]
    cons[0].latency.record(1000, 400)
    cons[1].latency.record(3000, 500)
    results = [
        WorkerResult(0, "producer", 1, cpu_s=0.5, wall_s=10.0, producers=prod),
        WorkerResult(1, "consumer", 1, cpu_s=9.5, wall_s=9.0, consumers=cons[0]),
        WorkerResult(2, "consumer", 1, cpu_s=1.0, wall_s=10.0, consumers=cons[1]),
    ]
    summary = summarise(RunOutcome(o, results))
    assert summary.published_rate == 100.0
    assert summary.confirmed_rate == 90.0
    assert summary.consumed_rate == 90.0
    assert summary.messages == 900
    data = as_json(summary)
    assert data["consumed"] == 900
    assert data["deliver_latency_us"]["count"] == 900
    assert "broker" not in data
    text = format_text(summary)
    assert "received:" in text and "publish->confirm" in text
    assert "may bound this run" in text  # worker 1 used more than 90 % of a core
