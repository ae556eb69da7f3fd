"""Replies byte for byte as RabbitMQ 3.10 sends them, for every name the broker accepts.

Issue 21 items 1 and 2: Channel.OpenOk's reserved ``channel-id`` is an empty longstr (pamqp's
default "0" desynchronises @cloudamqp/amqp-client), and a name outside pamqp's validation
pattern (``café``, ``orders!``, ``日本語``) must appear in Declare-Ok, Consume-Ok, Return,
Cancel ... exactly as the client sent it: RabbitMQ accepts any UTF-8 shortstr.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import body, commands, frame, header
from pamqp.base import Frame as Method

from amqpd.model.broker import Broker
from amqpd.wire import codec
from amqpd.wire.errors import AMQPError, shortstr_text
from tests.unit.engine_driver import Client
from tests.unit.protocol_support import close_args, connect, deliveries, split

NAMES = settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])


def raw_replies(client: Client) -> list[tuple[int, int, bytes]]:
    """(frame type, channel, payload) of everything the engine sent, not decoded."""
    data = client.conn.data_to_send()
    reader = codec.FrameReader(1 << 20)
    reader.feed(data)
    out = []
    while (item := reader.next_frame()) is not None:
        out.append(item)
    return out


def loose(cls: type[Method], **values: Any) -> Method:
    """A method as a client sends it: pamqp refuses names outside the spec grammar (in its
    constructors and encoder), the wire does not. Unset arguments get pamqp's defaults."""
    subclass = type(cls.__name__, (cls,), {"validate": lambda self: None})
    method: Method = subclass(**values)
    return method


def send(client: Client, channel: int, *methods: Method) -> None:
    client.feed(b"".join(frame.marshal(m, channel) for m in methods))


# ---------------------------------------------------------------------------------------------
# Reserved fields: what RabbitMQ puts there, not pamqp's defaults
# ---------------------------------------------------------------------------------------------
def test_channel_open_ok_has_an_empty_reserved_longstr() -> None:
    client = Client(Broker())
    client.handshake()
    client.send(7, commands.Channel.Open())
    # class 20, method 11, channel-id = longstr of length 0 (rabbit_channel: #'channel.open_ok'{})
    assert raw_replies(client) == [(codec.FRAME_METHOD, 7, b"\x00\x14\x00\x0b\x00\x00\x00\x00")]


def test_connection_open_ok_and_get_empty_have_empty_reserved_shortstrs() -> None:
    client = Client(Broker())
    client.feed(codec.PROTOCOL_HEADER)
    client.send(
        0,
        commands.Connection.StartOk(
            client_properties={}, mechanism="PLAIN", response="\0guest\0guest"
        ),
    )
    client.received()
    client.send(0, commands.Connection.TuneOk(channel_max=0, frame_max=131072, heartbeat=0))
    client.send(0, commands.Connection.Open(virtual_host="/"))
    assert raw_replies(client) == [(codec.FRAME_METHOD, 0, b"\x00\x0a\x00\x29\x00")]
    client.open_channel(1)
    client.send(1, commands.Queue.Declare(queue="q"))
    client.received()
    client.send(1, commands.Basic.Get(queue="q"))
    assert raw_replies(client) == [(codec.FRAME_METHOD, 1, b"\x00\x3c\x00\x48\x00")]


def test_every_reply_method_encodes_as_pamqp_does_for_valid_values() -> None:
    """The unvalidated encoder is pamqp's encoding (bits packed the same way) for values
    pamqp accepts, so nothing but validation changed."""
    methods: list[Method] = [
        commands.Connection.Tune(channel_max=2047, frame_max=131072, heartbeat=60),
        commands.Connection.Close(reply_code=320, reply_text="x", class_id=0, method_id=0),
        commands.Channel.Close(reply_code=404, reply_text="NOT_FOUND", class_id=50, method_id=10),
        commands.Channel.FlowOk(active=True),
        commands.Queue.DeclareOk(queue="q", message_count=3, consumer_count=1),
        commands.Queue.DeleteOk(message_count=2),
        commands.Basic.ConsumeOk(consumer_tag="ctag"),
        commands.Basic.Cancel(consumer_tag="ctag", nowait=True),
        commands.Basic.Return(reply_code=312, reply_text="NO_ROUTE", exchange="", routing_key="k"),
        commands.Basic.Deliver("t", 5, True, "ex", "rk"),
        commands.Exchange.Declare(exchange="e", passive=True, durable=False, internal=True),
    ]
    for method in methods:
        assert codec.encode_method(3, method) == frame.marshal(method, 3), method


# ---------------------------------------------------------------------------------------------
# Any UTF-8 name, in every reply that carries one
# ---------------------------------------------------------------------------------------------
def utf8_name(text: str) -> str:
    """``text`` cut to at most 255 UTF-8 bytes at a character boundary."""
    return text.encode()[:255].decode(errors="ignore")


