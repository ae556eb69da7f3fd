"""Merging the workers' Prometheus expositions (amqpd/shell/workers/metrics_merge.py)."""

from __future__ import annotations

from urllib.parse import quote

from prometheus_client.parser import text_string_to_metric_families

from amqpd.model.broker import Broker
from amqpd.shell.metrics import RabbitCollector, render
from amqpd.shell.workers.metrics_merge import combiner, merge_expositions
from tests.unit.management_support import Api, FakeHost

WORKER_0 = """\
# HELP rabbitmq_queues Queues available
# TYPE rabbitmq_queues gauge
rabbitmq_queues 2.0
# HELP rabbitmq_global_messages_received_total Total number of messages received
# TYPE rabbitmq_global_messages_received_total counter
rabbitmq_global_messages_received_total{protocol="amqp091"} 10.0
# HELP rabbitmq_queue_messages Sum of ready and unacknowledged messages
# TYPE rabbitmq_queue_messages gauge
rabbitmq_queue_messages{vhost="/",queue="a } \\"quoted\\" name 9"} 4.0
# HELP rabbitmq_build_info RabbitMQ & Erlang/OTP version info
# TYPE rabbitmq_build_info untyped
rabbitmq_build_info{product_version="1",python_version="3.11.2"} 1.0
# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.
# TYPE process_start_time_seconds gauge
process_start_time_seconds 100.0
# HELP rabbitmq_erlang_uptime_seconds Node uptime
# TYPE rabbitmq_erlang_uptime_seconds gauge
rabbitmq_erlang_uptime_seconds 50.0
# HELP rabbitmq_alarms_memory_used_watermark is 1 if VM memory watermark alarm is in effect
# TYPE rabbitmq_alarms_memory_used_watermark untyped
rabbitmq_alarms_memory_used_watermark 0.0
# HELP rabbitmq_disk_space_available_bytes Disk space available in bytes
# TYPE rabbitmq_disk_space_available_bytes gauge
rabbitmq_disk_space_available_bytes 5000.0
# HELP rabbitmq_resident_memory_limit_bytes Memory high watermark in bytes
# TYPE rabbitmq_resident_memory_limit_bytes gauge
rabbitmq_resident_memory_limit_bytes 800.0
# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 300.0
"""

WORKER_1 = """\
# HELP rabbitmq_queues Queues available
# TYPE rabbitmq_queues gauge
rabbitmq_queues 3.0
# HELP rabbitmq_global_messages_received_total Total number of messages received
# TYPE rabbitmq_global_messages_received_total counter
rabbitmq_global_messages_received_total{protocol="amqp091"} 5.0
# HELP rabbitmq_queue_messages Sum of ready and unacknowledged messages
# TYPE rabbitmq_queue_messages gauge
rabbitmq_queue_messages{vhost="v1",queue="b"} 7.0
# HELP rabbitmq_build_info RabbitMQ & Erlang/OTP version info
# TYPE rabbitmq_build_info untyped
rabbitmq_build_info{product_version="1",python_version="3.11.9"} 1.0
# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.
# TYPE process_start_time_seconds gauge
process_start_time_seconds 90.0
# HELP rabbitmq_erlang_uptime_seconds Node uptime
# TYPE rabbitmq_erlang_uptime_seconds gauge
rabbitmq_erlang_uptime_seconds 60.0
# HELP rabbitmq_alarms_memory_used_watermark is 1 if VM memory watermark alarm is in effect
# TYPE rabbitmq_alarms_memory_used_watermark untyped
rabbitmq_alarms_memory_used_watermark 1.0
# HELP rabbitmq_disk_space_available_bytes Disk space available in bytes
# TYPE rabbitmq_disk_space_available_bytes gauge
rabbitmq_disk_space_available_bytes 4000.0
# HELP rabbitmq_resident_memory_limit_bytes Memory high watermark in bytes
# TYPE rabbitmq_resident_memory_limit_bytes gauge
rabbitmq_resident_memory_limit_bytes 900.0
# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 200.0
# HELP rabbitmq_only_here A family worker 0 does not have
# TYPE rabbitmq_only_here gauge
rabbitmq_only_here 1.0
"""


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_families_once_with_samples_combined() -> None:
    text = merge_expositions([WORKER_0, WORKER_1]).decode()
    helps = [line for line in text.splitlines() if line.startswith("# HELP ")]
    types = [line for line in text.splitlines() if line.startswith("# TYPE ")]
    assert len(helps) == len(set(helps)) == len(types) == 11
    samples = _samples(text)
    assert samples[("rabbitmq_queues", ())] == 5
    assert samples[("rabbitmq_global_messages_received_total", (("protocol", "amqp091"),))] == 15
    quoted = (("queue", 'a } "quoted" name 9'), ("vhost", "/"))
    assert samples[("rabbitmq_queue_messages", quoted)] == 4  # per object: kept as it is
    assert samples[("rabbitmq_queue_messages", (("queue", "b"), ("vhost", "v1")))] == 7
    builds = [name for name in samples if name[0] == "rabbitmq_build_info"]
    assert builds == [
        ("rabbitmq_build_info", (("product_version", "1"), ("python_version", "3.11.2")))
    ]
    assert samples[("process_start_time_seconds", ())] == 90
    assert samples[("rabbitmq_erlang_uptime_seconds", ())] == 60
    assert samples[("rabbitmq_alarms_memory_used_watermark", ())] == 1
    assert samples[("rabbitmq_disk_space_available_bytes", ())] == 4000
    assert samples[("rabbitmq_resident_memory_limit_bytes", ())] == 800
    assert samples[("process_resident_memory_bytes", ())] == 500
    assert samples[("rabbitmq_only_here", ())] == 1
    # worker 0's order first
    assert types[0] == "# TYPE rabbitmq_queues gauge"
    assert types[-1] == "# TYPE rabbitmq_only_here gauge"


