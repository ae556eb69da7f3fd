"""interop.jms options: ActiveMQ URL keys (ms), keyword arguments (s), policies, destinations."""

from __future__ import annotations

import logging

import pytest

from interop.jms import (
    ConfigurationError,
    ConnectionFactory,
    IndividualDeadLetterStrategy,
    InvalidDestinationException,
    PrefetchPolicy,
    Queue,
    RedeliveryPolicy,
    SharedDeadLetterStrategy,
    TemporaryQueue,
    Topic,
)
from interop.jms.destinations import (
    ConsumerOptions,
    binding_key,
    destination_from_address,
    is_wildcard,
)
from interop.jms.options import ConnectionOptions, parse_url

BASE = "amqp://guest:guest@127.0.0.1:5672/%2F"


def test_issue_example_url() -> None:
    url = (
        f"{BASE}?jms.optimizeAcknowledge=true&jms.optimizeAcknowledgeTimeOut=300"
        "&jms.redeliveryPolicy.maximumRedeliveries=6&jms.prefetchPolicy.queuePrefetch=10"
    )
    factory = ConnectionFactory.from_url(url)
    options = factory.options
    assert factory.url == BASE
    assert options.optimize_acknowledge is True
    assert options.optimize_acknowledge_timeout == pytest.approx(0.3)
    assert options.redelivery_policy.maximum_redeliveries == 6
    assert options.prefetch_policy.queue_prefetch == 10
    assert options.prefetch_policy.topic_prefetch == 32767  # untouched defaults


def test_activemq_defaults() -> None:
    options = ConnectionFactory().options
    prefetch, redelivery = options.prefetch_policy, options.redelivery_policy
    assert (prefetch.queue_prefetch, prefetch.queue_browser_prefetch) == (1000, 500)
    assert (prefetch.topic_prefetch, prefetch.durable_topic_prefetch) == (32767, 100)
    assert prefetch.optimize_durable_topic_prefetch == 1000
    assert redelivery.maximum_redeliveries == 6
    assert (redelivery.initial_redelivery_delay, redelivery.redelivery_delay) == (1.0, 1.0)
    assert (redelivery.use_exponential_backoff, redelivery.backoff_multiplier) == (False, 5.0)
    assert redelivery.maximum_redelivery_delay is None
    assert (redelivery.use_collision_avoidance, redelivery.collision_avoidance_percent) == (
        False,
        15.0,
    )
    assert redelivery.non_blocking_redelivery is False
    assert options.optimize_acknowledge is False
    assert options.optimize_acknowledge_timeout == pytest.approx(0.3)
    assert options.optimized_ack_scheduled_ack_interval == 0
    assert options.dead_letter_strategy == SharedDeadLetterStrategy("ActiveMQ.DLQ")
    assert options.topic_exchange == "amq.topic"


def test_url_milliseconds_and_keywords_seconds_agree() -> None:
    from_url = ConnectionFactory.from_url(
        f"{BASE}?jms.redeliveryPolicy.initialRedeliveryDelay=250"
        "&jms.redeliveryPolicy.redeliveryDelay=1500&jms.redeliveryPolicy.maximumRedeliveryDelay=-1"
        "&jms.redeliveryPolicy.useExponentialBackOff=TRUE&jms.redeliveryPolicy.backOffMultiplier=2"
        "&jms.nonBlockingRedelivery=true&jms.optimizedAckScheduledAckInterval=2000"
    ).options
    from_kwargs = ConnectionFactory(
        BASE,
        redelivery_policy=RedeliveryPolicy(
            initial_redelivery_delay=0.25,
            redelivery_delay=1.5,
            use_exponential_backoff=True,
            backoff_multiplier=2,
            non_blocking_redelivery=True,
        ),
        optimized_ack_scheduled_ack_interval=2.0,
    ).options
    assert from_url == from_kwargs


def test_prefetch_all_then_specific_key() -> None:
    _url, options = parse_url(
        f"{BASE}?jms.prefetchPolicy.all=50&jms.prefetchPolicy.durableTopicPrefetch=7"
    )
    policy = options["prefetch_policy"]
    assert (policy.queue_prefetch, policy.topic_prefetch, policy.durable_topic_prefetch) == (
        50,
        50,
        7,
    )