names = (
    st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=255)
    .map(utf8_name)
    .filter(lambda name: bool(name) and not name.startswith("amq."))
)
EXAMPLES = ["café", "orders!", "a*b", "q?x", "日本語", "x" * 255, "é" * 127]


def check_names_round_trip(name: str) -> None:
    broker = Broker()
    client = connect(broker)
    # queue.declare -> Declare-Ok names it; redeclare works too (the issue: every later
    # declare failed with 541 once a durable queue with such a name existed)
    for _ in range(2):
        send(client, 1, loose(commands.Queue.Declare, queue=name, durable=True))
        [(_channel, ok)] = client.received()
        assert isinstance(ok, commands.Queue.DeclareOk) and ok.queue == name
    # exchange.declare and a binding with the name as routing key
    send(
        client,
        1,
        loose(commands.Exchange.Declare, exchange=name, exchange_type="direct"),
        loose(commands.Queue.Bind, queue=name, exchange=name, routing_key=name),
    )
    assert [type(m) for _c, m in client.received()] == [
        commands.Exchange.DeclareOk,
        commands.Queue.BindOk,
    ]
    # consume with the name as consumer tag and cancel: Consume-Ok and Cancel-Ok name it
    send(client, 1, loose(commands.Basic.Consume, queue=name, consumer_tag=name))
    send(client, 1, loose(commands.Basic.Cancel, consumer_tag=name))
    assert [(type(m), m.consumer_tag) for _c, m in client.received()] == [
        (commands.Basic.ConsumeOk, name),
        (commands.Basic.CancelOk, name),
    ]
    # consume again (the tag is free); a delivery through the named exchange
    send(client, 1, loose(commands.Basic.Consume, queue=name, consumer_tag=name, no_ack=True))
    [(_c, consume_ok)] = client.received()
    assert consume_ok.consumer_tag == name
    client.feed(publish_bytes(1, name, name, mandatory=False))
    [delivery] = deliveries(client.received())
    assert (delivery.method.exchange, delivery.method.routing_key) == (name, name)
    assert delivery.method.consumer_tag == name
    # an unroutable mandatory publish comes back as Basic.Return with both names
    client.feed(publish_bytes(1, name, "", mandatory=True))  # only ``name`` is bound
    messages, others = split(client.received())
    assert others == [] and len(messages) == 1
    returned = messages[0].method
    assert isinstance(returned, commands.Basic.Return) and returned.exchange == name
    # the consumer is cancelled by the broker when its queue goes (Basic.Cancel names it)
    other = connect(broker)
    send(other, 1, loose(commands.Queue.Delete, queue=name))
    assert [type(m) for _c, m in other.received()] == [commands.Queue.DeleteOk]
    [(_c, cancel)] = client.received()
    assert isinstance(cancel, commands.Basic.Cancel) and cancel.consumer_tag == name
    # a 404 naming it still encodes (reply text cut to 255 bytes as RabbitMQ does)
    send(client, 1, loose(commands.Queue.Declare, queue=name, passive=True))
    [(_c, close)] = client.received()
    code, text, class_id, method_id = close_args(close)
    assert (code, class_id, method_id) == (404, 50, 10)
    assert text == shortstr_text(f"NOT_FOUND - no queue '{name}' in vhost '/'")


def publish_bytes(channel: int, exchange: str, routing_key: str, mandatory: bool) -> bytes:
    """basic.publish with any names, a content header and a 4-byte body."""
    publish = loose(
        commands.Basic.Publish, exchange=exchange, routing_key=routing_key, mandatory=mandatory
    )
    content = header.ContentHeader(0, 4, commands.Basic.Properties())
    return b"".join(
        frame.marshal(f, channel) for f in (publish, content, body.ContentBody(b"body"))
    )


def test_names_outside_pamqps_pattern_from_the_issue() -> None:
    for name in EXAMPLES:
        check_names_round_trip(name)


@NAMES
@given(names)
def test_any_utf8_name_up_to_255_bytes_encodes_in_every_reply(name: str) -> None:
    check_names_round_trip(name)


def test_reply_text_is_cut_to_a_shortstr_like_rabbitmq() -> None:
    assert shortstr_text("abc") == "abc"
    long = "é" * 200  # 400 bytes
    cut = shortstr_text(long)
    assert cut.endswith("...") and len(cut.encode()) <= 255
    assert cut == "é" * 126 + "..."
    error = AMQPError(404, "no queue '" + "日" * 100 + "' in vhost '/'")
    assert len(error.reply_text.encode()) <= 255
    assert error.reply_text.startswith("NOT_FOUND - no queue '日")
