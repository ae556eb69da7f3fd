"""What a federated queue's link writes into the messages it moves (RabbitMQ's
rabbit_federation_queue_link:update_headers), and its URI defaults."""

from __future__ import annotations

from amqpd.shell.links.federated_queue import received_from_headers, with_default_vhost

A = {"uri": "amqp://a:5672/%2F", "queue": "q"}
B = {"uri": "amqp://b:5672/%2F", "queue": "q"}


def test_the_first_move_records_the_origin_and_one_visit() -> None:
    headers = received_from_headers({"app": 1}, A, False, "orders", "eu.new")
    assert headers == {
        "app": 1,
        "x-original-exchange": "orders",
        "x-original-routing-key": "eu.new",
        "x-received-from": [{**A, "redelivered": False, "visit-count": 1}],
    }


def test_a_message_coming_back_raises_its_visit_count_instead_of_growing() -> None:
    """A -> B -> A -> B: each link keeps one entry, the newest first, with its count."""
    headers = received_from_headers(None, A, False, "", "q")
    headers = received_from_headers(headers, B, True, "", "q")
    headers = received_from_headers(headers, A, False, "", "q")
    headers = received_from_headers(headers, B, False, "", "q")
    assert headers["x-received-from"] == [
        {**B, "redelivered": False, "visit-count": 2},
        {**A, "redelivered": False, "visit-count": 2},
    ]
    # the origin is the first move's: later moves come from the default exchange
    assert headers["x-original-routing-key"] == "q"
    assert headers["x-original-exchange"] == ""


def test_cc_is_renamed_so_the_copy_is_not_routed_again() -> None:
    headers = received_from_headers({"CC": ["other"]}, A, False, "", "q")
    assert "CC" not in headers
    assert headers["x-original-cc"] == ["other"]


def test_a_received_from_header_set_by_a_client_is_not_trusted() -> None:
    headers = received_from_headers({"x-received-from": "forged"}, A, True, "x", "k")
    assert headers["x-received-from"] == [{**A, "redelivered": True, "visit-count": 1}]
    assert headers["x-original-exchange"] == "x"


def test_an_upstream_uri_without_a_vhost_means_the_downstream_vhost() -> None:
    assert with_default_vhost("amqp://h:1", "prod/eu") == "amqp://h:1/prod%2Feu"
    assert with_default_vhost("amqp://", "/") == "amqp:///%2F"
    assert with_default_vhost("amqp://h/%2F", "other") == "amqp://h/%2F"
    assert with_default_vhost("amqp://h/", "other") == "amqp://h/"
    assert with_default_vhost("amqps://h?heartbeat=5", "v") == "amqps://h/v?heartbeat=5"