def test_pika_keys_pass_through_and_jms_keys_are_removed() -> None:
    factory = ConnectionFactory.from_url(f"{BASE}?heartbeat=7&jms.clientID=me")
    assert factory.url == f"{BASE}?heartbeat=7"
    assert factory.options.client_id == "me"
    assert factory._endpoints[0].heartbeat == 7


@pytest.mark.parametrize(
    ("query", "match"),
    [
        ("jms.optimizeAck=true", r"jms\.optimizeAck \(did you mean jms\.optimizeAcknowledge\?\)"),
        ("jms.prefetchPolicy.queuePrefech=1", "couldn't be set"),
        ("jms.redeliveryPolicy.maxRedeliveries=1", "couldn't be set"),
        ("jms.optimizeAcknowledge=yes", "expected true or false"),
        ("jms.prefetchPolicy.all=ten", "expected an integer"),
        ("jms.optimizeAcknowledgeTimeOut=-5", "must be >= 0"),
        ("jms.clientID=a&jms.clientID=b", "given twice"),
        ("jms.deadLetterStrategy=per-queue", "shared, individual or none"),
        ("jms.redeliveryPolicy.maximumRedeliveries=-2", ">= -1"),
        ("nosuchpikakey=1", "Unknown URL parameter"),
    ],
)
def test_bad_url_options_are_rejected(query: str, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        ConnectionFactory.from_url(f"{BASE}?{query}")


def test_url_scheme_and_constructor_rules() -> None:
    with pytest.raises(ConfigurationError, match="ActiveMQ transport URLs"):
        ConnectionFactory.from_url("tcp://localhost:61616?jms.optimizeAcknowledge=true")
    with pytest.raises(ConfigurationError, match="from_url"):
        ConnectionFactory(f"{BASE}?jms.optimizeAcknowledge=true")
    with pytest.raises(ConfigurationError, match="given in the URL and as keywords"):
        ConnectionFactory.from_url(f"{BASE}?jms.clientID=a", client_id="b")
    with pytest.raises(TypeError):
        ConnectionFactory(BASE, optimise_acknowledge=True)  # type: ignore[call-arg]
    with pytest.raises(ConfigurationError):
        ConnectionOptions(optimize_acknowledge_timeout=-1)


def test_dead_letter_strategy_from_url() -> None:
    individual = ConnectionFactory.from_url(f"{BASE}?jms.deadLetterStrategy=individual").options
    assert isinstance(individual.dead_letter_strategy, IndividualDeadLetterStrategy)
    none = ConnectionFactory.from_url(f"{BASE}?jms.deadLetterStrategy=none").options
    assert none.dead_letter_strategy is None
    assert ConnectionFactory(BASE, dead_letter_strategy=None).options.dead_letter_strategy is None


def test_prefetch_is_clamped_to_32767_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="interop.jms.policies"):
        policy = PrefetchPolicy(queue_prefetch=100_000)
    assert policy.queue_prefetch == 32767
    assert "above the maximum" in caplog.text
    policy.set_all(5)
    assert policy.topic_prefetch == 5
    with pytest.raises(ConfigurationError):
        PrefetchPolicy(queue_prefetch=-1)


# -- redelivery policy -----------------------------------------------------------------------------


def test_maximum_redeliveries_6_means_7_deliveries() -> None:
    policy = RedeliveryPolicy()
    deliveries = 1
    counter = 0
    while True:  # each failure: counter + 1, poison when it exceeds the maximum
        counter += 1
        if policy.exceeded(counter):
            break
        deliveries += 1
    assert deliveries == 7
    assert not RedeliveryPolicy(maximum_redeliveries=-1).exceeded(10**6)
    assert RedeliveryPolicy(maximum_redeliveries=0).exceeded(1)


