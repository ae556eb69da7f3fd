"""ActiveMQ's failover URL and reconnect schedule (interop.jms.failover): pure, no broker."""

from __future__ import annotations

from itertools import islice

import pytest

from interop.jms import ConfigurationError, ConnectionFactory
from interop.jms.failover import FailoverPolicy, parse_failover

A = "amqp://guest:guest@a:5672/%2F"
B = "amqp://guest:guest@b:5673/%2F"


def test_defaults_are_activemqs() -> None:
    policy, rest = parse_failover(f"failover:({A},{B})")
    assert policy.uris == (A, B) and rest == ""
    assert policy.randomize is True
    assert policy.initial_reconnect_delay == 0.01
    assert policy.max_reconnect_delay == 30.0
    assert policy.use_exponential_backoff is True
    assert policy.reconnect_delay_exponent == 2.0
    assert policy.passes(startup=False) is None and policy.passes(startup=True) is None
    assert policy.timeout is None and policy.priority_backup is False


def test_options_in_milliseconds_and_jms_keys_left_over() -> None:
    policy, rest = parse_failover(
        f"failover:({A},{B})?randomize=false&initialReconnectDelay=100&maxReconnectDelay=2000"
        "&useExponentialBackOff=false&maxReconnectAttempts=3&startupMaxReconnectAttempts=0"
        "&timeout=1500&priorityBackup=true&jms.prefetchPolicy.all=10&reconnectDelayExponent=3"
    )
    assert policy.randomize is False
    assert policy.initial_reconnect_delay == 0.1 and policy.max_reconnect_delay == 2.0
    assert policy.use_exponential_backoff is False and policy.reconnect_delay_exponent == 3
    assert policy.passes(startup=False) == 3
    assert policy.passes(startup=True) == 1  # 0: connect once, no retry
    assert policy.timeout == 1.5 and policy.priority_backup is True
    assert rest == "jms.prefetchPolicy.all=10"


def test_unparenthesised_list_and_negative_timeout() -> None:
    policy, _rest = parse_failover(f"failover:{A},{B}")
    assert policy.uris == (A, B)
    assert parse_failover(f"failover:({A})?timeout=-1")[0].timeout is None


def test_delays_back_off_exponentially_up_to_the_cap() -> None:
    policy = FailoverPolicy(uris=(A,), initial_reconnect_delay=0.01, max_reconnect_delay=0.05)
    assert list(islice(policy.delays(), 5)) == [0.01, 0.02, 0.04, 0.05, 0.05]
    flat = FailoverPolicy(uris=(A,), initial_reconnect_delay=0.2, use_exponential_backoff=False)
    assert list(islice(flat.delays(), 3)) == [0.2, 0.2, 0.2]


def test_order_puts_the_lost_broker_last_and_honours_priority() -> None:
    in_order = FailoverPolicy(uris=(A, B, "amqp://c"), randomize=False)
    assert in_order.order(None) == [0, 1, 2]
    assert in_order.order(0) == [1, 2, 0]
    shuffled = FailoverPolicy(uris=(A, B, "amqp://c"))
    assert shuffled.order(1, shuffle=lambda items: items.reverse()) == [2, 0, 1]
    primary = FailoverPolicy(uris=(A, B), priority_backup=True)
    assert primary.order(0, shuffle=lambda items: items.reverse()) == [0, 1]


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (f"failover:({A},{B})?randomise=false", "did you mean randomize"),
        (f"failover:({A})?trackMessages=true", "not supported"),
        ("failover:(tcp://localhost:61616)", "use amqp://"),
        (f"failover:({A}", "unbalanced"),
        (f"failover:({A})?maxReconnectAttempts=x", "expected a number"),
        (f"failover:({A})?maxReconnectAttempts=-2", "must be -1"),
        (f"failover:({A})?randomize=yes", "expected true or false"),
        (f"failover:({A})?timeout=1&timeout=2", "given twice"),
        ("failover:()", "at least one broker"),
    ],
)
def test_bad_failover_urls(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        parse_failover(url)


def test_factory_reads_failover_urls() -> None:
    factory = ConnectionFactory.from_url(
        f"failover:({A},{B})?randomize=false&jms.clientID=me&jms.prefetchPolicy.all=7"
    )
    assert factory.failover is not None and factory.failover.randomize is False
    assert factory.options.client_id == "me"
    assert factory.options.prefetch_policy.queue_prefetch == 7
    assert [p.host for p in factory._endpoints] == ["a", "b"]
    plain = ConnectionFactory(f"failover:({A},{B})?maxReconnectAttempts=2")
    assert plain.failover is not None and plain.failover.passes(startup=False) == 2
    with pytest.raises(ConfigurationError, match="from_url"):
        ConnectionFactory(f"failover:({A})?jms.clientID=me")


def test_logged_urls_hide_the_password() -> None:
    from interop.jms.reconnect import redacted

    assert redacted("amqp://guest:secret@h:5672/%2F") == "amqp://guest:***@h:5672/%2F"
    assert redacted("amqp://h:5672/") == "amqp://h:5672/"
