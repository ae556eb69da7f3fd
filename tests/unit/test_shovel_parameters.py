"""Shovel runtime parameters: RabbitMQ 3.10's validation texts, parsing, the parameter
commands, definitions and the stored rows (amqpd/model/shovels.py, parameters.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from amqpd.model.admin_commands import AdminError, execute
from amqpd.model.auth import INTERNAL_USER, hash_password
from amqpd.model.broker import Broker
from amqpd.model.definitions import export_definitions, import_definitions, topology
from amqpd.model.parameters import (
    ParameterError,
    ParameterNotFound,
    clear_parameter,
    get_parameter,
    list_parameters,
    set_parameter,
)
from amqpd.model.shovels import parse, redact_uri, validate
from persistence.access import rows_to_state, state_to_statements

GOOD: dict[str, Any] = {
    "src-uri": "amqp://",
    "src-queue": "in",
    "dest-uri": "amqp://user:secret@remote:5673/%2Fprod",
    "dest-queue": "out",
}


def test_a_minimal_definition_is_valid_and_gets_rabbitmqs_defaults() -> None:
    assert validate("s", GOOD) == []
    spec = parse("/", "s", GOOD)
    assert spec.src_uris == ("amqp://",) and spec.dest_queue == "out"
    assert spec.ack_mode == "on-confirm"
    assert spec.prefetch_count == 1000
    assert spec.delete_after == "never"
    assert spec.reconnect_delay == 1.0
    assert not spec.add_forward_headers


def test_source_must_be_a_queue_or_an_exchange() -> None:
    value = {"src-uri": "amqp://", "dest-uri": "amqp://"}
    assert validate("s", value) == ["Must specify 'src-exchange' or 'src-queue'"]
    both = {**GOOD, "src-exchange": "x"}
    assert validate("s", both) == ["Cannot specify 'src-exchange' and 'src-queue'"]
    dest_both = {**GOOD, "dest-exchange": "x"}
    assert validate("s", dest_both) == ["Cannot specify 'dest-exchange' and 'dest-queue'"]


def test_missing_uris_and_unknown_keys_use_rabbitmqs_wording() -> None:
    errors = validate("s", {"src-queue": "q", "bogus": 1})
    assert errors == [
        'Unrecognised terms [{<<"bogus">>,1}] in s',
        'Key "dest-uri" not found in s',
        'Key "src-uri" not found in s',
    ]


@pytest.mark.parametrize(
    ("extra", "text"),
    [
        (
            {"ack-mode": "sometimes"},
            'ack-mode should be one of [<<"no-ack">>,<<"on-publish">>,<<"on-confirm">>], '
            'actually was <<"sometimes">>',
        ),
        (
            {"reconnect-delay": "soon"},
            'reconnect-delay should be a number, actually was <<"soon">>',
        ),
        ({"add-forward-headers": 1}, "add-forward-headers should be boolean, actually was 1"),
        (
            {"src-prefetch-count": "x"},
            'src-prefetch-count should be a number, actually was <<"x">>',
        ),
        (
            {"src-delete-after": "later"},
            'src-delete-after should be number, "never" or "queue-length", actually was '
            '<<"later">>',
        ),
        (
            {"src-uri": "http://h"},
            '"http://h" not a valid URI: {{unexpected_uri_scheme,"http"},"http://h"}',
        ),
        ({"dest-queue": 5}, "dest-queue should be a string, actually was 5"),
        (
            {"src-protocol": "amqp1"},
            'src-protocol should be one of [<<"amqp10">>,<<"amqp091">>], actually was <<"amqp1">>',
        ),
    ],
)
def test_field_checks(extra: dict[str, Any], text: str) -> None:
    assert validate("s", {**GOOD, **extra}) == [text]


def test_no_ack_with_a_numeric_delete_after_is_refused() -> None:
    value = {**GOOD, "ack-mode": "no-ack", "src-delete-after": 5}
    assert validate("s", value) == ["Cannot specify 'no-ack' and numerical 'delete-after'"]


def test_amqp10_is_refused_with_a_clear_text() -> None:
    errors = validate("s", {**GOOD, "src-protocol": "amqp10"})
    assert errors == ["src-protocol amqp10 is not supported by amqpd (amqp091 only)"]


def test_a_list_of_uris_and_legacy_names() -> None:
    value = {
        "src-uri": ["amqp://a", "amqp://b"],
        "src-exchange": "x",
        "src-exchange-key": "k",
        "dest-uri": "amqp://",
        "prefetch-count": 10,
        "delete-after": "queue-length",
        "add-forward-headers": True,
    }
    assert validate("s", value) == []
    spec = parse("v", "s", value)
    assert spec.src_uris == ("amqp://a", "amqp://b")
    assert (spec.src_exchange, spec.src_exchange_key) == ("x", "k")
    assert spec.prefetch_count == 10 and spec.delete_after == "queue-length"
    assert spec.add_forward_headers


def test_redacted_uris_lose_their_credentials() -> None:
    assert redact_uri("amqp://user:secret@h:5673/%2F") == "amqp://h:5673/%2F"
    assert redact_uri("amqp://") == "amqp://"


def test_set_get_list_clear() -> None:
    broker = Broker()
    assert set_parameter(broker, "shovel", "/", "s", GOOD) is True
    assert set_parameter(broker, "shovel", "/", "s", GOOD) is False
    assert get_parameter(broker, "shovel", "/", "s") == {
        "value": GOOD,
        "vhost": "/",
        "component": "shovel",
        "name": "s",
    }
    assert [item["name"] for item in list_parameters(broker, "shovel", "/")] == ["s"]
    assert list_parameters(broker, "federation-upstream") == []
    clear_parameter(broker, "shovel", "/", "s")
    with pytest.raises(ParameterNotFound, match="Parameter does not exist"):
        clear_parameter(broker, "shovel", "/", "s")


def test_refusals_change_nothing() -> None:
    broker = Broker()
    with pytest.raises(ParameterError) as refused:
        set_parameter(broker, "shovel", "/", "s", {"src-uri": "amqp://"})
    assert str(refused.value).startswith("Validation failed\n\n")
    assert str(refused.value).endswith("\n")
    with pytest.raises(ParameterError, match="component mqtt-mapping not found"):
        set_parameter(broker, "mqtt-mapping", "/", "u", {"uri": "amqp://"})
    with pytest.raises(ParameterNotFound):
        set_parameter(broker, "shovel", "nowhere", "s", GOOD)
    assert broker.access.state.parameters == {}


def test_ctl_commands_print_like_rabbitmqctl() -> None:
    broker = Broker()
    request = {
        "group": "parameters",
        "command": "set-parameter",
        "component": "shovel",
        "vhost": "/",
        "name": "s",
        "value": json.dumps(GOOD),
    }
    outcome = execute(broker, request)
    assert outcome.changed
    assert outcome.output.startswith('Setting runtime parameter "s" for component "shovel" to')
    listing = execute(broker, {"group": "parameters", "command": "list-parameters", "vhost": "/"})
    lines = listing.output.split("\n")
    assert lines[:2] == ['Listing runtime parameters for vhost "/" ...', "component\tname\tvalue"]
    assert lines[2].startswith("shovel\ts\t{")
    with pytest.raises(AdminError, match="not valid JSON"):
        execute(broker, {**request, "value": "{"})
    with pytest.raises(AdminError, match="Must specify"):
        execute(broker, {**request, "value": json.dumps({"src-uri": "amqp://"})})
    clear = {key: value for key, value in request.items() if key != "value"}
    execute(broker, {**clear, "command": "clear-parameter"})
    with pytest.raises(AdminError, match="Parameter does not exist"):
        execute(broker, {**clear, "command": "clear-parameter"})


def test_deleting_a_vhost_deletes_its_shovels() -> None:
    broker = Broker()
    execute(broker, {"group": "vhosts", "command": "add", "name": "v"})
    set_parameter(broker, "shovel", "v", "s", GOOD)
    set_parameter(broker, "shovel", "/", "s", GOOD)
    execute(broker, {"group": "vhosts", "command": "delete", "name": "v"})
    assert list(broker.access.state.parameters) == [("shovel", "/", "s")]


def test_definitions_round_trip_and_refusals() -> None:
    broker = Broker()
    set_parameter(broker, "shovel", "/", "s", GOOD)
    document = export_definitions(broker.access.state, *topology(broker))
    assert {"value": GOOD, "vhost": "/", "component": "shovel", "name": "s"} in document[
        "parameters"
    ]
    again = Broker()
    document["parameters"].append(
        {"vhost": "/", "component": "shovel", "name": "bad", "value": {"src-uri": "amqp://"}}
    )
    problems: list[str] = []
    counts = import_definitions(again, document, problems)
    assert counts["parameters"] == 1
    assert again.access.state.parameters == {("shovel", "/", "s"): GOOD}
    assert len(problems) == 1 and "parameter 'bad'" in problems[0]


def test_stored_rows_round_trip() -> None:
    broker = Broker()
    set_parameter(broker, "shovel", "/", "s", GOOD)
    statements = dict(state_to_statements(broker.access.state))
    [insert] = [sql for sql in statements if sql.startswith("INSERT INTO parameters")]
    rows = statements[insert]
    state = rows_to_state(
        {
            "users": [],
            "vhosts": [],
            "permissions": [],
            "policies": [],
            "global_parameters": [],
            "parameters": rows,
        }
    )
    assert state.parameters == {("shovel", "/", "s"): GOOD}


def test_the_internal_user_logs_in_only_with_the_shells_secret() -> None:
    broker = Broker()
    access = broker.access
    assert access.authenticate(INTERNAL_USER, "") is None  # no secret set: nobody
    assert not access.is_user(INTERNAL_USER)
    access.internal_secret = "s3cret"
    assert access.authenticate(INTERNAL_USER, "wrong") is None
    user = access.authenticate(INTERNAL_USER, "s3cret")
    assert user is not None and user.name == INTERNAL_USER and user.tags == ()
    assert access.is_user(INTERNAL_USER)
    authz = access.authz(INTERNAL_USER, "/")
    assert authz is not None and authz.full
    assert access.authz(INTERNAL_USER, "nowhere") is None
    # a stored user of that name cannot log in with its password
    execute(
        broker,
        {
            "group": "users",
            "command": "add",
            "name": INTERNAL_USER,
            "password_hash": hash_password("pw"),
        },
    )
    assert access.authenticate(INTERNAL_USER, "pw") is None


def test_publish_properties_are_checked_like_rabbitmqs() -> None:
    good = {**GOOD, "dest-publish-properties": {"delivery_mode": 2, "app_id": "shovel"}}
    assert validate("s", good) == []
    assert parse("/", "s", good).publish_properties == {"delivery_mode": 2, "app_id": "shovel"}
    bad_key = {**GOOD, "publish-properties": {"colour": "red"}}
    assert validate("s", bad_key) == [
        'Unrecognised terms [{<<"colour">>,<<"red">>}] in publish-properties'
    ]
    bad_type = {**GOOD, "publish-properties": {"priority": "high"}}
    assert validate("s", bad_type) == ['priority should be a number, actually was <<"high">>']
