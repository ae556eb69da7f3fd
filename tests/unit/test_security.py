"""Access control, alarms and the write-ahead bound, in the sans-IO core (no sockets)."""

from __future__ import annotations

import asyncio
import math
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from pamqp import commands
from pamqp.heartbeat import Heartbeat

from amqpd.model.alarms import CLEAR_READINGS
from amqpd.model.auth import (
    HASH_SHA256,
    HASH_SHA512,
    AccessState,
    Permission,
    User,
    VhostInfo,
    check_password,
    hash_password,
    is_loopback_peer,
    validate_hash,
)
from amqpd.model.broker import Broker, BrokerConfig
from amqpd.model.definitions import DefinitionsError, export_definitions, import_definitions
from amqpd.shell.resources import parse_size
from amqpd.shell.tls import certificate_identity
from persistence import fieldcodec, schema
from persistence.store import Store
from tests.unit.engine_driver import Client

LOGIN_REFUSED = (
    "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. "
    "For details see the broker logfile."
)


# -- password hashes ---------------------------------------------------------------------------
def test_hash_matches_rabbitmq_documented_example() -> None:
    # rabbitmq.com/docs/passwords: salt 908DC60A, password "test12"
    expected = "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR"
    assert hash_password("test12", salt=bytes.fromhex("908DC60A")) == expected
    assert check_password("test12", expected, HASH_SHA256)
    assert not check_password("test13", expected, HASH_SHA256)


def test_hashes_are_salted_and_never_the_password() -> None:
    first, second = hash_password("secret"), hash_password("secret")
    assert first != second and "secret" not in first
    assert check_password("secret", first, HASH_SHA256)
    sha512 = hash_password("secret", HASH_SHA512)
    assert check_password("secret", sha512, HASH_SHA512)
    validate_hash(sha512, HASH_SHA512)
    with pytest.raises(ValueError):
        validate_hash(first, HASH_SHA512)  # wrong length for the algorithm
    with pytest.raises(ValueError):
        validate_hash("not base64!", HASH_SHA256)
    assert not check_password("", "", HASH_SHA256)  # no password: no password login


@pytest.mark.parametrize(
    ("peer", "loopback"),
    [
        ("127.0.0.1:5672", True),
        ("127.8.9.10:1", True),
        ("::1:40000", True),
        ("::ffff:127.0.0.1:40000", True),
        ("10.1.2.3:5672", False),
        ("192.168.0.9:1", False),
        ("?", False),
    ],
)
def test_loopback_peers(peer: str, loopback: bool) -> None:
    assert is_loopback_peer(peer) is loopback


# -- login ---------------------------------------------------------------------------------
def broker_with(users: dict[str, str], perms: dict[str, Permission] | None = None) -> Broker:
    broker = Broker()
    state = broker.access.state
    for name, password in users.items():
        state.users[name] = User(name, hash_password(password) if password else "")
        if perms is None or name in perms:
            state.permissions[(name, "/")] = (perms or {}).get(name, Permission())
    return broker


def remote_client(broker: Broker) -> Client:
    client = Client(broker)
    client.conn.peer = "10.0.0.7:40000"
    client.conn.loopback = False
    return client


def test_guest_is_refused_from_a_remote_address_like_a_bad_password() -> None:
    broker = broker_with({"app": "pw"})
    close = remote_client(broker).handshake()[-1][1]
    assert isinstance(close, commands.Connection.Close)
    assert (close.reply_code, close.reply_text) == (403, LOGIN_REFUSED)
    assert isinstance(
        remote_client(broker).handshake("/", "app", "pw")[-1][1], commands.Connection.OpenOk
    )
    # an empty loopback_users list lets guest in from anywhere
    open_broker = Broker(BrokerConfig(loopback_users=()))
    assert isinstance(remote_client(open_broker).handshake()[-1][1], commands.Connection.OpenOk)


def test_unknown_user_and_bad_password_are_indistinguishable() -> None:
    broker = broker_with({"app": "pw"})
    closes = [
        Client(broker).handshake("/", user, pw)[-1][1]
        for user, pw in (("app", "x"), ("nobody", "pw"))
    ]
    assert [(c.reply_code, c.reply_text) for c in closes] == [(403, LOGIN_REFUSED)] * 2


