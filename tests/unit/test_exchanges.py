"""Unit and property tests of the pure routing package ``exchanges``."""

from __future__ import annotations

import ast
import datetime
import re
import sys
import time
from collections.abc import Hashable, Mapping
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import exchanges
from exchanges import (
    EXCHANGE_TYPES,
    DirectRouter,
    FanoutRouter,
    HeadersRouter,
    InvalidBinding,
    Router,
    TopicRouter,
    UnknownExchangeType,
    create_router,
)
from exchanges.headers_match import validate_x_match
from exchanges.identity import arguments_key
from exchanges.topic_trie import split_key


def q(name: str) -> tuple[str, str]:
    """Destination the way the broker spells it."""
    return ("queue", name)


# The hashing types route each message to one destination and x-consistent-hash takes only
# weights ("1", "2"...) as binding keys: the generic tests below assume neither, so those types
# have their own tests (tests/unit/test_hash_exchanges.py).
ALL_TYPES = sorted(EXCHANGE_TYPES - {"x-consistent-hash", "x-modulus-hash"})


def has_binding(
    router: Router, destination: Hashable, routing_key: str, arguments: Mapping[str, object]
) -> bool:
    """The identical binding is listed (arguments compared as binding identity does: by
    value, AMQP types kept apart)."""
    wanted = (destination, routing_key, arguments_key(arguments))
    return any((d, k, arguments_key(a)) == wanted for d, k, a in router.bindings())


# --------------------------------------------------------------------------- package


def test_package_uses_only_the_standard_library() -> None:
    package_dir = Path(exchanges.__file__).parent
    modules = sorted(package_dir.glob("*.py"))
    assert len(modules) > 5
    for module in modules:
        source = module.read_text()
        assert "from __future__ import annotations" in source, module.name
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                roots = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, module.name
                roots = [(node.module or "").split(".")[0]]
            else:
                continue
            for root in roots:
                assert root == "exchanges" or root in sys.stdlib_module_names, (
                    module.name,
                    root,
                )


# -------------------------------------------------------------------------- registry


def test_exchange_types() -> None:
    assert (
        frozenset(
            {
                "direct",
                "fanout",
                "topic",
                "headers",
                "x-federation-upstream",
                "x-consistent-hash",
                "x-modulus-hash",
                "x-delayed-message",
            }
        )
        == EXCHANGE_TYPES
    )


@pytest.mark.parametrize("type_name", ALL_TYPES)
def test_create_router(type_name: str) -> None:
    router = create_router(type_name)
    assert isinstance(router, Router)
    assert router.type_name == type_name
    assert router.uses_headers is (type_name in ("headers", "x-federation-upstream"))
    # (x-delayed-message without arguments routes as direct: exchanges/delayed.py)
    assert len(router) == 0
    assert list(router.bindings()) == []
    assert create_router(type_name) is not router


@pytest.mark.parametrize("type_name", ["Direct", "x-random", "", "topic "])
def test_create_router_rejects_unknown_types(type_name: str) -> None:
    with pytest.raises(UnknownExchangeType) as caught:
        create_router(type_name)
    assert isinstance(caught.value, ValueError)
    assert caught.value.type_name == type_name
    assert repr(type_name) in str(caught.value)


# ------------------------------------------------------------ binding bookkeeping


@pytest.mark.parametrize("type_name", ALL_TYPES)
def test_bind_is_idempotent(type_name: str) -> None:
    router = create_router(type_name)
    assert router.bind(q("a"), "k", {}) is True
    assert router.bind(q("a"), "k", {}) is False
    assert len(router) == 1
    assert has_binding(router, q("a"), "k", {})
    assert not has_binding(router, q("a"), "other", {})
    assert not has_binding(router, q("b"), "k", {})


@pytest.mark.parametrize("type_name", ALL_TYPES)
def test_unbind_is_idempotent(type_name: str) -> None:
    router = create_router(type_name)
    assert router.unbind(q("a"), "k", {}) is False
    router.bind(q("a"), "k", {})
    assert router.unbind(q("a"), "k", {"x": 1}) is False
    assert router.unbind(q("a"), "k", {}) is True
    assert router.unbind(q("a"), "k", {}) is False
    assert len(router) == 0
    assert router.route("k", {}) == []


