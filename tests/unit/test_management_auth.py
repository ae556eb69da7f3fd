"""Authentication and RabbitMQ's management tag rules, through the app without sockets."""

from __future__ import annotations

import pytest
from pamqp import commands

from amqpd.model.broker import Broker
from tests.unit.management_support import Api
from tests.unit.protocol_support import connect, declare

CHALLENGE = 'Basic realm="RabbitMQ Management"'


def test_missing_and_wrong_credentials_are_401_with_the_challenge() -> None:
    api = Api()
    missing = api.get("/api/overview", auth=None)
    assert missing.status_code == 401 and missing.content == b""
    assert missing.headers["www-authenticate"] == CHALLENGE
    wrong = api.get("/api/overview", auth=("guest", "nope"))
    assert wrong.status_code == 401
    assert wrong.headers["www-authenticate"] == CHALLENGE
    assert wrong.json() == {"error": "not_authorized", "reason": "Login failed"}
    unknown = api.get("/api/overview", auth=("ghost", "guest"))
    assert unknown.status_code == 401 and unknown.json()["reason"] == "Login failed"
    bearer = api.get("/api/overview", auth=None, headers={"Authorization": "Bearer x"})
    assert bearer.status_code == 401


def test_guest_only_from_loopback() -> None:
    assert Api(peer="127.0.0.1").get("/api/whoami").status_code == 200
    remote = Api(peer="10.1.2.3")
    refused = remote.get("/api/whoami")
    assert refused.status_code == 401 and refused.json()["reason"] == "Login failed"
    remote.add_user("admin", "administrator")
    assert remote.get("/api/whoami", auth=("admin", "pw")).json() == {
        "name": "admin",
        "tags": ["administrator"],
    }


def test_user_without_management_tag_is_refused() -> None:
    api = Api()
    api.add_user("app")
    answer = api.get("/api/whoami", auth=("app", "pw"))
    assert answer.status_code == 401
    assert answer.json() == {"error": "not_authorised", "reason": "Not management user"}
    api.add_user("imp", "impersonator")
    assert api.get("/api/queues", auth=("imp", "pw")).status_code == 401


def _broker_with_two_vhosts() -> Api:
    broker = Broker()
    api = Api(broker)
    api.put("/api/vhosts/other")
    client = connect(broker, vhost="other")
    declare(client, 1, "q-other")
    client.send(1, commands.Exchange.Declare(exchange="x-other", exchange_type="fanout"))
    declare(connect(broker), 1, "q-root")
    api.add_user("mgr", "management")
    api.add_user("mon", "monitoring")
    api.add_user("pm", "policymaker")
    return api


@pytest.mark.parametrize("user", ["mgr", "mon", "pm"])
def test_non_admins_list_only_their_vhosts_objects(user: str) -> None:
    api = _broker_with_two_vhosts()
    auth = (user, "pw")
    assert [q["name"] for q in api.get("/api/queues", auth=auth).json()] == ["q-root"]
    assert "x-other" not in {e["name"] for e in api.get("/api/exchanges", auth=auth).json()}
    assert {b["vhost"] for b in api.get("/api/bindings", auth=auth).json()} == {"/"}
    refused = api.get("/api/queues/other", auth=auth)
    assert refused.status_code == 401
    assert refused.json()["reason"] == "User not authorised to access virtual host"
    assert api.put("/api/queues/other/q", auth=auth, json={}).status_code == 401
    # administrators see everything
    assert [q["name"] for q in api.get("/api/queues").json()] == ["q-root", "q-other"]