def test_user_without_a_password_cannot_log_in_with_plain() -> None:
    broker = broker_with({"cert-only": ""})
    close = Client(broker).handshake("/", "cert-only", "")[-1][1]
    assert close.reply_code == 403


def broker_with_mechanisms(users: dict[str, str], *mechanisms: str) -> Broker:
    broker = broker_with(users)
    broker.config.auth_mechanisms = mechanisms
    return broker


def start_with_certificate(broker: Broker, cert_user: str | None) -> tuple[Client, str]:
    client = Client(broker)
    client.conn.peer_cert_user = cert_user
    client.feed(b"AMQP\x00\x00\x09\x01")
    start = client.methods()[0]
    assert isinstance(start, commands.Connection.Start)
    return client, start.mechanisms


def test_external_is_not_offered_by_default_even_with_a_verified_certificate() -> None:
    """RabbitMQ's auth_mechanisms default is PLAIN and AMQPLAIN: py-amqp prefers EXTERNAL
    whenever it is offered, so offering it to every client with a certificate refused
    all of Celery's TLS logins (issue 21, item 12)."""
    broker = broker_with({"CN=app": ""})
    client, mechanisms = start_with_certificate(broker, "CN=app")
    assert mechanisms == "AMQPLAIN PLAIN"
    client.send(
        0,
        commands.Connection.StartOk(
            client_properties={"capabilities": client.capabilities},
            mechanism="EXTERNAL",
            response="",
        ),
    )
    close = client.methods()[-1]
    assert isinstance(close, commands.Connection.Close) and close.reply_code == 403
    # PLAIN still works for the same client
    assert isinstance(Client(broker).handshake()[-1][1], commands.Connection.OpenOk)


def test_external_when_configured_is_offered_only_with_a_verified_certificate() -> None:
    broker = broker_with_mechanisms({"CN=app": ""}, "PLAIN", "AMQPLAIN", "EXTERNAL")
    assert start_with_certificate(broker, None)[1] == "AMQPLAIN PLAIN"
    assert start_with_certificate(broker, "CN=app")[1] == "AMQPLAIN EXTERNAL PLAIN"
    only_external = broker_with_mechanisms({"CN=app": ""}, "EXTERNAL")
    assert start_with_certificate(only_external, "CN=app")[1] == "EXTERNAL"
    client = Client(only_external)  # PLAIN is not offered, so it is refused
    close = client.handshake()[-1][1]
    assert isinstance(close, commands.Connection.Close) and close.reply_code == 403


def test_external_is_offered_and_accepted_only_with_a_certificate_identity() -> None:
    broker = broker_with_mechanisms({"CN=app": ""}, "PLAIN", "AMQPLAIN", "EXTERNAL")
    client, mechanisms = start_with_certificate(broker, "CN=app")
    assert mechanisms == "AMQPLAIN EXTERNAL PLAIN"
    client.send(
        0,
        commands.Connection.StartOk(
            client_properties={"capabilities": client.capabilities},
            mechanism="EXTERNAL",
            response="",
        ),
    )
    assert isinstance(client.methods()[-1], commands.Connection.Tune)


def test_vhost_without_permissions_is_530() -> None:
    broker = broker_with({"app": "pw"}, perms={})
    close = Client(broker).handshake("/", "app", "pw")[-1][1]
    assert close.reply_code == 530
    assert close.reply_text == "NOT_ALLOWED - access to vhost '/' refused for user 'app'"


def test_connection_limits_count_open_connections() -> None:
    broker = Broker(BrokerConfig(connection_max=1))
    first = Client(broker)
    assert isinstance(first.handshake()[-1][1], commands.Connection.OpenOk)
    close = Client(broker).handshake()[-1][1]
    assert (
        close.reply_text == "NOT_ALLOWED - connection refused: node connection limit (1) is reached"
    )
    first.send(0, commands.Connection.Close(reply_code=200, reply_text="", class_id=0, method_id=0))
    assert isinstance(Client(broker).handshake()[-1][1], commands.Connection.OpenOk)

    broker = Broker()
    broker.access.state.vhosts["/"].max_connections = 0
    close = Client(broker).handshake()[-1][1]
    assert close.reply_text.endswith("refused for user 'guest': connection limit (0) is reached")


