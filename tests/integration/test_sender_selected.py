"""Sender-selected distribution (CC / BCC headers) and alternate exchanges together with the
other extensions (dead-lettering, TTL), as RabbitMQ 3.x routes them (checked against 3.10)."""

from __future__ import annotations

from collections.abc import Iterator

import pika
import pika.exceptions
import pytest

from tests.conftest import node_under_test
from tests.integration.ext_support import connect, next_message


@pytest.fixture
def conn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[pika.BlockingConnection]:
    with node_under_test(tmp_path_factory, tick_interval=0.1) as server:
        connection = connect(server.port)
        yield connection
        if connection.is_open:
            connection.close()


def test_cc_and_bcc_add_routing_keys_and_bcc_is_not_delivered(
    conn: pika.BlockingConnection,
) -> None:
    ch = conn.channel()
    ch.exchange_declare("x", "direct")
    for queue in ("main", "copy", "blind", "both", "number"):
        ch.queue_declare(queue)
        ch.queue_bind(queue, "x", queue)
    ch.queue_bind("both", "x", "main")  # reachable by two of the keys: still one copy
    headers = {"CC": ["copy", "both", 5], "BCC": ["blind"], "app": "v"}
    ch.basic_publish("x", "main", b"m", pika.BasicProperties(headers=headers))

    for queue in ("main", "copy", "blind", "both"):
        method, props, body = ch.basic_get(queue, auto_ack=True)
        assert (body, method.routing_key, method.exchange) == (b"m", "main", "x")
        assert props.headers == {"CC": ["copy", "both", 5], "app": "v"}  # BCC removed
    for queue in ("main", "copy", "blind", "both", "number"):  # 5 is no longstr: ignored
        assert ch.queue_declare(queue, passive=True).method.message_count == 0


@pytest.mark.parametrize(
    ("headers", "type_name"),
    [
        ({"CC": "copy"}, '"CC",longstr'),
        ({"CC": 5}, '"CC",signedint'),
        ({"BCC": "b"}, '"BCC",longstr'),
    ],
)
@pytest.mark.parametrize("mode", ["plain", "confirm", "tx"])
def test_a_cc_or_bcc_that_is_not_an_array_is_refused_at_publish(
    conn: pika.BlockingConnection, headers: dict[str, object], type_name: str, mode: str
) -> None:
    """RabbitMQ 3.10: 406 "invalid message: {unacceptable_type_in_header,"CC",longstr}" on
    the publish itself (so a transaction never gets to commit it), the connection stays."""
    ch = conn.channel()
    ch.queue_declare("main")
    if mode == "confirm":
        ch.confirm_delivery()
    elif mode == "tx":
        ch.tx_select()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        ch.basic_publish("", "main", b"m", pika.BasicProperties(headers=headers))
        if mode == "tx":
            ch.tx_commit()
        else:
            ch.queue_declare("main", passive=True)
    assert refused.value.reply_code == 406
    assert refused.value.reply_text == (
        f"PRECONDITION_FAILED - invalid message: {{unacceptable_type_in_header,{type_name}}}"
    )
    ch = conn.channel()
    assert ch.queue_declare("main", passive=True).method.message_count == 0


def test_alternate_exchange_takes_unroutable_messages_mandatory_is_not_returned(
    conn: pika.BlockingConnection,
) -> None:
    ch = conn.channel()
    ch.exchange_declare("ae", "fanout")
    ch.queue_declare("unrouted")
    ch.queue_bind("unrouted", "ae")
    ch.exchange_declare("orders", "direct", arguments={"alternate-exchange": "ae"})
    ch.queue_declare("known")
    ch.queue_bind("known", "orders", "known")
    ch.confirm_delivery()
    ch.basic_publish("orders", "unknown", b"to-ae", mandatory=True)  # no UnroutableError
    ch.basic_publish("orders", "known", b"routed", mandatory=True)
    ch.basic_publish(
        "orders", "unknown", b"cc-saves-it", pika.BasicProperties(headers={"CC": ["known"]})
    )
    assert ch.basic_get("unrouted", auto_ack=True)[2] == b"to-ae"
    assert ch.basic_get("unrouted")[0] is None  # the CC key routed the third one
    assert [ch.basic_get("known", auto_ack=True)[2] for _ in range(2)] == [
        b"routed",
        b"cc-saves-it",
    ]


def test_dead_letter_exchange_falls_back_to_its_alternate_exchange(
    conn: pika.BlockingConnection,
) -> None:
    ch = conn.channel()
    ch.exchange_declare("dl-ae", "fanout")
    ch.queue_declare("dl-unrouted")
    ch.queue_bind("dl-unrouted", "dl-ae")
    ch.exchange_declare("dlx", "direct", arguments={"alternate-exchange": "dl-ae"})
    ch.queue_declare("src", arguments={"x-dead-letter-exchange": "dlx", "x-message-ttl": 100})
    ch.basic_publish("", "src", b"expires")

    method, props, body = next_message(conn, "dl-unrouted")
    assert (body, method.exchange, method.routing_key) == (b"expires", "dlx", "src")
    death = props.headers["x-death"][0]
    assert (death["reason"], death["queue"], death["exchange"]) == ("expired", "src", "")
