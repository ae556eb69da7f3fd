"""/api/policies and /api/operator-policies through the app without sockets: statuses and
bodies as RabbitMQ 3.10 gives them, its tag rules, and the policy's effect on queues."""

from __future__ import annotations

from typing import Any

import pytest

from amqpd.model.broker import Broker
from tests.unit.management_support import Api
from tests.unit.protocol_support import connect, declare

LIMIT = {"pattern": "^lim", "definition": {"max-length": 2}, "priority": 1, "apply-to": "queues"}
OBJECT = {"error": "not_authorised", "reason": "User not authorised to access object"}
VHOST = {"error": "not_authorised", "reason": "User not authorised to access virtual host"}
NOT_FOUND = {"error": "Object Not Found", "reason": "Not Found"}


def _api() -> Api:
    api = Api()
    api.put("/api/vhosts/other")  # guest gets permissions there, the users below do not
    for user, tag in (("pm", "policymaker"), ("mgr", "management"), ("mon", "monitoring")):
        api.add_user(user, tag)
    api.add_user("adm", "administrator")  # permissions in / only: administrators see all
    return api


def _bad(answer: Any) -> str:
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == "bad_request"
    reason: str = answer.json()["reason"]
    return reason


def test_put_creates_then_replaces_get_and_delete() -> None:
    api = _api()
    assert api.put("/api/policies/%2F/lim", json=LIMIT).status_code == 201
    assert api.put("/api/policies/%2F/lim", json=LIMIT).status_code == 204
    expected = {"vhost": "/", "name": "lim", **LIMIT}
    assert api.get("/api/policies/%2F/lim").json() == expected
    assert api.get("/api/policies").json() == [expected]
    assert api.get("/api/policies/%2F").json() == [expected]
    assert api.get("/api/policies/other").json() == []
    assert api.delete("/api/policies/%2F/lim").status_code == 204
    assert api.get("/api/policies/%2F/lim").json() == NOT_FOUND
    assert api.get("/api/policies").json() == []


def test_defaults_and_the_change_goes_through_the_admin_commands() -> None:
    api = _api()
    body = {"pattern": "^x", "definition": {"message-ttl": 5}}
    assert api.put("/api/policies/other/ttl", json=body).status_code == 201
    assert api.get("/api/policies/other/ttl").json() == {
        "vhost": "other",
        "name": "ttl",
        "pattern": "^x",
        "apply-to": "all",
        "definition": {"message-ttl": 5},
        "priority": 0,
    }
    [request] = [r for r in api.host.admin_requests if r["group"] == "policies"]
    assert request == {
        "group": "policies",
        "command": "set-policy",
        "vhost": "other",
        "name": "ttl",
        "pattern": "^x",
        "definition": '{"message-ttl": 5}',
        "priority": 0,
        "apply_to": "all",
    }
    api.delete("/api/policies/other/ttl")
    assert api.host.admin_requests[-1]["command"] == "clear-policy"


def test_a_policy_applies_to_queues_at_once() -> None:
    broker = Broker()
    api = Api(broker)
    declare(connect(broker), 1, "lim-q")
    assert api.put("/api/policies/%2F/lim", json=LIMIT).status_code == 201
    [queue] = api.get("/api/queues/%2F").json()
    assert queue["policy"] == "lim"
    assert queue["effective_policy_definition"] == {"max-length": 2}
    assert (
        api.put(
            "/api/operator-policies/%2F/cap", json={**LIMIT, "definition": {"max-length": 1}}
        ).status_code
        == 201
    )
    [queue] = api.get("/api/queues/%2F").json()
    assert queue["operator_policy"] == "cap"
    assert queue["effective_policy_definition"] == {"max-length": 1}
    api.delete("/api/policies/%2F/lim")
    api.delete("/api/operator-policies/%2F/cap")
    [queue] = api.get("/api/queues/%2F").json()
    assert queue["policy"] is None and queue["effective_policy_definition"] == {}


