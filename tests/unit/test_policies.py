"""Policies and operator policies (amqpd/model/policies.py, policy_admin.py): validation
with RabbitMQ's texts, matching, precedence, live application, statistics, definitions."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pamqp import commands

from amqpd.engine import inventory
from amqpd.model.admin_commands import AdminError, execute
from amqpd.model.broker import Broker
from amqpd.model.definitions import export_definitions, import_definitions, topology
from amqpd.model.policies import (
    PolicyError,
    PolicyRecord,
    effective_queue_settings,
    merge,
    select,
    validate,
)
from amqpd.model.policy_admin import (
    PolicyNotFound,
    clear_policy,
    get_policy,
    list_policies,
    set_policy,
)
from amqpd.model.queue_args import parse_queue_arguments
from tests.unit.engine_driver import Client


def client_of(broker: Broker) -> Client:
    client = Client(broker)
    client.handshake()
    client.open_channel(1)
    return client


def declare(client: Client, name: str, **arguments: Any) -> None:
    client.send(1, commands.Queue.Declare(queue=name, arguments=arguments or None))
    assert isinstance(client.methods()[-1], commands.Queue.DeclareOk)


def depth(broker: Broker, name: str) -> int:
    return len(broker.vhosts["/"].queues[name].ready)


def publish(client: Client, queue: str, count: int) -> None:
    for i in range(count):
        client.publish(1, queue, f"m{i}".encode())


# -- validation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("definition", "text"),
    [
        ({"max-length": -1}, "-1 is not a valid maximum length"),
        ({"max-length": "10"}, '<<"10">> is not a valid maximum length'),
        ({"max-length-bytes": 1.5}, "1.5 is not a valid maximum length in bytes"),
        ({"message-ttl": -5}, "-5 is not a valid message TTL"),
        ({"expires": 0}, "0 is not a valid queue expiry"),
        ({"overflow": "drop-tail"}, '<<"drop-tail">> is not a valid overflow value'),
        ({"queue-mode": "eager"}, '<<"eager">> is not a valid queue-mode value'),
        ({"delivery-limit": True}, "true is not a valid delivery limit"),
        ({"dead-letter-exchange": 5}, "5 is not a valid dead letter exchange name"),
        ({"alternate-exchange": None}, "null is not a valid alternate exchange name"),
        ({"foo": "bar"}, '[{<<"foo">>,<<"bar">>}] are not recognised policy settings'),
        # classic mirroring: checked with RabbitMQ 3.10.8's texts (then ignored)
        ({"ha-mode": "bogus"}, '<<"bogus">> is not a valid ha-mode value'),
        ({"ha-mode": "exactly"}, 'ha-mode="exactly" takes an integer, none given'),
        (
            {"ha-mode": "exactly", "ha-params": "a"},
            'ha-mode="exactly" takes an integer, <<"a">> given',
        ),
        ({"ha-mode": "all", "ha-params": "a"}, 'ha-mode="all" does not take parameters'),
        ({"ha-mode": "nodes", "ha-params": "a"}, 'ha-mode="nodes" takes a list, <<"a">> given'),
        (
            {"ha-params": 2},
            "ha-mode must be specified to specify ha-params, ha-sync-mode or "
            "ha-promote-on-shutdown",
        ),
        (
            {"ha-mode": "all", "ha-sync-mode": "x"},
            'ha-sync-mode must be "manual" or "automatic", got <<"x">>',
        ),
        (
            {"ha-mode": "all", "ha-promote-on-failure": "x"},
            'ha-promote-on-failure must be "always" or "when-synced", got <<"x">>',
        ),
        (
            {"ha-mode": "all", "ha-sync-batch-size": 0},
            "ha-sync-batch-size takes an integer greater than 0, 0 given",
        ),
        ({"queue-master-locator": "x"}, '<<"x">> invalid queue-master-locator value'),
        ({"max-age": "1 day"}, '<<"1 day">> is not a valid max age'),
        ({"max-age": 60}, "60 is not a valid max age"),
        ({"stream-max-segment-size-bytes": -1}, "-1 is not a valid segment size"),
        ({"initial-cluster-size": "3"}, '<<"3">> is not a valid cluster size'),
        ({"queue-leader-locator": "x"}, '<<"x">> is not a valid queue leader locator value'),
        ({"queue-version": 3}, "3 is not a valid queue-version value"),
        ({}, "no policy provided"),
    ],
)
def test_refused_definitions_carry_rabbitmq_text(definition: dict[str, Any], text: str) -> None:
    with pytest.raises(PolicyError) as info:
        validate("/", "p", ".*", definition)
    assert str(info.value) == f"Validation failed\n\n{text}\n"


def test_mirroring_keys_are_kept_and_ignored_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    definition = {
        "ha-mode": "exactly",
        "ha-params": 2,
        "ha-sync-mode": "automatic",
        "ha-promote-on-shutdown": "always",
        "ha-promote-on-failure": "always",
        "message-ttl": 60000,
    }
    broker = Broker()
    broker.vhosts["/"].declare_queue("ha.q", False, True, False, False, {}, None)
    set_policy(broker, "/", "ha", {"pattern": "^ha\\.", "definition": definition})
    assert get_policy(broker, "/", "ha")["definition"] == definition  # kept as given
    assert broker.vhosts["/"].queues["ha.q"].settings.message_ttl == 60000  # the rest applies
    assert "ha-mode, ha-params, ha-sync-mode, ha-promote-on-shutdown, ha-promote-on-failure " in (
        caplog.text
    )
    with pytest.raises(PolicyError, match="are not recognised policy settings"):
        validate("/", "op", ".*", {"ha-mode": "all"}, operator=True)  # as RabbitMQ: not here


def test_stream_and_queue_type_keys_are_accepted() -> None:
    definition = {
        "max-age": "7D",
        "stream-max-segment-size-bytes": 500_000_000,
        "initial-cluster-size": 3,
        "queue-leader-locator": "least-leaders",
        "queue-version": 2,
        "max-length-bytes": 20_000_000_000,
    }
    assert validate("/", "streams", "^s\\.", definition, apply_to="queues").definition == definition


def test_operator_policies_allow_only_limits() -> None:
    validate("/", "op", ".*", {"max-length": 5, "message-ttl": 1, "expires": 9}, operator=True)
    with pytest.raises(PolicyError, match="are not recognised policy settings"):
        validate("/", "op", ".*", {"dead-letter-exchange": "dlx"}, operator=True)


def test_pattern_priority_and_apply_to_are_checked() -> None:
    with pytest.raises(PolicyError, match="pattern should be regular expression but is invalid"):
        validate("/", "p", "(", {"max-length": 1})
    with pytest.raises(PolicyError, match="priority should be a number"):
        validate("/", "p", ".*", {"max-length": 1}, priority="high")
    with pytest.raises(PolicyError, match="apply-to 'streams' unrecognised; should be"):
        validate("/", "p", ".*", {"max-length": 1}, apply_to="streams")
    assert validate("/", "p", ".*", {"queue-mode": "lazy"}, priority="7").priority == 7
    with pytest.raises(PolicyError, match="priority should be a number"):
        validate("/", "p", ".*", {"max-length": 1}, priority="7", priority_text=False)


def test_every_field_error_is_listed_in_rabbitmqs_order() -> None:
    with pytest.raises(PolicyError) as info:
        validate("/", "p", 1, {"max-length": -1}, priority=None, apply_to=None)
    assert str(info.value) == (
        "Validation failed\n\n"
        "apply-to 'null' unrecognised; should be 'queues', 'exchanges' or 'all'\n"
        "-1 is not a valid maximum length\n"
        "pattern should be a binary but was 1\n"
        "priority should be a number, actually was null\n"
    )


# -- matching and merging -----------------------------------------------------------------


def test_the_highest_priority_match_wins_and_apply_to_filters() -> None:
    low = PolicyRecord("/", "low", "^q", "queues", 1, {"max-length": 1})
    high = PolicyRecord("/", "high", "^q\\.", "all", 5, {"max-length": 2})
    exchanges = PolicyRecord("/", "ex", ".*", "exchanges", 9, {"alternate-exchange": "ae"})
    quorum = PolicyRecord("/", "qq", ".*", "quorum_queues", 7, {"delivery-limit": 3})
    policies = [low, high, exchanges, quorum]
    assert select(policies, "queue", "q.1") is high
    assert select(policies, "queue", "qx") is low
    assert select(policies, "queue", "q.1", "quorum") is quorum
    assert select(policies, "exchange", "q.1") is exchanges
    assert select(policies, "queue", "amq.gen-x") is None
    assert select(policies, "queue", "other") is None


def test_precedence_of_arguments_policy_and_operator_policy() -> None:
    policy = PolicyRecord(
        "/",
        "p",
        ".*",
        definition={
            "max-length": 100,
            "message-ttl": 500,
            "dead-letter-exchange": "policy-dlx",
            "overflow": "reject-publish",
        },
    )
    operator = PolicyRecord("/", "op", ".*", definition={"max-length": 50, "expires": 9000})
    definition = merge(policy, operator)
    assert definition == {
        "max-length": 50,
        "message-ttl": 500,
        "dead-letter-exchange": "policy-dlx",
        "overflow": "reject-publish",
        "expires": 9000,
    }
    arguments = {"x-max-length": 70, "x-message-ttl": 1000, "x-dead-letter-exchange": "arg-dlx"}
    settings = effective_queue_settings(parse_queue_arguments(arguments), arguments, definition)
    assert settings.max_length == 50  # the lowest of argument, policy, operator policy
    assert settings.message_ttl == 500  # the lower of argument and policy
    assert settings.expires == 9000
    assert settings.dead_letter_exchange == "arg-dlx"  # an argument wins over a policy
    assert settings.overflow == "reject-publish"  # no argument: the policy's
    arguments = {"x-max-length": 10}
    settings = effective_queue_settings(parse_queue_arguments(arguments), arguments, definition)
    assert settings.max_length == 10


# -- live application ---------------------------------------------------------------------


def test_a_new_max_length_policy_drops_the_excess_at_once_and_clearing_restores() -> None:
    broker = Broker()
    client = client_of(broker)
    declare(client, "long")
    declare(client, "other")
    publish(client, "long", 10)
    publish(client, "other", 10)
    set_policy(broker, "/", "cap", {"pattern": "^long$", "definition": {"max-length": 3}})
    assert depth(broker, "long") == 3
    assert depth(broker, "other") == 10
    queue = broker.vhosts["/"].queues["long"]
    assert [bytes(e.message.body or b"") for e in queue.ready] == [b"m7", b"m8", b"m9"]
    clear_policy(broker, "/", "cap")
    publish(client, "long", 5)
    assert depth(broker, "long") == 8
    assert queue.settings.max_length is None


def test_a_max_length_policy_dead_letters_the_excess_when_the_queue_has_a_dlx() -> None:
    broker = Broker()
    client = client_of(broker)
    declare(client, "dead")
    client.send(1, commands.Exchange.Declare(exchange="dlx", exchange_type="fanout"))
    client.send(1, commands.Queue.Bind(queue="dead", exchange="dlx"))
    declare(client, "work")
    publish(client, "work", 6)
    set_policy(
        broker,
        "/",
        "dl",
        {"pattern": "^work$", "definition": {"max-length": 2, "dead-letter-exchange": "dlx"}},
    )
    assert depth(broker, "work") == 2
    assert depth(broker, "dead") == 4


def test_reject_publish_from_a_policy_refuses_publishes_in_confirm_mode() -> None:
    broker = Broker()
    client = client_of(broker)
    declare(client, "q")
    set_policy(
        broker,
        "/",
        "rp",
        {"pattern": "^q$", "definition": {"max-length": 1, "overflow": "reject-publish"}},
    )
    client.send(1, commands.Confirm.Select())
    client.methods()
    publish(client, "q", 2)
    replies = client.methods()
    assert [type(m).__name__ for m in replies] == ["Ack", "Nack"]
    assert depth(broker, "q") == 1


def test_operator_policy_caps_a_larger_argument() -> None:
    broker = Broker()
    client = client_of(broker)
    declare(client, "big", **{"x-max-length": 100})
    publish(client, "big", 20)
    set_policy(broker, "/", "op", {"pattern": ".*", "definition": {"max-length": 5}}, True)
    assert depth(broker, "big") == 5
    set_policy(broker, "/", "op", {"pattern": ".*", "definition": {"max-length": 500}}, True)
    publish(client, "big", 200)
    assert depth(broker, "big") == 100  # the argument is lower now


def test_a_queue_declared_later_gets_the_policy() -> None:
    broker = Broker()
    set_policy(broker, "/", "ttl", {"pattern": "^t", "definition": {"message-ttl": 1000}})
    client = client_of(broker)
    declare(client, "t1")
    assert broker.vhosts["/"].queues["t1"].settings.message_ttl == 1000


def test_alternate_exchange_policy_routes_unroutable_messages() -> None:
    broker = Broker()
    client = client_of(broker)
    client.send(1, commands.Exchange.Declare(exchange="main", exchange_type="direct"))
    client.send(1, commands.Exchange.Declare(exchange="ae", exchange_type="fanout"))
    declare(client, "caught")
    client.send(1, commands.Queue.Bind(queue="caught", exchange="ae"))
    client.methods()
    set_policy(
        broker,
        "/",
        "ae",
        {"pattern": "^main$", "definition": {"alternate-exchange": "ae"}, "apply-to": "exchanges"},
    )
    client.publish(1, "nowhere", b"x", exchange="main")
    assert depth(broker, "caught") == 1


def test_statistics_show_the_policies_and_the_effective_definition() -> None:
    broker = Broker()
    client = client_of(broker)
    declare(client, "q")
    set_policy(broker, "/", "p", {"pattern": "^q$", "definition": {"max-length": 9}})
    set_policy(broker, "/", "op", {"pattern": ".*", "definition": {"max-length": 4}}, True)
    item = inventory.queue(broker, "/", "q")
    assert item is not None
    assert item["policy"] == "p"
    assert item["operator_policy"] == "op"
    assert item["effective_policy_definition"] == {"max-length": 4}


def test_function_interface_for_the_http_api() -> None:
    broker = Broker()
    body = {"pattern": "^a", "definition": {"expires": 60000}, "priority": 2, "apply-to": "queues"}
    assert set_policy(broker, "/", "exp", body) == {
        "vhost": "/",
        "name": "exp",
        "pattern": "^a",
        "apply-to": "queues",
        "definition": {"expires": 60000},
        "priority": 2,
    }
    assert list_policies(broker) == [get_policy(broker, "/", "exp")]
    assert list_policies(broker, "/", operator=True) == []
    with pytest.raises(PolicyNotFound):
        list_policies(broker, "nope")
    with pytest.raises(PolicyNotFound):
        set_policy(broker, "nope", "x", body)
    with pytest.raises(PolicyError, match='Key "definition" not found'):
        set_policy(broker, "/", "x", {"pattern": ".*"})
    with pytest.raises(PolicyNotFound, match="Parameter does not exist"):
        clear_policy(broker, "/", "missing")


# -- ctl commands (the admin requests behind `amqpd ctl set-policy ...`) --------------------


def ctl(broker: Broker, command: str, **args: Any) -> str:
    return execute(broker, {"group": "policies", "command": command, "vhost": "/", **args}).output


def test_ctl_output_is_rabbitmqctls() -> None:
    broker = Broker()
    out = ctl(
        broker,
        "set-policy",
        name="lim",
        pattern="^q",
        definition='{"max-length":2}',
        priority=1,
        apply_to="queues",
    )
    assert out == (
        'Setting policy "lim" for pattern "^q" to "{"max-length":2}" with priority "1" '
        'for vhost "/" ...'
    )
    assert ctl(broker, "list-policies").split("\n") == [
        'Listing policies for vhost "/" ...',
        "vhost\tname\tpattern\tapply-to\tdefinition\tpriority",
        '/\tlim\t^q\tqueues\t{"max-length":2}\t1',
    ]
    assert ctl(broker, "list-operator-policies") == (
        'Listing operator policy overrides for vhost "/" ...'
    )
    assert ctl(broker, "clear-policy", name="lim") == 'Clearing policy "lim" on vhost "/" ...'
    with pytest.raises(AdminError, match="-1 is not a valid maximum length"):
        ctl(broker, "set-operator-policy", name="o", pattern=".", definition='{"max-length":-1}')
    with pytest.raises(AdminError, match="not valid JSON"):
        ctl(broker, "set-policy", name="o", pattern=".", definition="{max-length:1}")


def test_deleting_a_vhost_drops_its_policies() -> None:
    broker = Broker()
    execute(broker, {"group": "vhosts", "command": "add", "name": "v"})
    set_policy(broker, "v", "p", {"pattern": ".*", "definition": {"max-length": 1}})
    execute(broker, {"group": "vhosts", "command": "delete", "name": "v"})
    assert broker.access.state.policies == {}


# -- definitions --------------------------------------------------------------------------


def test_definitions_round_trip_policies_and_global_parameters() -> None:
    document = {
        "vhosts": [{"name": "/"}],
        "policies": [
            {
                "vhost": "/",
                "name": "dlx",
                "pattern": "^work",
                "apply-to": "queues",
                "definition": {"dead-letter-exchange": "dead", "message-ttl": 60000},
                "priority": 1,
            }
        ],
        "operator_policies": [
            {"vhost": "/", "name": "cap", "pattern": ".*", "definition": {"max-length": 10}}
        ],
        "global_parameters": [
            {"name": "cluster_name", "value": "prod@host"},
            {"name": "internal_cluster_id", "value": "rabbitmq-cluster-id-x"},
        ],
        "queues": [{"name": "work", "vhost": "/", "durable": True, "arguments": {}}],
    }
    broker = Broker()
    problems: list[str] = []
    counts = import_definitions(broker, document, problems)
    assert problems == []
    assert counts["policies"] == 1 and counts["operator_policies"] == 1
    assert counts["global_parameters"] == 2
    queue = broker.vhosts["/"].queues["work"]
    assert queue.settings.dead_letter_exchange == "dead"
    assert queue.settings.max_length == 10
    exported = export_definitions(broker.access.state, *topology(broker))
    assert exported["policies"] == [{**document["policies"][0]}]
    assert "operator_policies" not in exported  # RabbitMQ's import would drop that section
    assert exported["parameters"] == [
        {  # as RabbitMQ 3.10.8 exports an operator policy
            "value": {
                "pattern": ".*",
                "definition": {"max-length": 10},
                "priority": 0,
                "apply-to": "all",
            },
            "vhost": "/",
            "component": "operator_policy",
            "name": "cap",
        }
    ]
    assert exported["global_parameters"] == document["global_parameters"]
    again = Broker()
    import_definitions(again, json.loads(json.dumps(exported)))
    assert again.access.state.policies == broker.access.state.policies
    assert again.access.state.operator_policies == broker.access.state.operator_policies
    assert again.access.state.global_parameters == broker.access.state.global_parameters


def test_import_reports_what_it_could_not_apply() -> None:
    document = {
        "policies": [
            {"vhost": "/", "name": "bad", "pattern": ".*", "definition": {"ha-mode": "x"}},
            {"vhost": "ghost", "name": "lost", "pattern": ".*", "definition": {"expires": 1}},
        ],
        "parameters": [
            {"vhost": "/", "component": "federation-upstream", "name": "up", "value": {}}
        ],
        "topic_permissions": [{"user": "guest", "vhost": "/", "exchange": "t"}],
        "queues": [{"name": "amq.bad", "vhost": "/", "durable": True}],
    }
    broker = Broker()
    problems: list[str] = []
    import_definitions(broker, document, problems)
    assert len(problems) == 5
    text = "\n".join(problems)
    assert "policy 'bad' in vhost '/'" in text and "is not a valid ha-mode value" in text
    assert "no vhost 'ghost'" in text
    assert "federation-upstream" in text
    assert "topic permissions" in text
    assert "queue 'amq.bad'" in text
    outcome = execute(
        broker, {"group": "definitions", "command": "import", "definitions": document}
    )
    assert outcome.changed and len(outcome.problems) == 5


def test_ttl_and_expires_policies_run_on_the_queue_timers() -> None:
    broker = Broker()
    client = client_of(broker)
    declare(client, "ttl")
    declare(client, "idle")
    client.advance(10.0)  # unused for a while before the policy: its expires counts from it
    set_policy(broker, "/", "t", {"pattern": "^ttl$", "definition": {"message-ttl": 1000}})
    set_policy(broker, "/", "e", {"pattern": "^idle$", "definition": {"expires": 5000}})
    publish(client, "ttl", 3)
    client.advance(2.0)
    assert depth(broker, "ttl") == 0  # published under the policy: expired
    assert "idle" in broker.vhosts["/"].queues
    client.advance(4.0)
    assert "idle" not in broker.vhosts["/"].queues  # unused for longer than the policy's expires