@pytest.mark.parametrize("type_name", ALL_TYPES)
def test_arguments_are_part_of_binding_identity(type_name: str) -> None:
    router = create_router(type_name)
    variants: list[dict[str, object]] = [
        {},
        {"a": 1},
        {"a": 1.0},
        {"a": True},
        {"a": "1"},
        {"a": b"1"},
        {"a": bytearray(b"1")},
        {"a": None},
        {"a": [1, 2]},
        {"a": [2, 1]},
        {"a": {"n": 1}},
        {"a": Decimal("1")},
        {"a": Decimal("1.0")},
    ]
    for args in variants:
        assert router.bind(q("a"), "k", args) is True, args
    assert len(router) == len(variants)
    for args in variants:
        assert router.bind(q("a"), "k", args) is False, args
        assert has_binding(router, q("a"), "k", args), args


@pytest.mark.parametrize("type_name", ALL_TYPES)
def test_unhashable_arguments_compare_by_value(type_name: str) -> None:
    router = create_router(type_name)
    args: dict[str, object] = {"x-a": {"n": [1, {"m": b"z"}], "o": 2}, "x-b": [[1], []]}
    same: dict[str, object] = {"x-b": [[1], []], "x-a": {"o": 2, "n": [1, {"m": b"z"}]}}
    assert router.bind(q("a"), "k", args) is True
    assert router.bind(q("a"), "k", same) is False
    assert has_binding(router, q("a"), "k", same)
    assert router.unbind(q("a"), "k", same) is True
    assert len(router) == 0


@pytest.mark.parametrize("type_name", ALL_TYPES)
def test_arguments_are_copied(type_name: str) -> None:
    router = create_router(type_name)
    nested: list[object] = [1]
    args: dict[str, object] = {"x-a": nested}
    router.bind(q("a"), "k", args)
    nested.append(2)
    args["x-b"] = 3
    assert has_binding(router, q("a"), "k", {"x-a": [1]})
    (binding,) = router.bindings()
    binding[2]["x-a"] = "changed"
    assert list(router.bindings()) == [(q("a"), "k", {"x-a": [1]})]


@pytest.mark.parametrize("type_name", ALL_TYPES)
def test_bindings_lists_in_creation_order(type_name: str) -> None:
    router = create_router(type_name)
    expected = [
        (q("b"), "k2", {}),
        (q("a"), "k1", {"x-q": 1}),
        (q("a"), "k1", {}),
        (q("c"), "", {}),
    ]
    for destination, key, args in expected:
        router.bind(destination, key, args)
    assert list(router.bindings()) == expected
    router.unbind(q("a"), "k1", {"x-q": 1})
    router.bind(q("a"), "k1", {"x-q": 1})
    assert list(router.bindings()) == [expected[0], expected[2], expected[3], expected[1]]


@pytest.mark.parametrize("type_name", ALL_TYPES)
def test_bindings_iteration_tolerates_unbinding(type_name: str) -> None:
    router = create_router(type_name)
    for name in "abc":
        router.bind(q(name), name, {})
    seen = []
    for destination, _key, _args in router.bindings():
        seen.append(destination)
        router.unbind_all(destination)
    assert seen == [q("a"), q("b"), q("c")]
    assert len(router) == 0


@pytest.mark.parametrize("type_name", ALL_TYPES)
def test_unbind_all(type_name: str) -> None:
    router = create_router(type_name)
    router.bind(q("a"), "k1", {})
    router.bind(q("a"), "k1", {"x-y": 1})
    router.bind(q("a"), "k2", {})
    router.bind(q("b"), "k1", {})
    assert router.unbind_all(q("a")) == 3
    assert router.unbind_all(q("a")) == 0
    assert router.unbind_all(q("nobody")) == 0
    assert list(router.bindings()) == [(q("b"), "k1", {})]
    assert router.route("k1", {}) == [q("b")]
    assert router.bind(q("a"), "k1", {}) is True