# -- permissions in the channel ----------------------------------------------------------------
def restricted_client() -> Client:
    broker = broker_with({"app": "pw"}, perms={"app": Permission("^app\\.", "^app\\.", "^app\\.")})
    client = Client(broker)
    client.handshake("/", "app", "pw")
    client.open_channel(1)
    return client


def channel_close(client: Client) -> commands.Channel.Close:
    close = client.methods()[-1]
    assert isinstance(close, commands.Channel.Close)
    return close


def test_publish_needs_write_before_the_exchange_is_looked_up() -> None:
    client = restricted_client()
    client.publish(1, "k", b"x", exchange="missing")
    close = channel_close(client)
    assert (close.reply_code, close.class_id, close.method_id) == (403, 60, 40)
    assert "exchange 'missing'" in close.reply_text
    assert not client.conn.should_close  # a channel error only


def test_default_exchange_is_checked_as_amq_default() -> None:
    client = restricted_client()
    client.publish(1, "app.q", b"x")
    assert (
        "exchange 'amq.default' in vhost '/' refused for user 'app'"
        in channel_close(client).reply_text
    )


def test_user_id_mismatch_is_406_and_match_is_accepted() -> None:
    client = Client(Broker())
    client.handshake()
    client.open_channel(1)
    client.send(1, commands.Queue.Declare(queue="q"))
    client.publish(1, "q", b"x", user_id="guest")
    client.publish(1, "q", b"x", user_id="someone-else")
    close = channel_close(client)
    assert close.reply_code == 406
    assert close.reply_text == (
        "PRECONDITION_FAILED - user_id property set to 'someone-else' but authenticated user "
        "was 'guest'"
    )
    assert len(client.conn.broker.vhosts["/"].queues["q"].ready) == 1


def test_impersonator_tag_may_set_any_user_id() -> None:
    broker = Broker()
    broker.access.state.users["guest"].tags = ("impersonator",)
    client = Client(broker)
    client.handshake()
    client.open_channel(1)
    client.send(1, commands.Queue.Declare(queue="q"))
    client.publish(1, "q", b"x", user_id="someone-else")
    assert len(broker.vhosts["/"].queues["q"].ready) == 1


# -- resource alarms ---------------------------------------------------------------------------
def alarm_broker() -> Broker:
    return Broker(BrokerConfig(memory_high_watermark=1000, disk_free_limit=100, heartbeat=5))


def test_a_publisher_is_blocked_only_when_it_publishes_and_resumed_after() -> None:
    broker = alarm_broker()
    publisher, consumer = Client(broker), Client(broker)
    publisher.capabilities = {"connection.blocked": True}
    for client in (publisher, consumer):
        client.handshake()
        client.open_channel(1)
    broker.memory_used(2000)
    assert broker.alarms.active and not publisher.received()
    consumer.send(1, commands.Queue.Declare(queue="q"))
    assert not consumer.conn.paused
    publisher.publish(1, "q", b"x")
    blocked = publisher.methods()[-1]
    assert isinstance(blocked, commands.Connection.Blocked)
    assert blocked.reason == "low on memory"
    assert publisher.conn.paused and not consumer.conn.paused
    broker.disk_free(10)
    for _ in range(CLEAR_READINGS):
        broker.memory_used(10)
    assert publisher.conn.paused  # the disk alarm is still on
    assert publisher.conn.read_delay(0.0) == math.inf
    assert not publisher.conn.outbox.take_resume()
    publisher.publish(1, "q", b"y")  # still in its buffer: no second Blocked
    assert not [m for m in publisher.methods() if isinstance(m, commands.Connection.Blocked)]
    broker.disk_free(1000)
    assert isinstance(publisher.methods()[-1], commands.Connection.Unblocked)
    assert not publisher.conn.paused
    assert publisher.conn.outbox.take_resume() == [publisher.conn]  # the shell reads again
    assert publisher.conn.read_delay(0.0) is None