def test_missing_vhost_and_policy_are_404() -> None:
    api = _api()
    assert api.get("/api/policies/nope").json() == NOT_FOUND
    assert api.get("/api/policies/nope/p").status_code == 404
    missing = api.put("/api/policies/nope/p", json=LIMIT)
    assert missing.status_code == 404
    assert missing.json() == {"error": "not_found", "reason": "vhost_not_found"}
    assert api.delete("/api/policies/%2F/p").json() == NOT_FOUND
    assert api.delete("/api/policies/nope/p").status_code == 404
    assert api.get("/api/operator-policies/nope").status_code == 404
    assert api.put("/api/operator-policies/nope/p", json=LIMIT).json()["reason"] == (
        "vhost_not_found"
    )
    assert api.delete("/api/operator-policies/%2F/p").json() == NOT_FOUND


def test_bodies_rabbitmq_refuses() -> None:
    api = _api()
    assert _bad(api.put("/api/policies/%2F/p", json={})) == (
        "[{key_missing,pattern},{key_missing,definition}]"
    )
    assert _bad(api.put("/api/policies/%2F/p", json={"pattern": "x"})) == (
        "[{key_missing,definition}]"
    )
    assert _bad(api.put("/api/policies/%2F/p", content=b"nojson")) == "not_json"
    bad_value = {"pattern": "^b", "definition": {"max-length": "x"}}
    assert _bad(api.put("/api/policies/%2F/p", json=bad_value)) == (
        'Validation failed\n\n&lt;&lt;"x"&gt;&gt; is not a valid maximum length\n'
    )
    assert _bad(api.put("/api/policies/%2F/p", json={"pattern": "^b", "definition": {}})) == (
        "Validation failed\n\nno policy provided\n"
    )
    text_priority = {"pattern": "^b", "definition": {"max-length": 1}, "priority": "5"}
    assert _bad(api.put("/api/policies/%2F/p", json=text_priority)) == (
        'Validation failed\n\npriority should be a number, actually was &lt;&lt;"5"&gt;&gt;\n'
    )
    nulls = {"pattern": "^b", "definition": {"max-length": 1}, "priority": None, "apply-to": None}
    assert _bad(api.put("/api/policies/%2F/p", json=nulls)) == (
        "Validation failed\n\n"
        "apply-to 'null' unrecognised; should be 'queues', 'exchanges' or 'all'\n"
        "priority should be a number, actually was null\n"
    )
    # operator policies: only limits, and RabbitMQ does not escape the text there
    dlx = {"pattern": "^r", "definition": {"dead-letter-exchange": "x"}}
    assert _bad(api.put("/api/operator-policies/%2F/o", json=dlx)) == (
        'Validation failed\n\n[{<<"dead-letter-exchange">>,<<"x">>}] are not recognised '
        "policy settings\n"
    )
    assert api.get("/api/policies").json() == []
    assert api.get("/api/operator-policies").json() == []


def test_listing_sorts_by_priority_and_selects_columns_without_pagination() -> None:
    api = _api()
    api.put("/api/policies/%2F/b", json={**LIMIT, "priority": 5})
    api.put("/api/policies/%2F/a", json={**LIMIT, "priority": 7})
    api.put("/api/policies/other/c", json={**LIMIT, "priority": 0})
    assert [p["name"] for p in api.get("/api/policies").json()] == ["c", "b", "a"]
    assert api.get("/api/policies?sort=name&columns=name,priority").json() == [
        {"name": "a", "priority": 7},
        {"name": "b", "priority": 5},
        {"name": "c", "priority": 0},
    ]
    assert [p["name"] for p in api.get("/api/policies?sort_reverse=true").json()] == [
        "a",
        "b",
        "c",
    ]
    # RabbitMQ answers these listings as a plain list even with page=
    assert len(api.get("/api/policies?page=1&page_size=1").json()) == 3


