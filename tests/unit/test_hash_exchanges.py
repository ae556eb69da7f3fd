"""x-consistent-hash and x-modulus-hash routers: checks, distribution, stability, moves."""

from __future__ import annotations

from collections import Counter

import pytest

from exchanges import InvalidBinding, create_router
from exchanges.consistent_hash import ConsistentHashRouter, erlang_binary
from exchanges.hash_ring import HashRing
from exchanges.registry import declaration_problem

KEYS = [f"order-{i}" for i in range(20_000)]


def q(name: str) -> tuple[str, str]:
    return ("queue", name)


def shares(router: ConsistentHashRouter | object, keys: list[str]) -> Counter[object]:
    counts: Counter[object] = Counter()
    for key in keys:
        (destination,) = router.route(key, None)  # type: ignore[attr-defined]
        counts[destination] += 1
    return counts


def owners(router: object, keys: list[str]) -> dict[str, object]:
    return {key: router.route(key, None)[0] for key in keys}  # type: ignore[attr-defined]


# ------------------------------------------------------------------ plugin's checks and texts
@pytest.mark.parametrize(
    ("key", "text"),
    [
        ("abc", 'The binding key must be an integer: <<"abc">>'),
        ("1.5", 'The binding key must be an integer: <<"1.5">>'),
        (" 2", 'The binding key must be an integer: <<" 2">>'),
        ("", "The binding key must be an integer: <<>>"),
        ("0", "The binding key must be greater than 0"),
        ("-1", "The binding key must be greater than 0"),
    ],
)
def test_binding_key_must_be_a_positive_integer(key: str, text: str) -> None:
    router = create_router("x-consistent-hash")
    with pytest.raises(InvalidBinding) as caught:
        router.bind(q("a"), key, {})
    assert str(caught.value) == text
    assert len(router) == 0


def test_erlang_printing_of_odd_keys() -> None:
    assert erlang_binary(b"") == "<<>>"
    assert erlang_binary(b'a"b\\') == '<<"a\\"b\\\\">>'
    assert erlang_binary(b"\x01x") == "<<1,120>>"


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({}, None),
        ({"hash-header": "h"}, None),
        ({"hash-property": "message_id"}, None),
        ({"hash-property": "timestamp"}, None),
        (
            {"hash-header": "h", "hash-property": "message_id"},
            "hash-header and hash-property are mutually exclusive",
        ),
        ({"hash-property": "foo"}, "Unsupported property: foo"),
        ({"hash-header": 5}, "Invalid argument 'hash-header': must be a string"),
        ({"hash-property": True}, "Invalid argument 'hash-property': must be a string"),
    ],
)
def test_declaration_checks(arguments: dict[str, object], problem: str | None) -> None:
    assert declaration_problem("x-consistent-hash", arguments) == problem


def test_plus_sign_and_leading_zeros_are_integers_as_in_erlang() -> None:
    router = create_router("x-consistent-hash")
    assert router.bind(q("a"), "+2", {})
    assert router.bind(q("b"), "007", {})
    assert len(router) == 2


# ----------------------------------------------------------------------------- distribution
@pytest.mark.parametrize("weights", [(1, 1, 1, 1), (1, 2, 3), (10, 10), (1, 5)])
def test_shares_follow_weights_within_25_percent(weights: tuple[int, ...]) -> None:
    router = create_router("x-consistent-hash")
    for index, weight in enumerate(weights):
        router.bind(q(f"shard-{index}"), str(weight), {})
    counts = shares(router, KEYS)
    total = sum(weights)
    for index, weight in enumerate(weights):
        expected = len(KEYS) * weight / total
        assert abs(counts[q(f"shard-{index}")] - expected) <= 0.25 * expected, counts


def test_same_key_same_queue_whatever_the_binding_order() -> None:
    first = create_router("x-consistent-hash")
    second = create_router("x-consistent-hash")
    names = ["a", "b", "c", "d"]
    for name in names:
        first.bind(q(name), "1", {})
    for name in reversed(names):
        second.bind(q(name), "1", {})
    assert owners(first, KEYS[:2000]) == owners(second, KEYS[:2000])
    assert owners(first, KEYS[:2000]) == owners(first, KEYS[:2000])


def test_adding_a_binding_moves_only_its_share() -> None:
    router = create_router("x-consistent-hash")
    for name in ("a", "b", "c"):
        router.bind(q(name), "1", {})
    before = owners(router, KEYS)
    router.bind(q("d"), "1", {})
    after = owners(router, KEYS)
    moved = [key for key in KEYS if before[key] != after[key]]
    assert all(after[key] == q("d") for key in moved)
    assert abs(len(moved) - len(KEYS) / 4) <= 0.25 * len(KEYS) / 4