@pytest.mark.parametrize("type_name", ALL_TYPES)
def test_route_results_are_unique_and_stable(type_name: str) -> None:
    router = create_router(type_name)
    for args in ({}, {"x-1": 1}, {"x-2": 2}):
        router.bind(q("a"), "k", args)
    router.bind(q("b"), "k", {})
    first = router.route("k", {})
    assert first == [q("a"), q("b")]
    snapshot = list(first)
    router.bind(q("c"), "k", {})
    router.unbind_all(q("a"))
    assert first == snapshot, "a returned list must never change afterwards"
    assert router.route("k", {}) == [q("b"), q("c")]


# --------------------------------------------------------------------------- direct


def test_direct_routes_on_exact_key() -> None:
    router = DirectRouter()
    router.bind(q("a"), "orders", {})
    router.bind(q("b"), "Orders", {})
    router.bind(q("c"), "*", {})
    router.bind(q("d"), "", {})
    assert router.route("orders", None) == [q("a")]
    assert router.route("Orders", None) == [q("b")]
    assert router.route("orders.x", None) == []
    assert router.route("anything", None) == []
    assert router.route("*", None) == [q("c")]
    assert router.route("", None) == [q("d")]


def test_direct_order_and_args_only_duplicates() -> None:
    router = DirectRouter()
    router.bind(q("b"), "k", {})
    router.bind(q("a"), "k", {})
    router.bind(q("b"), "k", {"x-other": True})
    assert router.route("k", None) == [q("b"), q("a")]
    router.unbind(q("b"), "k", {})
    assert router.route("k", None) == [q("b"), q("a")]
    router.unbind(q("b"), "k", {"x-other": True})
    assert router.route("k", None) == [q("a")]
    router.unbind(q("a"), "k", {})
    assert router.route("k", None) == []
    assert router._by_key == {}


def test_direct_ignores_headers() -> None:
    router = DirectRouter()
    router.bind(q("a"), "k", {"x-match": "any", "h": 1})
    assert router.route("k", {"h": 2}) == [q("a")]


# --------------------------------------------------------------------------- fanout


def test_fanout_ignores_routing_key() -> None:
    router = FanoutRouter()
    router.bind(q("a"), "", {})
    router.bind(q("b"), "x", {})
    router.bind(q("a"), "y", {})
    for key in ("", "x", "y", "whatever.#"):
        assert router.route(key, None) == [q("a"), q("b")]
    router.unbind(q("a"), "", {})
    assert router.route("", None) == [q("a"), q("b")]
    router.unbind(q("a"), "y", {})
    assert router.route("", None) == [q("b")]


def test_fanout_route_returns_shared_list() -> None:
    router = FanoutRouter()
    router.bind(q("a"), "", {})
    assert router.route("x", None) is router.route("y", None)


# ---------------------------------------------------------------------------- topic

TOPIC_CASES = [
    # (binding key, routing key, matches)
    ("a.b.c", "a.b.c", True),
    ("a.b.c", "a.b", False),
    ("a.b", "a.b.c", False),
    ("a.*.c", "a.b.c", True),
    ("a.*.c", "a.c", False),
    ("a.#.c", "a.c", True),
    ("a.#.c", "a.b.b.b.c", True),
    ("a.#", "a", True),
    ("#.a", "a", True),
    ("#.b.#", "b", True),
    ("a.*.#", "a", False),
    ("a.*.#", "a.b", True),
    ("*.#", "", False),
    ("#.*", "a", True),
    ("#", "", True),
    ("#", "a.b.c", True),
    ("#.#", "", True),
    ("#.#", "a", True),
    ("a.#.#.b", "a.b", True),
    ("#.#.#.a.#.#", "a", True),
    # the empty key has zero words; empty words are still words
    ("", "", True),
    ("", "a", False),
    ("*", "", False),
    ("*", "a", True),
    ("a", "a.", False),
    ("a.", "a.", True),
    ("a.*", "a.", True),
    ("a.#", "a.", True),
    ("*", ".", False),
    ("*.*", ".", True),
    ("#", ".", True),
    ("a..b", "a..b", True),
    ("a..b", "a.b", False),
    ("a.*.b", "a..b", True),
    (".", ".", True),
    (".", "", False),
    (".a", ".a", True),
    ("*.a", ".a", True),
    ("*.*.*", "a..", True),
    # wildcards are ordinary words in routing keys
    ("a.b", "a.*", False),
    ("a.*", "a.*", True),
    ("a.#", "a.#", True),
    ("#", "#", True),
    ("*", "#", True),
    ("a.#.b", "a.#.c", False),
    ("a#", "ab", False),
    ("a*", "ab", False),
    ("a*", "a*", True),
]


