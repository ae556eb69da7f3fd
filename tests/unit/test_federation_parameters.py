"""Federation configuration: the federation-upstream(-set) parameters and policy keys, with
RabbitMQ 3.10.8's texts (each expected text below was printed by ``rabbitmqctl
set_parameter`` / ``set_policy`` on a RabbitMQ 3.10.8 node with rabbitmq_federation), and
the resolution of a policy into upstreams."""

from __future__ import annotations

import json
from typing import Any

import pytest

from amqpd.model.broker import Broker
from amqpd.model.definitions import export_definitions, import_definitions, topology
from amqpd.model.federation import Upstream, resolve, validate_upstream, validate_upstream_set
from amqpd.model.parameters import ParameterError, list_parameters, set_parameter
from amqpd.model.policies import PolicyError, validate
from amqpd.shell.links.federation_status import (
    FEDERATION_COLUMNS,
    FederationLinkStatus,
    federation_table,
    status_json,
)

RABBIT_UPSTREAM_TEXTS: list[tuple[Any, list[str]]] = [
    (
        {
            "uri": "amqp://h",
            "bogus": 1,
            "prefetch-count": "x",
            "max-hops": "a",
            "ack-mode": "x",
            "trust-user-id": 1,
        },
        [
            'Unrecognised terms [{<<"bogus">>,1}] in up',
            'ack-mode should be one of [<<"no-ack">>,<<"on-publish">>,<<"on-confirm">>], '
            'actually was <<"x">>',
            "trust-user-id should be boolean, actually was 1",
            'max-hops should be a number, actually was <<"a">>',
            'prefetch-count should be a number, actually was <<"x">>',
        ],
    ),
    ({"prefetch-count": 1}, ['Key "uri" not found in up']),
    (
        {"uri": "http://x"},
        ['"http://x" not a valid URI: {{unexpected_uri_scheme,"http"},"http://x"}'],
    ),
    ({"uri": ["amqp://a", 3]}, ["uri should be list, actually was 3"]),
    ({"uri": "x"}, ['"x" not a valid URI: {{unable_to_parse_uri,no_scheme},"x"}']),
    ({"uri": "://h"}, ['"://h" not a valid URI: {{unexpected_uri_scheme,[]},"://h"}']),
    ({"uri": []}, []),
    ([1], ["Unrecognised terms [1] in up", 'Key "uri" not found in up']),
    (
        {
            "uri": "amqp://h",
            "resource-cleanup-mode": "x",
            "bind-nowait": "y",
            "consumer-tag": 1,
            "channel-use-mode": "x",
            "ha-policy": 1,
            "expires": "1",
            "message-ttl": None,
            "exchange": 1,
            "queue": 2,
            "reconnect-delay": "z",
        },
        [
            'channel-use-mode should be one of [<<"multiple">>,<<"single">>], actually was <<"x">>',
            'bind-nowait should be boolean, actually was <<"y">>',
            "ha-policy should be binary, actually was 1",
            'resource-cleanup-mode should be one of [<<"default">>,<<"never">>], '
            'actually was <<"x">>',
            "message-ttl should be a number, actually was null",
            'expires should be a number, actually was <<"1">>',
            'reconnect-delay should be a number, actually was <<"z">>',
            "consumer-tag should be binary, actually was 1",
            "queue should be binary, actually was 2",
            "exchange should be binary, actually was 1",
        ],
    ),
]


@pytest.mark.parametrize(("value", "expected"), RABBIT_UPSTREAM_TEXTS)
def test_upstream_texts_are_rabbitmqs(value: Any, expected: list[str]) -> None:
    assert validate_upstream("up", value) == expected


def test_queue_type_is_checked() -> None:
    """queue-type (RabbitMQ 3.13's key) is accepted with its two values."""
    assert validate_upstream("up", {"uri": "amqp://", "queue-type": "quorum"}) == []
    assert validate_upstream("up", {"uri": "amqp://", "queue-type": "x"}) == [
        'queue-type should be one of [<<"classic">>,<<"quorum">>], actually was <<"x">>'
    ]