def test_removing_a_binding_moves_only_its_share() -> None:
    router = create_router("x-consistent-hash")
    for name in ("a", "b", "c", "d"):
        router.bind(q(name), "1", {})
    before = owners(router, KEYS)
    router.unbind(q("b"), "1", {})
    after = owners(router, KEYS)
    for key in KEYS:
        if before[key] != q("b"):
            assert after[key] == before[key]
        else:
            assert after[key] != q("b")
    router.unbind_all(q("c"))
    assert set(owners(router, KEYS[:500]).values()) == {q("a"), q("d")}


def test_second_binding_of_a_queue_is_ignored_until_the_first_goes() -> None:
    router = create_router("x-consistent-hash")
    router.bind(q("a"), "1", {})
    router.bind(q("b"), "1", {})
    before = owners(router, KEYS)
    assert router.bind(q("a"), "50", {})  # listed, but the ring keeps weight 1
    assert len(router) == 3
    assert owners(router, KEYS) == before
    router.unbind(q("a"), "1", {})  # the weight-50 binding takes over
    counts = shares(router, KEYS)
    assert counts[q("a")] > 0.9 * len(KEYS)
    router.unbind(q("a"), "50", {})
    assert set(owners(router, KEYS[:200]).values()) == {q("b")}


def test_no_bindings_is_unroutable() -> None:
    router = create_router("x-consistent-hash")
    assert router.route("k", None) == []
    router.bind(q("a"), "3", {})
    assert router.route("k", None) == [q("a")]
    router.unbind(q("a"), "3", {})
    assert router.route("k", None) == []


def test_hash_header_and_property() -> None:
    on_header = create_router("x-consistent-hash", {"hash-header": "user"})
    on_property = create_router("x-consistent-hash", {"hash-property": "message_id"})
    assert on_header.uses_headers and on_property.uses_headers
    assert isinstance(on_property, ConsistentHashRouter)
    assert on_property.hash_property == "message_id"
    for router in (on_header, on_property):
        for name in ("a", "b", "c"):
            router.bind(q(name), "1", {})
    targets = set()
    for i in range(300):
        user = f"user-{i}"
        # the routing key does not matter, the header does
        got = on_header.route(f"rk-{i}", {"user": user})
        assert got == on_header.route("other", {"user": user.encode()})
        targets.add(got[0])
        # the same rings (same queue names), the same hashed bytes: the same queue
        assert on_property.route("x", {"message_id": user.encode()}) == got
    assert targets == {q("a"), q("b"), q("c")}
    # a message without the header is hashed as an empty key: always the same queue
    assert on_header.route("a", None) == on_header.route("b", {"other": 1})


def test_hash_ring_is_independent_of_insertion_order() -> None:
    one, two = HashRing(), HashRing()
    one.add("x", "x", 2)
    one.add("y", "y", 1)
    two.add("y", "y", 1)
    two.add("x", "x", 2)
    positions = [i * 2**54 for i in range(1024)]
    assert [one.owner(p) for p in positions] == [two.owner(p) for p in positions]
    assert one.remove("x") and not one.remove("x")
    assert "x" not in one and len(one) == 1


# ------------------------------------------------------------------------------- modulus hash
def test_modulus_hash_spreads_evenly_and_is_stable() -> None:
    router = create_router("x-modulus-hash")
    assert router.route("k", None) == []
    for name in ("a", "b", "c", "d"):
        router.bind(q(name), "ignored", {})
    router.bind(q("a"), "again", {})  # a destination bound twice counts once
    counts = shares(router, KEYS)
    assert set(counts) == {q("a"), q("b"), q("c"), q("d")}
    for count in counts.values():
        assert abs(count - len(KEYS) / 4) <= 0.1 * len(KEYS) / 4
    assert owners(router, KEYS[:1000]) == owners(router, KEYS[:1000])
    router.unbind(q("a"), "ignored", {})
    assert len(shares(router, KEYS[:1000])) == 4  # still bound through "again"
    router.unbind(q("a"), "again", {})
    assert set(shares(router, KEYS[:1000])) == {q("b"), q("c"), q("d")}
    for name in ("b", "c", "d"):
        router.unbind_all(q(name))
    assert router.route("k", None) == []