@pytest.mark.parametrize(("binding_key", "routing_key", "expected"), TOPIC_CASES)
def test_topic_matching(binding_key: str, routing_key: str, expected: bool) -> None:
    router = TopicRouter()
    router.bind(q("a"), binding_key, {})
    assert router.route(routing_key, None) == ([q("a")] if expected else [])
    assert topic_oracle(binding_key, routing_key) is expected


def test_split_key() -> None:
    assert split_key("") == []
    assert split_key("a") == ["a"]
    assert split_key(".") == ["", ""]
    assert split_key("a..b.") == ["a", "", "b", ""]


def test_topic_orders_by_first_binding_and_dedups() -> None:
    router = TopicRouter()
    router.bind(q("b"), "a.*", {})
    router.bind(q("a"), "#", {})
    router.bind(q("b"), "#.b", {})
    router.bind(q("c"), "a.b", {})
    assert router.route("a.b", None) == [q("b"), q("a"), q("c")]
    router.unbind(q("b"), "a.*", {})
    assert router.route("a.b", None) == [q("a"), q("b"), q("c")]


def test_topic_cache_is_invalidated_on_bind_and_unbind() -> None:
    router = TopicRouter()
    router.bind(q("a"), "a.*", {})
    assert router.route("a.b", None) == [q("a")]
    assert "a.b" in router._cache
    router.bind(q("b"), "#", {})
    assert router.route("a.b", None) == [q("a"), q("b")]
    router.unbind(q("a"), "a.*", {})
    assert router.route("a.b", None) == [q("b")]
    router.unbind_all(q("b"))
    assert router.route("a.b", None) == []


def test_topic_cache_is_bounded() -> None:
    router = TopicRouter(cache_size=8)
    router.bind(q("a"), "#", {})
    for index in range(100):
        assert router.route(f"k.{index}", None) == [q("a")]
        assert len(router._cache) <= 8
    assert "k.99" in router._cache
    assert "k.0" not in router._cache


def test_topic_cache_can_be_disabled() -> None:
    router = TopicRouter(cache_size=0)
    router.bind(q("a"), "a.#", {})
    assert router.route("a.b", None) == [q("a")]
    assert router._cache == {}
    with pytest.raises(ValueError, match="cache_size"):
        TopicRouter(cache_size=-1)


def test_topic_trie_is_pruned() -> None:
    router = TopicRouter()
    keys = ["a.b.c", "a.b", "a.#.c", "#", "", "*.*", "a..b"]
    for key in keys:
        router.bind(q("a"), key, {})
        router.bind(q("b"), key, {"x-y": 1})
    for key in keys:
        router.unbind(q("a"), key, {})
    assert router._trie._root.children != {}
    router.unbind_all(q("b"))
    assert router._trie._root.children == {}
    assert router._trie._root.destinations is None


def test_topic_long_keys_and_many_hashes_are_fast() -> None:
    router = TopicRouter(cache_size=0)
    router.bind(q("hashes"), ".".join(["#", "a"] * 50) + ".#", {})
    router.bind(q("tail"), "#.z", {})
    router.bind(q("stars"), ".".join(["*"] * 5000), {})
    long_key = ".".join(["a"] * 4999 + ["z"])
    started = time.perf_counter()
    assert router.route(long_key, None) == [q("hashes"), q("tail"), q("stars")]
    assert router.route(".".join(["a"] * 49 + ["z"]), None) == [q("tail")]
    assert router.route("." * 4999, None) == [q("stars")]
    assert time.perf_counter() - started < 5.0


# ------------------------------------------------------------- topic: properties

TOPIC_BINDING_WORDS = ["a", "b", "c", "", "*", "#"]
TOPIC_ROUTING_WORDS = ["a", "b", "c", ""]


def topic_oracle(binding_key: str, routing_key: str) -> bool:
    """Match with a regular expression over the routing key, every word followed by '.'."""
    parts = []
    for word in binding_key.split(".") if binding_key else []:
        if word == "*":
            parts.append(r"[^.]*\.")
        elif word == "#":
            parts.append(r"(?:[^.]*\.)*")
        else:
            parts.append(re.escape(word) + r"\.")
    subject = routing_key + "." if routing_key else ""
    return re.fullmatch("".join(parts), subject) is not None