def test_upstream_set_texts_are_rabbitmqs() -> None:
    value = [{"upstream": "a"}, {"prefetch-count": "x"}, {"upstream": 1, "uri": "amqp://"}]
    assert validate_upstream_set("s1", value) == [
        'prefetch-count should be a number, actually was <<"x">>',
        'Key "upstream" not found in s1',
        'Unrecognised terms [{<<"uri">>,<<"amqp://">>}] in s1',
        "upstream should be binary, actually was 1",
    ]
    assert validate_upstream_set("s6", [{"upstream": "a", "bogus": 1}]) == [
        'Unrecognised terms [{<<"bogus">>,1}] in s6'
    ]
    assert validate_upstream_set("s3", []) == []
    # RabbitMQ crashes on these (function_clause); amqpd refuses them with a text
    assert validate_upstream_set("s", {"upstream": "a"}) == [
        's not a list [{<<"upstream">>,<<"a">>}]'
    ]
    assert validate_upstream_set("s", [1]) == ["s not a list 1"]


def test_parameters_are_set_listed_and_refused_with_the_full_text() -> None:
    broker = Broker()
    assert set_parameter(broker, "federation-upstream", "/", "up", {"uri": "amqp://h"}) is True
    assert set_parameter(broker, "federation-upstream-set", "/", "s", [{"upstream": "up"}])
    names = [(p["component"], p["name"]) for p in list_parameters(broker, vhost="/")]
    assert names == [("federation-upstream", "up"), ("federation-upstream-set", "s")]
    with pytest.raises(ParameterError) as refused:
        set_parameter(broker, "federation-upstream", "/", "up2", {"prefetch-count": 1})
    assert str(refused.value) == 'Validation failed\n\nKey "uri" not found in up2\n'
    assert ("federation-upstream", "/", "up2") not in broker.access.state.parameters


@pytest.mark.parametrize(
    ("definition", "text"),
    [
        ({"federation-upstream-set": 1}, "1 is not a valid federation upstream set name"),
        ({"federation-upstream": 1}, "1 is not a valid federation upstream name"),
        (
            {"federation-upstream": "a", "federation-upstream-set": "b"},
            "cannot specify federation-upstream, federation-upstream-set or "
            "federation-upstream-pattern together",
        ),
        ({"federation-upstream": "a", "max-length": -1}, "-1 is not a valid maximum length"),
    ],
)
def test_policy_keys_texts_are_rabbitmqs(definition: dict[str, Any], text: str) -> None:
    with pytest.raises(PolicyError) as refused:
        validate("/", "p", "^x", definition)
    assert str(refused.value) == f"Validation failed\n\n{text}\n"


def test_policy_keys_are_accepted() -> None:
    for key in ("federation-upstream-set", "federation-upstream", "federation-upstream-pattern"):
        record = validate("/", "p", "^x", {key: "all", "max-length": 3}, apply_to="exchanges")
        assert record.definition[key] == "all"
    with pytest.raises(PolicyError, match="federation-upstream"):
        validate("/", "p", "^x", {"federation-upstream-set": "x"}, operator=True)


PARAMETERS = {
    ("federation-upstream", "/", "b"): {
        "uri": ["amqp://u:p@b1", "amqp://b2"],
        "prefetch-count": 10,
        "max-hops": 2,
        "expires": 60000,
        "message-ttl": 1000,
        "exchange": "up-x",
        "ack-mode": "on-publish",
    },
    ("federation-upstream", "/", "a"): {"uri": "amqp://a", "trust-user-id": True},
    ("federation-upstream", "other", "c"): {"uri": "amqp://c"},
    ("federation-upstream-set", "/", "set"): [
        {"upstream": "b", "prefetch-count": 5, "queue": "q-up"},
        {"upstream": "missing"},
        {"upstream": "a"},
    ],
}