def test_admin_only_and_monitor_only_resources() -> None:
    api = _broker_with_two_vhosts()
    for path in ("/api/users", "/api/permissions", "/api/definitions", "/api/users/guest"):
        for user in ("mgr", "mon", "pm"):
            answer = api.get(path, auth=(user, "pw"))
            assert answer.status_code == 401, (path, user)
            assert answer.json()["reason"] == "Not administrator user"
        assert api.get(path).status_code == 200
    assert api.get("/api/nodes", auth=("mgr", "pw")).json()["reason"] == "Not monitor user"
    assert api.get("/api/nodes", auth=("mon", "pw")).status_code == 200
    # monitoring lists every vhost, management only its own
    assert {v["name"] for v in api.get("/api/vhosts", auth=("mon", "pw")).json()} == {
        "/",
        "other",
    }
    assert [v["name"] for v in api.get("/api/vhosts", auth=("mgr", "pw")).json()] == ["/"]
    assert api.put("/api/vhosts/new", auth=("mon", "pw")).status_code == 401
    assert api.put("/api/users/x", auth=("mgr", "pw"), json={"tags": ""}).status_code == 401


def test_connections_own_for_management_all_for_monitoring() -> None:
    broker = Broker()
    api = Api(broker)
    api.add_user("mgr", "management")
    api.add_user("mon", "monitoring")
    connect(broker).conn.peer = "127.0.0.1:1001"  # distinct names
    connect(broker, user="mgr", password="pw").conn.peer = "127.0.0.1:1002"

    def users(auth: tuple[str, str]) -> list[str]:
        return sorted(c["user"] for c in api.get("/api/connections", auth=auth).json())

    assert users(("mgr", "pw")) == ["mgr"]
    assert users(("mon", "pw")) == ["guest", "mgr"]
    assert users(("guest", "guest")) == ["guest", "mgr"]
    channels = api.get("/api/channels", auth=("mgr", "pw")).json()
    assert [c["user"] for c in channels] == ["mgr"]
    guest_conn = next(c["name"] for c in api.get("/api/connections").json() if c["user"] == "guest")
    from urllib.parse import quote

    path = "/api/connections/" + quote(guest_conn, safe="")
    assert api.get(path, auth=("mgr", "pw")).status_code == 404
    assert api.delete(path, auth=("mon", "pw")).json()["reason"] == "Not administrator user"


def test_user_permissions_limit_changes_inside_a_vhost() -> None:
    api = Api()
    api.put("/api/users/ro", json={"password": "pw", "tags": "management"})
    api.put("/api/permissions/%2F/ro", json={"configure": "^mine-", "write": "", "read": ".*"})
    assert api.put("/api/queues/%2F/mine-1", auth=("ro", "pw"), json={}).status_code == 201
    refused = api.put("/api/queues/%2F/other", auth=("ro", "pw"), json={})
    assert refused.status_code == 401
    assert refused.json() == {"error": "not_authorised", "reason": "Access refused."}
    publish = {
        "routing_key": "mine-1",
        "payload": "x",
        "payload_encoding": "string",
        "properties": {},
    }
    assert (
        api.post(
            "/api/exchanges/%2F/amq.default/publish", auth=("ro", "pw"), json=publish
        ).status_code
        == 401
    )
    assert "other" not in api.broker.default_vhost.queues


def test_policymaker_rule() -> None:
    from amqpd.shell.management.auth import Principal
    from amqpd.shell.management.errors import ApiError

    Principal("p", ("policymaker",)).require_policymaker()
    Principal("a", ("administrator",)).require_policymaker()
    with pytest.raises(ApiError) as refused:
        Principal("m", ("management", "monitoring")).require_policymaker()
    assert refused.value.reason == "Not policymaker user"


def test_overview_totals_are_narrowed_for_management_users() -> None:
    api = _broker_with_two_vhosts()
    admin = api.get("/api/overview").json()
    assert admin["object_totals"]["queues"] == 2
    monitor = api.get("/api/overview", auth=("mon", "pw")).json()
    assert monitor["object_totals"] == admin["object_totals"]
    own = api.get("/api/overview", auth=("mgr", "pw")).json()["object_totals"]
    assert own["queues"] == 1 and own["connections"] == 0 and own["channels"] == 0
    assert own["exchanges"] == len(api.broker.default_vhost.exchanges)