binding_keys = st.lists(st.sampled_from(TOPIC_BINDING_WORDS), max_size=6).map(".".join)
routing_keys = st.lists(st.sampled_from(TOPIC_ROUTING_WORDS), max_size=7).map(".".join)


@settings(max_examples=400, deadline=None)
@given(st.lists(binding_keys, min_size=1, max_size=12), st.lists(routing_keys, max_size=8))
def test_topic_matches_regex_oracle(keys: list[str], probes: list[str]) -> None:
    router = TopicRouter()
    for index, key in enumerate(keys):
        router.bind(index, key, {})
    for routing_key in [*probes, *keys]:
        got = router.route(routing_key, None)
        assert len(got) == len(set(got))
        expected = {index for index, key in enumerate(keys) if topic_oracle(key, routing_key)}
        assert set(got) == expected, routing_key
        assert router.route(routing_key, None) == got


class TopicMachine(RuleBasedStateMachine):
    """Random bind/unbind sequences against a set-of-bindings model."""

    def __init__(self) -> None:
        super().__init__()
        self.router = TopicRouter(cache_size=4)
        self.model: set[tuple[str, str, int]] = set()

    @rule(dest=st.sampled_from("pqr"), key=binding_keys, tag=st.integers(0, 1))
    def bind(self, dest: str, key: str, tag: int) -> None:
        fresh = (dest, key, tag) not in self.model
        assert self.router.bind(dest, key, {"x-tag": tag}) is fresh
        self.model.add((dest, key, tag))

    @rule(dest=st.sampled_from("pqr"), key=binding_keys, tag=st.integers(0, 1))
    def unbind(self, dest: str, key: str, tag: int) -> None:
        present = (dest, key, tag) in self.model
        assert self.router.unbind(dest, key, {"x-tag": tag}) is present
        self.model.discard((dest, key, tag))

    @rule(dest=st.sampled_from("pqr"))
    def unbind_all(self, dest: str) -> None:
        owned = {binding for binding in self.model if binding[0] == dest}
        assert self.router.unbind_all(dest) == len(owned)
        self.model -= owned

    @rule(routing_key=routing_keys)
    def route(self, routing_key: str) -> None:
        got = self.router.route(routing_key, None)
        assert len(got) == len(set(got))
        assert set(got) == {d for d, k, _ in self.model if topic_oracle(k, routing_key)}

    @invariant()
    def counts_agree(self) -> None:
        assert len(self.router) == len(self.model)


TestTopicMachine = TopicMachine.TestCase
TestTopicMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


# -------------------------------------------------------------------------- headers


@pytest.mark.parametrize("value", ["all", "any", "all-with-x", "any-with-x", b"any"])
def test_headers_accepts_valid_x_match(value: object) -> None:
    HeadersRouter().validate_binding("", {"x-match": value})


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "foo",
            'Invalid x-match field value <<"foo">>; expected all, any, all-with-x, or any-with-x',
        ),
        (
            "ALL",
            'Invalid x-match field value <<"ALL">>; expected all, any, all-with-x, or any-with-x',
        ),
        ("", 'Invalid x-match field value <<"">>; expected all, any, all-with-x, or any-with-x'),
        (
            "é",
            'Invalid x-match field value <<"é"/utf8>>; '
            "expected all, any, all-with-x, or any-with-x",
        ),
        (1, "Invalid x-match field type signedint (value 1); expected longstr"),
        (True, "Invalid x-match field type bool (value true); expected longstr"),
        (None, "Invalid x-match field type void (value undefined); expected longstr"),
        (
            bytearray(b"all"),
            'Invalid x-match field type binary (value <<"all">>); expected longstr',
        ),
    ],
)
def test_headers_rejects_invalid_x_match(value: object, message: str) -> None:
    router = HeadersRouter()
    with pytest.raises(InvalidBinding) as caught:
        router.validate_binding("", {"x-match": value})
    assert str(caught.value) == message
    assert isinstance(caught.value, ValueError)
    with pytest.raises(InvalidBinding):
        router.bind(q("a"), "", {"x-match": value})
    assert len(router) == 0