@pytest.mark.parametrize("user", ["pm", "mgr", "mon"])
def test_listings_show_the_users_vhosts_only(user: str) -> None:
    api = _api()
    api.put("/api/policies/%2F/mine", json=LIMIT)
    api.put("/api/policies/other/theirs", json=LIMIT)
    api.put("/api/operator-policies/%2F/op-mine", json=LIMIT)
    api.put("/api/operator-policies/other/op-theirs", json=LIMIT)
    auth = (user, "pw")
    assert [p["name"] for p in api.get("/api/policies", auth=auth).json()] == ["mine"]
    assert [p["name"] for p in api.get("/api/operator-policies", auth=auth).json()] == ["op-mine"]
    assert api.get("/api/policies/other", auth=auth).json() == VHOST
    assert api.get("/api/operator-policies/other", auth=auth).json() == VHOST
    # administrators see every vhost's policies, permissions or not
    assert len(api.get("/api/policies", auth=("adm", "pw")).json()) == 2


def test_policymakers_change_policies_in_their_vhosts() -> None:
    api = _api()
    pm = ("pm", "pw")
    assert api.put("/api/policies/%2F/p", auth=pm, json=LIMIT).status_code == 201
    assert api.get("/api/policies/%2F/p", auth=pm).json()["name"] == "p"
    assert api.delete("/api/policies/%2F/p", auth=pm).status_code == 204
    assert api.put("/api/policies/other/p", auth=pm, json=LIMIT).json() == OBJECT
    api.put("/api/policies/other/p", json=LIMIT)
    assert api.get("/api/policies/other/p", auth=pm).json() == OBJECT
    assert api.delete("/api/policies/other/p", auth=pm).json() == OBJECT
    # a missing vhost is not a refusal, as in RabbitMQ
    assert api.put("/api/policies/nope/p", auth=pm, json=LIMIT).status_code == 404
    # administrators act in every vhost
    adm = ("adm", "pw")
    assert api.put("/api/policies/other/q", auth=adm, json=LIMIT).status_code == 201


@pytest.mark.parametrize("user", ["mgr", "mon"])
def test_management_and_monitoring_cannot_touch_one_policy(user: str) -> None:
    api = _api()
    api.put("/api/policies/%2F/p", json=LIMIT)
    auth = (user, "pw")
    for answer in (
        api.get("/api/policies/%2F/p", auth=auth),
        api.put("/api/policies/%2F/x", auth=auth, json=LIMIT),
        api.delete("/api/policies/%2F/p", auth=auth),
    ):
        assert answer.status_code == 401 and answer.json() == OBJECT
    assert api.get("/api/policies/%2F/p").status_code == 200


@pytest.mark.parametrize("user", ["pm", "mgr", "mon"])
def test_operator_policies_need_an_administrator(user: str) -> None:
    api = _api()
    assert api.put("/api/operator-policies/%2F/o", json=LIMIT).status_code == 201
    assert api.put("/api/operator-policies/%2F/o", json=LIMIT).status_code == 204
    auth = (user, "pw")
    refused = {"error": "not_authorised", "reason": "Not administrator user"}
    assert api.get("/api/operator-policies/%2F/o", auth=auth).json() == refused
    assert api.put("/api/operator-policies/%2F/x", auth=auth, json=LIMIT).json() == refused
    assert api.delete("/api/operator-policies/%2F/o", auth=auth).json() == refused
    assert api.get("/api/operator-policies/%2F/o", auth=("adm", "pw")).status_code == 200
    assert api.delete("/api/operator-policies/%2F/o", auth=("adm", "pw")).status_code == 204
    assert api.get("/api/operator-policies").json() == []


def test_operator_policies_and_policies_are_separate_tables() -> None:
    api = _api()
    api.put("/api/operator-policies/%2F/same", json=LIMIT)
    assert api.get("/api/policies/%2F/same").status_code == 404
    assert api.delete("/api/policies/%2F/same").status_code == 404
    assert api.get("/api/operator-policies/%2F/same").json()["definition"] == {"max-length": 2}


def test_a_user_without_management_tag_is_refused() -> None:
    api = _api()
    api.add_user("app")
    answer = api.get("/api/policies", auth=("app", "pw"))
    assert answer.status_code == 401 and answer.json()["reason"] == "Not management user"