def test_redelivery_delays() -> None:
    plain = RedeliveryPolicy(initial_redelivery_delay=0.5, redelivery_delay=2.0)
    assert [plain.delay(c) for c in (0, 1, 2, 3)] == [0.0, 0.5, 2.0, 2.0]
    backoff = RedeliveryPolicy(use_exponential_backoff=True)
    assert [backoff.delay(c) for c in (1, 2, 3, 4)] == [1.0, 5.0, 25.0, 125.0]
    capped = RedeliveryPolicy(use_exponential_backoff=True, maximum_redelivery_delay=10.0)
    assert [capped.delay(c) for c in (1, 2, 3, 4)] == [1.0, 5.0, 10.0, 10.0]
    no_initial = RedeliveryPolicy(
        initial_redelivery_delay=0, redelivery_delay=1, use_exponential_backoff=True
    )
    assert [no_initial.delay(c) for c in (1, 2, 3)] == [0.0, 1.0, 5.0]  # ActiveMQ's rule
    jitter = RedeliveryPolicy(use_collision_avoidance=True)
    assert jitter.delay(1, rand=lambda: 0.0) == pytest.approx(0.85)
    assert jitter.delay(1, rand=lambda: 1.0) == pytest.approx(1.15)


def test_dead_letter_queue_names() -> None:
    shared = SharedDeadLetterStrategy()
    assert shared.queue_name("orders", False) == "ActiveMQ.DLQ"
    assert shared.is_dead_letter_queue("ActiveMQ.DLQ")
    individual = IndividualDeadLetterStrategy()
    assert individual.queue_name("orders", False) == "ActiveMQ.DLQ.Queue.orders"
    assert individual.queue_name("prices.>", True) == "ActiveMQ.DLQ.Topic.prices.>"
    assert individual.is_dead_letter_queue("ActiveMQ.DLQ.Queue.orders")
    assert not individual.is_dead_letter_queue("orders")
    assert shared.process_non_persistent is False and shared.process_expired is True


# -- destinations ------------------------------------------------------------------------------


def test_destination_options() -> None:
    queue = Queue("orders?consumer.prefetchSize=10&consumer.exclusive=true&consumer.priority=3")
    assert queue.name == "orders" and queue == Queue("orders")
    destinations: set[object] = {queue}
    assert Topic("orders") not in destinations
    options = ConsumerOptions.parse(queue)
    assert (options.prefetch_size, options.exclusive, options.priority) == (10, True, 3)
    topic = Topic("a.b?consumer.selector=x%20%3D%20'y'&consumer.noLocal=true")
    parsed = ConsumerOptions.parse(topic)
    assert (parsed.selector, parsed.no_local) == ("x = 'y'", True)
    assert ConsumerOptions.parse(Queue("plain")) == ConsumerOptions()


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("q?consumer.prefetchSiz=1", r"unknown destination option\(s\) consumer\.prefetchSiz"),
        ("q?prefetchSize=1", "unknown destination option"),
        ("q?consumer.prefetchSize=many", "expected an integer"),
        ("q?consumer.prefetchSize=-1", ">= 0"),
        ("q?consumer.exclusive=maybe", "true or false"),
        ("q?consumer.retroactive=true", "not supported"),
    ],
)
def test_bad_destination_options_fail_consumer_creation(spec: str, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        ConsumerOptions.parse(Queue(spec))


def test_topic_wildcards_and_addresses() -> None:
    assert binding_key("prices.>") == "prices.#"
    assert binding_key("prices.*.eur") == "prices.*.eur"
    assert binding_key(">") == "#"
    assert is_wildcard("a.*") and is_wildcard("a.>") and not is_wildcard("a.b")
    with pytest.raises(InvalidDestinationException, match="use '>'"):
        binding_key("prices.#")
    assert destination_from_address("topic://a.b") == Topic("a.b")
    assert destination_from_address("orders") == Queue("orders")
    assert isinstance(destination_from_address("amq.gen-xyz"), TemporaryQueue)
    assert destination_from_address(Topic("a.b").address()) == Topic("a.b")
    with pytest.raises(InvalidDestinationException):
        Queue("?consumer.prefetchSize=1")


def test_send_and_ack_options_from_the_url() -> None:
    factory = ConnectionFactory.from_url(
        f"{BASE}?jms.useAsyncSend=true&jms.producerWindowSize=1024&jms.sendAcksAsync=false"
    )
    assert factory.options.use_async_send is True
    assert factory.options.producer_window_size == 1024
    assert factory.options.send_acks_async is False
    defaults = ConnectionFactory(BASE).options
    assert not defaults.use_async_send and defaults.producer_window_size == 0
    assert defaults.send_acks_async
    with pytest.raises(ConfigurationError, match="producer_window_size"):
        ConnectionFactory(BASE, producer_window_size=-1)