@pytest.mark.parametrize("type_name", ["direct", "fanout", "topic"])
def test_other_types_do_not_validate_arguments(type_name: str) -> None:
    router = create_router(type_name)
    router.validate_binding("k", {"x-match": "bogus"})
    assert router.bind(q("a"), "k", {"x-match": "bogus"}) is True


def headers_route(args: Mapping[str, object], headers: Mapping[str, object] | None) -> bool:
    router = HeadersRouter()
    router.bind(q("a"), "ignored", args)
    return router.route("whatever", headers) == [q("a")]


HEADERS_CASES: list[tuple[dict[str, object], dict[str, object] | None, bool]] = [
    # x-match all (default) and any
    ({}, None, True),
    ({}, {}, True),
    ({"x-match": "all"}, {"a": 1}, True),
    ({"x-match": "any"}, {"a": 1}, False),
    ({"a": 1, "b": 2}, {"a": 1, "b": 2, "c": 3}, True),
    ({"a": 1, "b": 2}, {"a": 1}, False),
    ({"a": 1, "b": 2}, {"a": 1, "b": 3}, False),
    ({"x-match": "any", "a": 1, "b": 2}, {"b": 2}, True),
    ({"x-match": "any", "a": 1, "b": 2}, {"a": 2, "b": 3}, False),
    ({"x-match": "any", "a": 1}, None, False),
    ({"a": 1}, None, False),
    # x- arguments: ignored unless *-with-x
    ({"x-foo": "bar"}, {}, True),
    ({"x-match": "any", "x-foo": "bar"}, {"x-foo": "bar"}, False),
    ({"x-match": "all-with-x", "x-foo": "bar"}, {}, False),
    ({"x-match": "all-with-x", "x-foo": "bar"}, {"x-foo": "bar"}, True),
    ({"x-match": "any-with-x", "x-foo": "bar", "a": 1}, {"x-foo": "bar"}, True),
    ({"x-match": "any-with-x"}, {"x-match": "any-with-x"}, False),
    ({"x-match": "all-with-x"}, {}, True),
    ({"X-Foo": "bar"}, {}, False),
    # void arguments test presence only
    ({"a": None}, {"a": "anything"}, True),
    ({"a": None}, {"a": None}, True),
    ({"a": None}, {"b": 1}, False),
    ({"x-match": "any", "a": None, "b": 1}, {"a": 0}, True),
    ({"a": "x"}, {"a": None}, False),
    # values are compared like Erlang's ==, ignoring the AMQP type
    ({"a": 1}, {"a": 1.0}, True),
    ({"a": 2**40}, {"a": float(2**40)}, True),
    ({"a": 1}, {"a": True}, False),
    ({"a": True}, {"a": 1}, False),
    ({"a": False}, {"a": 0}, False),
    ({"a": True}, {"a": True}, True),
    ({"a": 1}, {"a": "1"}, False),
    ({"a": "abc"}, {"a": b"abc"}, True),
    ({"a": "abc"}, {"a": bytearray(b"abc")}, True),
    ({"a": "é"}, {"a": "é".encode()}, True),
    ({"a": b"\xff"}, {"a": bytearray(b"\xff")}, True),
    ({"a": "abc"}, {"a": "ABC"}, False),
    ({"a": Decimal("1.5")}, {"a": Decimal("1.5")}, True),
    ({"a": Decimal("1.5")}, {"a": Decimal("1.50")}, False),
    ({"a": Decimal("1")}, {"a": 1}, False),
    ({"a": 1700000000}, {"a": datetime.datetime.fromtimestamp(1700000000, tz=datetime.UTC)}, True),
    ({"a": {"n": 1, "m": [1, "x"]}}, {"a": {"m": [1.0, b"x"], "n": 1}}, True),
    ({"a": [1, 2]}, {"a": [2, 1]}, False),
    ({"a": []}, {"a": {}}, False),
]


@pytest.mark.parametrize(("args", "headers", "expected"), HEADERS_CASES)
def test_headers_matching(
    args: dict[str, object], headers: dict[str, object] | None, expected: bool
) -> None:
    assert headers_route(args, headers) is expected


