"""Access control with pika against the real server: every refusal code, where RabbitMQ gives it.

Users and topology come from a RabbitMQ definitions file imported at startup. ``alice`` may
configure ``alice-*`` only, write to ``alice-*``, the default exchange and ``shared-x``, and
read ``alice-*``, ``shared-x`` and ``shared-q``. After each refusal the connection is still
usable (403 and 406 close only the channel).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import pika
import pika.exceptions
import pytest
from pamqp import commands

from amqpd.shell.server import Server
from tests.conftest import NodeUnderTest, node_under_test
from tests.integration.raw_client import RawClient

StartServer = Callable[..., AbstractContextManager[Server | NodeUnderTest]]

DEFINITIONS = {
    "users": [
        {"name": "alice", "password": "alice-pw", "tags": ""},
        {"name": "carol", "password": "carol-pw", "tags": ["monitoring"]},
    ],
    "vhosts": [{"name": "/"}, {"name": "other"}, {"name": "small"}],
    "permissions": [
        {
            "user": "alice",
            "vhost": "/",
            "configure": "^alice-",
            "write": "^(alice-.*|amq\\.default|shared-x)$",
            "read": "^(alice-.*|shared-x|shared-q)$",
        },
        {"user": "guest", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"},
        {"user": "guest", "vhost": "small", "configure": ".*", "write": ".*", "read": ".*"},
        {"user": "carol", "vhost": "other", "configure": "", "write": "", "read": ""},
    ],
    "parameters": [
        {
            "vhost": "small",
            "component": "vhost-limits",
            "name": "limits",
            "value": {"max-connections": 1},
        }
    ],
    "exchanges": [
        {"name": "private-x", "vhost": "/", "type": "fanout", "durable": True},
        {"name": "shared-x", "vhost": "/", "type": "fanout", "durable": True},
    ],
    "queues": [
        {"name": "private-q", "vhost": "/", "durable": True, "arguments": {}},
        {"name": "shared-q", "vhost": "/", "durable": True, "arguments": {}},
    ],
    "bindings": [
        {
            "source": "shared-x",
            "vhost": "/",
            "destination": "shared-q",
            "destination_type": "queue",
            "routing_key": "",
            "arguments": {},
        }
    ],
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server | NodeUnderTest]:
    path = tmp_path_factory.mktemp("acl") / "definitions.json"
    path.write_text(json.dumps(DEFINITIONS))
    with node_under_test(tmp_path_factory, definitions=path) as srv:
        yield srv


def connect(
    server: Server | NodeUnderTest,
    user: str = "alice",
    password: str = "alice-pw",
    vhost: str = "/",
) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters(
            "127.0.0.1", server.port, vhost, pika.PlainCredentials(user, password)
        )
    )


@pytest.fixture
def alice(server: Server | NodeUnderTest) -> Iterator[pika.BlockingConnection]:
    conn = connect(server)
    yield conn
    if conn.is_open:
        conn.close()


def refused(conn: pika.BlockingConnection, action: Callable[[Any], object], code: int = 403) -> str:
    """Run ``action`` on a new channel; it must close the channel (only) with ``code``."""
    channel = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        action(channel)
    assert info.value.reply_code == code, info.value
    assert conn.is_open
    conn.channel().close()  # the connection still works
    return str(info.value.reply_text)


def allowed(conn: pika.BlockingConnection, action: Callable[[Any], object]) -> None:
    channel = conn.channel()
    action(channel)
    channel.close()


def publisher(
    exchange: str, key: str, properties: pika.BasicProperties | None = None
) -> Callable[[Any], None]:
    """An action publishing one message in confirm mode (so a refusal is seen at once)."""

    def publish(channel: Any) -> None:
        channel.confirm_delivery()
        channel.basic_publish(exchange, key, b"x", properties)

    return publish


def denial(kind: str, name: str, user: str = "alice", vhost: str = "/") -> str:
    return (
        f"ACCESS_REFUSED - access to {kind} '{name}' in vhost '{vhost}' refused for user '{user}'"
    )


# -- login and vhost access ------------------------------------------------------------------
def test_unknown_user_and_bad_password_get_the_same_403(server: Server | NodeUnderTest) -> None:
    texts = []
    for user, password in (("alice", "wrong"), ("mallory", "alice-pw")):
        with RawClient.connect(server.port) as client:
            client.start(user=user, password=password)
            close = client.expect_connection_close(403, answer=False)
            assert (close.class_id, close.method_id) == (10, 11)
            texts.append(close.reply_text)
    assert texts[0] == texts[1]
    assert texts[0] == (
        "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. "
        "For details see the broker logfile."
    )


def test_login_refused_with_pika_is_403(server: Server | NodeUnderTest) -> None:
    with pytest.raises(pika.exceptions.ProbableAuthenticationError, match="403"):
        connect(server, password="wrong")


def test_user_without_permissions_in_a_vhost_gets_530(server: Server | NodeUnderTest) -> None:
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as info:
        connect(server, vhost="other")
    assert "530" in str(info.value)
    assert "access to vhost 'other' refused for user 'alice'" in str(info.value)


def test_unknown_vhost_gets_530(server: Server | NodeUnderTest) -> None:
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError, match="530"):
        connect(server, vhost="nowhere")


def test_empty_permissions_grant_the_vhost_but_no_resource(server: Server | NodeUnderTest) -> None:
    conn = connect(server, "carol", "carol-pw", vhost="other")
    try:
        text = refused(conn, lambda ch: ch.queue_declare("anything"))
        assert text == denial("queue", "anything", "carol", "other")
        text = refused(conn, publisher("", "anything"))
        assert text == denial("exchange", "amq.default", "carol", "other")
    finally:
        conn.close()


def test_vhost_connection_limit_is_530(server: Server | NodeUnderTest) -> None:
    first = connect(server, "guest", "guest", vhost="small")
    try:
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as info:
            connect(server, "guest", "guest", vhost="small")
        assert "connection limit (1) is reached" in str(info.value)
    finally:
        first.close()
    connect(server, "guest", "guest", vhost="small").close()  # free again


# -- configure ---------------------------------------------------------------------------------
def test_queue_declare_needs_configure(alice: pika.BlockingConnection) -> None:
    assert refused(alice, lambda ch: ch.queue_declare("private-q")) == denial("queue", "private-q")
    allowed(alice, lambda ch: ch.queue_declare("alice-q1", auto_delete=True))
    allowed(alice, lambda ch: ch.queue_declare("private-q", passive=True))  # no check


def test_server_named_queue_is_checked_as_amq_gen(alice: pika.BlockingConnection) -> None:
    text = refused(alice, lambda ch: ch.queue_declare(""))
    assert text.startswith("ACCESS_REFUSED - access to queue 'amq.gen-")


def test_exchange_declare_and_delete_need_configure(alice: pika.BlockingConnection) -> None:
    text = refused(alice, lambda ch: ch.exchange_declare("bob-x", "direct"))
    assert text == denial("exchange", "bob-x")
    assert refused(alice, lambda ch: ch.exchange_delete("private-x")) == denial(
        "exchange", "private-x"
    )
    allowed(alice, lambda ch: ch.exchange_declare("alice-x", "direct", auto_delete=True))
    allowed(alice, lambda ch: ch.exchange_delete("alice-x"))


def test_queue_delete_needs_configure(alice: pika.BlockingConnection) -> None:
    assert refused(alice, lambda ch: ch.queue_delete("shared-q")) == denial("queue", "shared-q")


def test_dead_letter_exchange_needs_write_on_it(alice: pika.BlockingConnection) -> None:
    text = refused(
        alice,
        lambda ch: ch.queue_declare("alice-dl", arguments={"x-dead-letter-exchange": "private-x"}),
    )
    assert text == denial("exchange", "private-x")


def test_alternate_exchange_needs_write_on_it(alice: pika.BlockingConnection) -> None:
    text = refused(
        alice,
        lambda ch: ch.exchange_declare(
            "alice-ae", "direct", arguments={"alternate-exchange": "private-x"}
        ),
    )
    assert text == denial("exchange", "private-x")


# -- write -------------------------------------------------------------------------------------
def test_publish_needs_write_on_the_exchange(alice: pika.BlockingConnection) -> None:
    assert refused(alice, publisher("private-x", "")) == denial("exchange", "private-x")
    allowed(alice, lambda ch: ch.basic_publish("shared-x", "", b"to shared"))


def test_publish_to_a_missing_exchange_without_write_is_403_not_404(
    alice: pika.BlockingConnection,
) -> None:
    assert refused(alice, publisher("no-such-x", "")) == denial("exchange", "no-such-x")


def test_bind_needs_write_on_the_queue_and_read_on_the_exchange(
    alice: pika.BlockingConnection,
) -> None:
    allowed(alice, lambda ch: ch.queue_declare("alice-bound", auto_delete=True))
    text = refused(alice, lambda ch: ch.queue_bind("private-q", "shared-x"))
    assert text == denial("queue", "private-q")
    text = refused(alice, lambda ch: ch.queue_bind("alice-bound", "private-x"))
    assert text == denial("exchange", "private-x")
    channel = alice.channel()
    channel.queue_declare("alice-bound2", exclusive=True)
    channel.queue_bind("alice-bound2", "shared-x")
    channel.queue_unbind("alice-bound2", "shared-x")
    channel.close()


def test_exchange_bind_needs_write_on_destination_and_read_on_source(
    alice: pika.BlockingConnection,
) -> None:
    text = refused(alice, lambda ch: ch.exchange_bind("private-x", "shared-x"))
    assert text == denial("exchange", "private-x")


def test_user_id_must_be_the_authenticated_user(alice: pika.BlockingConnection) -> None:
    text = refused(
        alice, publisher("", "alice-none", pika.BasicProperties(user_id="guest")), code=406
    )
    assert text == (
        "PRECONDITION_FAILED - user_id property set to 'guest' but authenticated user was 'alice'"
    )

    allowed(alice, publisher("", "alice-none", pika.BasicProperties(user_id="alice")))


# -- read --------------------------------------------------------------------------------------
def test_consume_get_and_purge_need_read(alice: pika.BlockingConnection) -> None:
    assert refused(alice, lambda ch: ch.basic_consume("private-q", lambda *a: None)) == denial(
        "queue", "private-q"
    )
    assert refused(alice, lambda ch: ch.basic_get("private-q")) == denial("queue", "private-q")
    assert refused(alice, lambda ch: ch.queue_purge("private-q")) == denial("queue", "private-q")
    allowed(alice, lambda ch: ch.queue_purge("shared-q"))
    allowed(alice, lambda ch: ch.basic_get("shared-q", auto_ack=True))


def test_a_refusal_on_one_channel_leaves_the_others_working(
    alice: pika.BlockingConnection,
) -> None:
    working = alice.channel()
    working.queue_declare("alice-keep", auto_delete=True)
    refused(alice, lambda ch: ch.queue_declare("private-q"))
    working.basic_publish("", "alice-keep", b"still here")
    _m, _p, body = working.basic_get("alice-keep", auto_ack=True)
    assert body == b"still here"


# -- global connection limit -----------------------------------------------------------------
def test_node_connection_limit_is_530(start_server: StartServer) -> None:
    with start_server(connection_max=2) as srv:
        first = connect(srv, "guest", "guest")
        second = connect(srv, "guest", "guest")
        try:
            with RawClient.connect(srv.port) as client:
                client.start()
                client.tune()
                client.send_method(0, commands.Connection.Open(virtual_host="/"))
                close = client.expect_connection_close(530, answer=False)
                assert close.reply_text == (
                    "NOT_ALLOWED - connection refused: node connection limit (2) is reached"
                )
        finally:
            first.close()
        connect(srv, "guest", "guest").close()
        second.close()


def test_definitions_topology_was_imported_as_durable(server: Server | NodeUnderTest) -> None:
    conn = connect(server, "guest", "guest")
    try:
        channel = conn.channel()
        for name in ("private-q", "shared-q"):
            channel.queue_declare(name, durable=True)  # equivalent: no error
        channel.exchange_declare("shared-x", "fanout", durable=True)
        text = refused(conn, lambda ch: ch.queue_declare("shared-q", durable=False), 406)
        assert "inequivalent arg 'durable' for queue 'shared-q'" in text
        text = refused(
            conn, lambda ch: ch.exchange_declare("shared-x", "direct", durable=True), 406
        )
        assert "inequivalent arg 'type' for exchange 'shared-x'" in text
        channel.confirm_delivery()
        channel.basic_publish("shared-x", "", b"bound")  # the imported binding routes
        assert channel.basic_get("shared-q", auto_ack=True)[2] == b"bound"
    finally:
        conn.close()
