"""Flow control pauses a flooding publisher only briefly: a stuck consumer cannot freeze it."""

from __future__ import annotations

import pika

from amqpd.model.enqueue import FLOW_BACKLOG
from amqpd.shell.server import Server


def test_publisher_completes_while_the_only_consumer_is_stuck(server: Server) -> None:
    params = pika.ConnectionParameters("127.0.0.1", server.port)
    consumer_conn = pika.BlockingConnection(params)
    publisher_conn = pika.BlockingConnection(params)
    try:
        consumer = consumer_conn.channel()
        consumer.queue_declare("flooded")
        consumer.basic_qos(prefetch_count=1)
        consumer.basic_consume("flooded", lambda *_args: None)  # never acks: stuck
        consumer_conn.process_data_events(time_limit=0)
        publisher = publisher_conn.channel()
        publisher.confirm_delivery()  # the last confirm proves everything was accepted
        count = 3 * FLOW_BACKLOG
        for n in range(count - 1):
            publisher.basic_publish("", "flooded", b"%d" % n, mandatory=False)
        publisher.basic_publish("", "flooded", b"last")
        ready = publisher.queue_declare("flooded", passive=True).method.message_count
        assert ready == count - 1  # one delivered to the stuck consumer
    finally:
        publisher_conn.close()
        consumer_conn.close()