def test_headers_routing_key_is_ignored_but_part_of_identity() -> None:
    router = HeadersRouter()
    assert router.bind(q("a"), "k1", {"h": 1}) is True
    assert router.bind(q("a"), "k2", {"h": 1}) is True
    assert router.route("unrelated", {"h": 1}) == [q("a")]
    assert router.route("k1", {"h": 2}) == []


def test_headers_order_and_dedup() -> None:
    router = HeadersRouter()
    router.bind(q("b"), "", {"x-match": "any", "h": 1, "i": 1})
    router.bind(q("a"), "", {"h": 1})
    router.bind(q("b"), "", {"i": 1})
    router.bind(q("c"), "", {"x-match": "any", "h": 2})
    assert router.route("", {"h": 1, "i": 1}) == [q("b"), q("a")]
    assert router.route("", {"h": 2, "i": 1}) == [q("b"), q("c")]
    router.unbind(q("b"), "", {"x-match": "any", "h": 1, "i": 1})
    assert router.route("", {"h": 1, "i": 1}) == [q("a"), q("b")]


def test_validate_x_match_ignores_absent_argument() -> None:
    validate_x_match({})
    validate_x_match({"x-other": 1})


# ----------------------------------------------------------- headers: properties

HEADER_NAMES = ["a", "b", "x-a", "x-match"]
HEADER_VALUES = st.sampled_from(
    [None, 0, 1, 2, 0.0, 1.0, 1.5, True, False, "0", "1", "a", b"a", b"1", bytearray(b"a")]
)
X_MATCH = st.sampled_from([None, "all", "any", "all-with-x", "any-with-x"])


def reference_value_equal(pattern: object, data: object) -> bool:
    """Erlang == on decoded values: numbers numerically, bools as atoms, strings as bytes."""
    if isinstance(pattern, bool) or isinstance(data, bool):
        return type(pattern) is type(data) and pattern == data
    if isinstance(pattern, int | float) and isinstance(data, int | float):
        return pattern == data
    if isinstance(pattern, str | bytes | bytearray) and isinstance(data, str | bytes | bytearray):
        return _as_bytes(pattern) == _as_bytes(data)
    return False


def _as_bytes(value: str | bytes | bytearray) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def reference_headers_match(args: Mapping[str, object], headers: Mapping[str, object]) -> bool:
    """A transliteration of RabbitMQ's sorted merge over binding and message tables."""
    kind = args.get("x-match", "all")
    with_x = kind in ("all-with-x", "any-with-x")
    pattern = sorted(args.items())
    data = sorted(headers.items())
    all_match, any_match = True, False
    i = j = 0
    while i < len(pattern):
        key, wanted = pattern[i]
        if key == "x-match" or (key.startswith("x-") and not with_x):
            i += 1
        elif j == len(data):
            all_match = False
            break
        elif key > data[j][0]:
            j += 1
        elif key < data[j][0]:
            all_match = False
            i += 1
        else:
            if wanted is None or reference_value_equal(wanted, data[j][1]):
                any_match = True
            else:
                all_match = False
            i += 1
            j += 1
    return any_match if kind in ("any", "any-with-x") else all_match


tables = st.dictionaries(st.sampled_from(HEADER_NAMES), HEADER_VALUES, max_size=4)


@settings(max_examples=600, deadline=None)
@given(X_MATCH, tables, st.one_of(st.none(), tables))
def test_headers_match_reference(
    x_match: str | None, args: dict[str, object], headers: dict[str, object] | None
) -> None:
    args = {k: v for k, v in args.items() if k != "x-match"}
    if x_match is not None:
        args["x-match"] = x_match
    expected = reference_headers_match(args, headers or {})
    assert headers_route(args, headers) is expected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("pqr"), X_MATCH, tables), max_size=8), tables)
def test_headers_route_is_union_of_matching_bindings(
    specs: list[tuple[str, str | None, dict[str, object]]], headers: dict[str, object]
) -> None:
    router = HeadersRouter()
    expected: list[Hashable] = []
    for dest, x_match, raw in specs:
        args = {k: v for k, v in raw.items() if k != "x-match"}
        if x_match is not None:
            args["x-match"] = x_match
        added = router.bind(dest, "", args)
        if added and reference_headers_match(args, headers) and dest not in expected:
            expected.append(dest)
    assert router.route("", headers) == expected