def test_resolve_all_set_upstream_and_pattern() -> None:
    everything = resolve(PARAMETERS, "/", {"federation-upstream-set": "all"})
    assert [u.name for u in everything] == ["a", "b"]  # by name; vhost "other" left out
    b = everything[1]
    assert b == Upstream(
        vhost="/",
        name="b",
        uris=("amqp://u:p@b1", "amqp://b2"),
        prefetch_count=10,
        max_hops=2,
        expires=60000,
        message_ttl=1000,
        exchange="up-x",
        ack_mode="on-publish",
    )
    assert b.upstream_exchange("down") == "up-x" and b.upstream_queue("down") == "down"
    a = everything[0]
    assert (a.trust_user_id, a.prefetch_count, a.reconnect_delay, a.max_hops) == (True, 1000, 5, 1)
    assert a.ack_mode == "on-confirm" and a.upstream_exchange("down") == "down"

    in_set = resolve(PARAMETERS, "/", {"federation-upstream-set": "set", "max-length": 1})
    assert [u.name for u in in_set] == ["b", "a"]  # set order; "missing" skipped
    assert in_set[0].prefetch_count == 5 and in_set[0].queue == "q-up"  # the set's keys win

    assert [u.name for u in resolve(PARAMETERS, "/", {"federation-upstream": "a"})] == ["a"]
    assert resolve(PARAMETERS, "/", {"federation-upstream": "c"}) == []  # other vhost's
    assert [u.name for u in resolve(PARAMETERS, "/", {"federation-upstream-pattern": "^b"})] == [
        "b"
    ]
    assert resolve(PARAMETERS, "/", {"federation-upstream-set": "nope"}) == []
    assert resolve(PARAMETERS, "/", {"max-length": 1}) == []
    assert resolve(PARAMETERS, "/", None) == []


def test_definitions_import_and_export_federation_parameters() -> None:
    document = {
        "parameters": [
            {
                "vhost": "/",
                "component": "federation-upstream",
                "name": "up",
                "value": {"uri": "amqp://h", "max-hops": 2},
            },
            {
                "vhost": "/",
                "component": "federation-upstream-set",
                "name": "s",
                "value": [{"upstream": "up"}],
            },
            {"vhost": "/", "component": "federation-upstream", "name": "bad", "value": {}},
        ],
        "policies": [
            {
                "vhost": "/",
                "name": "fed",
                "pattern": "^fed",
                "apply-to": "exchanges",
                "definition": {"federation-upstream-set": "s"},
            }
        ],
    }
    broker = Broker()
    problems: list[str] = []
    import_definitions(broker, document, problems)
    assert len(problems) == 1 and 'Key "uri" not found in bad' in problems[0]
    exported = json.loads(json.dumps(export_definitions(broker.access.state, *topology(broker))))
    components = sorted((p["component"], p["name"]) for p in exported["parameters"])
    assert components == [("federation-upstream", "up"), ("federation-upstream-set", "s")]
    assert exported["policies"][0]["definition"] == {"federation-upstream-set": "s"}


def test_status_json_and_table() -> None:
    link = FederationLinkStatus("exchange", "/", "fed", "up", "src", uri="amqp://u:p@h:1/v")
    running = status_json(link, "node@h")
    assert running["status"] == "starting" and running["uri"] == "amqp://h:1/v"
    assert (running["exchange"], running["upstream_exchange"]) == ("fed", "src")
    assert "error" not in running and "queue" not in running
    link.set("error", "econnrefused")
    failed = status_json(link, "node@h")
    assert failed["error"] == "econnrefused" and len(failed["id"]) == 8
    queue_link = FederationLinkStatus("queue", "/", "q", "up", "q-up")
    queue_link.set("running", uri="amqp://h")
    queue_link.local_connection = "federation link q"
    table = federation_table([queue_link, link], "node@h")
    assert table["banner"] == "Listing federation links on node node@h..."
    assert table["columns"] == FEDERATION_COLUMNS
    rows = [dict(zip(FEDERATION_COLUMNS, row, strict=True)) for row in table["rows"]]
    assert [r["type"] for r in rows] == ["exchange", "queue"]
    assert rows[0]["error"] == "econnrefused" and rows[0]["upstream_exchange"] == "src"
    assert rows[1]["queue"] == "q" and rows[1]["upstream_queue"] == "q-up"
    assert rows[1]["local_connection"] == "federation link q" and rows[1]["exchange"] == ""