def test_a_blocked_connection_is_not_dropped_for_missed_heartbeats() -> None:
    broker = alarm_broker()
    client = Client(broker)
    client.handshake()
    client.send(0, commands.Connection.Blocked(reason="ignored"))  # no effect on a broker
    client.conn.heartbeat = 5
    client.open_channel(1)
    broker.memory_used(5000)
    client.publish(1, "q", b"x")
    assert client.conn.paused
    for now in range(1, 60):
        client.conn.tick(float(now))
    assert not client.conn.should_close
    for _ in range(CLEAR_READINGS):
        broker.memory_used(0)
    client.conn.tick(61.0)
    client.conn.tick(70.0)
    assert not client.conn.should_close
    client.conn.tick(72.0)  # two intervals of silence after the unblock: now it counts
    assert client.conn.should_close
    assert any(isinstance(v, Heartbeat) for _c, v in client.received())


# -- write-ahead bound -------------------------------------------------------------------------
def test_deliveries_stop_at_the_write_ahead_limit_and_resume_when_written() -> None:
    broker = Broker(BrokerConfig(write_ahead_limit=100_000))
    consumer, publisher = Client(broker), Client(broker)
    for client in (consumer, publisher):
        client.handshake()
        client.open_channel(1)
    consumer.send(1, commands.Queue.Declare(queue="q"))
    consumer.send(1, commands.Basic.Consume(queue="q", consumer_tag="c", no_ack=True))
    consumer.received()
    for _ in range(50):
        publisher.publish(1, "q", b"z" * 10_000)
    queue = broker.vhosts["/"].queues["q"]
    conn = consumer.conn
    assert conn.output_full
    assert 30 <= len(queue.ready) < 50  # about 100 kB went out; the rest waits
    data = conn.data_to_send()
    conn.write_started(len(data))
    assert not conn.output_pending  # still full while the write is in flight
    conn.write_finished()
    conn.write_started(len(conn.data_to_send()))
    conn.write_finished()
    while queue.ready:
        conn.write_started(len(conn.data_to_send()))
        conn.write_finished()
    assert not queue.ready


# -- definitions -------------------------------------------------------------------------------
DEFINITIONS: dict[str, Any] = {
    "rabbit_version": "3.12.10",
    "users": [
        {
            "name": "svc",
            "password_hash": hash_password("svc-pw"),
            "hashing_algorithm": "rabbit_password_hashing_sha256",
            "tags": "administrator,monitoring",  # RabbitMQ 3.x wrote a string
        },
        {"name": "plain", "password": "plain-pw", "tags": []},
    ],
    "vhosts": [{"name": "/"}, {"name": "prod", "description": "production"}],
    "permissions": [
        {"user": "svc", "vhost": "prod", "configure": "^svc", "write": ".*", "read": ""},
    ],
    "parameters": [
        {
            "vhost": "prod",
            "component": "vhost-limits",
            "name": "limits",
            "value": {"max-connections": 5},
        }
    ],
    "policies": [{"vhost": "/", "name": "ha", "pattern": ".*", "definition": {}}],
    "exchanges": [
        {
            "name": "ex",
            "vhost": "prod",
            "type": "topic",
            "durable": True,
            "auto_delete": False,
            "internal": False,
            "arguments": {},
        }
    ],
    "queues": [
        {
            "name": "q1",
            "vhost": "prod",
            "durable": True,
            "auto_delete": False,
            "arguments": {"x-max-length": 10},
        }
    ],
    "bindings": [
        {
            "source": "ex",
            "vhost": "prod",
            "destination": "q1",
            "destination_type": "queue",
            "routing_key": "a.#",
            "arguments": {},
        }
    ],
}


def test_definitions_import_creates_users_vhosts_permissions_and_topology() -> None:
    broker = Broker()
    problems: list[str] = []
    counts = import_definitions(broker, DEFINITIONS, problems)
    assert problems == ["policy 'ha' in vhost '/': Validation failed no policy provided"]
    assert counts == {
        "users": 2,
        "vhosts": 2,
        "permissions": 1,
        "policies": 0,
        "operator_policies": 0,
        "global_parameters": 0,
        "parameters": 1,  # the vhost-limits parameter, applied
        "exchanges": 1,
        "queues": 1,
        "bindings": 1,
    }
    state = broker.access.state
    assert state.users["svc"].tags == ("administrator", "monitoring")
    assert broker.access.authenticate("plain", "plain-pw") is not None
    assert "plain-pw" not in state.users["plain"].password_hash
    assert state.vhosts["prod"].max_connections == 5
    assert state.permissions[("svc", "prod")] == Permission("^svc", ".*", "")
    prod = broker.vhosts["prod"]
    assert prod.queues["q1"].arguments == {"x-max-length": 10}
    assert "guest" in state.users  # importing never deletes