def test_one_text_round_trips_byte_for_byte() -> None:
    broker = Broker()
    host = FakeHost(broker)
    for mode in ("aggregated", "per-object"):
        text = render([RabbitCollector(host, mode)])  # type: ignore[arg-type]
        assert merge_expositions([text.decode()]) == text


def _type_lines(text: str) -> list[str]:
    return [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]


def test_the_apps_own_expositions_merge_without_repeating_a_family() -> None:
    texts = []
    for queues in (1, 2, 3):
        api = Api()
        for number in range(queues):
            assert api.put(f"/api/queues/%2F/q{number}").status_code == 201
        texts.append(render([RabbitCollector(api.host)]).decode())  # type: ignore[arg-type]
    merged = merge_expositions(texts).decode()
    assert _type_lines(merged) == _type_lines(texts[0])
    assert _samples(merged)[("rabbitmq_queues", ())] == 6
    assert len([s for s in _samples(merged) if s[0] == "rabbitmq_identity_info"]) == 1


def test_the_apps_per_object_scrapes_merge_as_the_parser_reads_them() -> None:
    """The line-based merge against one made of prometheus_client's parsed samples."""
    odd = 'odd } "name"\\ 1'  # a brace, quotes, a backslash and a number in a label value
    texts = []
    for vhost, queue in (("/", odd), ("v1", "plain")):
        api = Api()
        api.put("/api/vhosts/v1")
        path = "/api/queues/" + "/".join(quote(part, safe="") for part in (vhost, queue))
        assert api.put(path).status_code == 201
        api.put(path.replace("/api/queues/", "/api/exchanges/"), json={"type": "topic"})
        texts.append(render([RabbitCollector(api.host, "per-object")]).decode())  # type: ignore[arg-type]
    expected: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for index, text in enumerate(texts):
        for key, value in _samples(text).items():
            if key not in expected:
                expected[key] = value
            elif not key[0].endswith("_info") or index == 0:
                expected[key] = combiner(key[0])(expected[key], value)
    merged = _samples(merge_expositions(texts).decode())
    assert merged == expected
    assert merged[("rabbitmq_queue_messages_ready", (("queue", odd), ("vhost", "/")))] == 0
    assert merged[("rabbitmq_queue_messages_ready", (("queue", "plain"), ("vhost", "v1")))] == 0


def test_cluster_wide_samples_are_worker_0s_and_per_exchange_counters_summed() -> None:
    # a spread vhost's exchange is on every worker (docs/multicore.md "Stage 2")
    exchange = 'vhost="s",exchange="x",type="fanout"'
    texts = [
        "# HELP rabbitmq_cluster_exchange_name Enumerates exchanges\n"
        "# TYPE rabbitmq_cluster_exchange_name gauge\n"
        f"rabbitmq_cluster_exchange_name{{{exchange}}} 1.0\n"
        "# HELP rabbitmq_cluster_exchange_bindings Number of bindings for an exchange\n"
        "# TYPE rabbitmq_cluster_exchange_bindings gauge\n"
        f"rabbitmq_cluster_exchange_bindings{{{exchange}}} {bindings}\n"
        "# HELP rabbitmq_cluster_vhost_status Whether a given vhost is running\n"
        "# TYPE rabbitmq_cluster_vhost_status gauge\n"
        'rabbitmq_cluster_vhost_status{vhost="s"} 1.0\n'
        "# HELP rabbitmq_detailed_queue_messages_published_total Messages published to queues\n"
        "# TYPE rabbitmq_detailed_queue_messages_published_total counter\n"
        'rabbitmq_detailed_queue_messages_published_total{exchange_vhost="s",exchange="x"} '
        f"{routed}\n"
        for bindings, routed in (("3.0", "2.0"), ("4.0", "5.0"))
    ]
    samples = _samples(merge_expositions(texts).decode())
    labels = (("exchange", "x"), ("type", "fanout"), ("vhost", "s"))
    assert samples[("rabbitmq_cluster_exchange_name", labels)] == 1
    assert samples[("rabbitmq_cluster_exchange_bindings", labels)] == 3
    assert samples[("rabbitmq_cluster_vhost_status", (("vhost", "s"),))] == 1
    routed = (("exchange", "x"), ("exchange_vhost", "s"))
    assert samples[("rabbitmq_detailed_queue_messages_published_total", routed)] == 7