@pytest.mark.parametrize(
    ("broken", "message"),
    [
        ({"permissions": [{"user": "ghost", "vhost": "/", "configure": ".*"}]}, "no user 'ghost'"),
        ({"permissions": [{"user": "guest", "vhost": "/", "configure": "("}]}, "invalid regular"),
        ({"users": [{"name": "x", "password_hash": "abc", "hashing_algorithm": "md4"}]}, "md4"),
        ({"users": "nope"}, "must be a list"),
    ],
)
def test_bad_definitions_are_refused_whole(broken: dict[str, Any], message: str) -> None:
    broker = Broker()
    before = dict(broker.access.state.users)
    with pytest.raises(DefinitionsError, match=message):
        import_definitions(broker, broken)
    assert broker.access.state.users == before


def test_definitions_export_round_trips() -> None:
    broker = Broker()
    import_definitions(broker, DEFINITIONS)
    exported = export_definitions(broker.access.state)
    again = Broker()
    import_definitions(again, exported)
    assert again.access.state.users == broker.access.state.users
    assert again.access.state.permissions == broker.access.state.permissions
    assert again.access.state.vhosts == broker.access.state.vhosts


# -- store -------------------------------------------------------------------------------------
def test_a_schema_1_store_is_migrated_with_the_default_user(tmp_path: Path) -> None:
    db = tmp_path / schema.DB_FILENAME
    con = sqlite3.connect(db)
    for statement in schema.MIGRATIONS[1]:
        con.execute(statement)
    con.execute(f"PRAGMA application_id = {schema.APPLICATION_ID}")
    con.execute("PRAGMA user_version = 1")
    con.execute(
        "INSERT INTO exchanges VALUES ('/', 'kept', 'direct', 0, 0, ?)", (fieldcodec.encode({}),)
    )
    con.commit()
    con.close()

    async def main() -> AccessState:
        store = await Store.open(tmp_path)
        try:
            state = await store.load_access()
            loaded = await store.load()
            assert [e.name for e in loaded.exchanges] == ["kept"]
            state.users["svc"] = User("svc", hash_password("pw"))
            state.vhosts["v"] = VhostInfo("v", "d", ("t",), 3)
            state.permissions[("svc", "v")] = Permission("a", "b", "c")
            await store.save_access(state)
        finally:
            await store.close()
        store = await Store.open(tmp_path)
        try:
            return await store.load_access()
        finally:
            await store.close()

    state = asyncio.run(main())
    assert check_password("guest", state.users["guest"].password_hash, HASH_SHA256)
    assert state.permissions[("guest", "/")] == Permission(".*", ".*", ".*")
    assert state.vhosts["v"] == VhostInfo("v", "d", ("t",), 3)
    assert state.permissions[("svc", "v")] == Permission("a", "b", "c")


# -- helpers -----------------------------------------------------------------------------------
def test_certificate_identity() -> None:
    cert = {
        "subject": (
            (("countryName", "DE"),),
            (("organizationName", "Example, Inc"),),
            (("commonName", "app"),),
        )
    }
    assert certificate_identity(cert, "distinguished_name") == "CN=app,O=Example\\, Inc,C=DE"
    assert certificate_identity(cert, "common_name") == "app"
    assert certificate_identity(None, "common_name") is None
    assert certificate_identity({}, "distinguished_name") is None


def test_parse_size() -> None:
    assert parse_size("0.4", 1000) == 400
    assert parse_size("50MB") == 50_000_000
    assert parse_size("2GiB") == 2 << 30
    assert parse_size("12345") == 12345
    with pytest.raises(ValueError):
        parse_size("0.4")
    with pytest.raises(ValueError):
        parse_size("lots")
