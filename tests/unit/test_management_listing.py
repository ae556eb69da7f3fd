"""The management API's list parameters (amqpd/shell/management/listing.py): sorting by
nested keys, columns, RabbitMQ's pagination wrapper and its errors."""

from __future__ import annotations

from typing import Any

import pytest

from amqpd.shell.management.errors import ApiError
from amqpd.shell.management.listing import present, select_columns, sort_items

ITEMS: list[dict[str, Any]] = [
    {"name": "b", "vhost": "/", "message_stats": {"publish": 5}, "messages": 2},
    {"name": "a", "vhost": "/", "messages": 9},
    {"name": "c", "vhost": "/", "message_stats": {"publish": 1}, "messages": 0},
    {"name": "A2", "vhost": "v", "message_stats": {"publish": 3}, "messages": 0},
]


def names(items: Any) -> list[str]:
    return [item["name"] for item in items]


def test_default_order_is_vhost_then_name() -> None:
    assert names(present(list(ITEMS), {}, ("vhost", "name"))) == ["a", "b", "c", "A2"]


def test_sort_by_nested_key_missing_values_last_then_default() -> None:
    # a missing key is Erlang's `undefined`, an atom, which sorts after every number
    out = present(list(ITEMS), {"sort": "message_stats.publish"}, ("vhost", "name"))
    assert names(out) == ["c", "A2", "b", "a"]
    out = present(list(ITEMS), {"sort": "message_stats.publish", "sort_reverse": "true"}, ("name",))
    assert names(out) == ["a", "b", "A2", "c"]


def test_sort_mixed_types_like_erlang() -> None:
    items = [{"k": "text"}, {"k": 3}, {"k": None}, {"k": {"x": 1}}, {"k": [1]}]
    assert [i["k"] for i in sort_items(items, "k", False)] == [3, None, {"x": 1}, [1], "text"]


def test_columns_keep_nested_keys_and_skip_missing() -> None:
    out = select_columns(list(ITEMS), "name,message_stats.publish")
    assert out == [
        {"name": "b", "message_stats": {"publish": 5}},
        {"name": "a"},
        {"name": "c", "message_stats": {"publish": 1}},
        {"name": "A2", "message_stats": {"publish": 3}},
    ]


def test_pagination_wrapper() -> None:
    out = present(list(ITEMS), {"page": "2", "page_size": "3", "columns": "name"}, ("name",))
    assert out == {
        "filtered_count": 4,
        "item_count": 1,
        "items": [{"name": "c"}],
        "page": 2,
        "page_count": 2,
        "page_size": 3,
        "total_count": 4,
    }


def test_name_filter_substring_case_insensitive_or_regex() -> None:
    out = present(list(ITEMS), {"page": "1", "name": "A"}, ("name",))
    assert names(out["items"]) == ["A2", "a"]  # byte order, as Erlang binaries
    assert out["filtered_count"] == 2 and out["total_count"] == 4 and out["page_size"] == 100
    out = present(list(ITEMS), {"page": "1", "name": "^[bc]$", "use_regex": "true"}, ("name",))
    assert names(out["items"]) == ["b", "c"]
    out = present(list(ITEMS), {"page": "1", "name": "."}, ())
    assert out["items"] == [] and out["page_count"] == 0  # literal without use_regex


def test_page_size_or_name_alone_do_not_paginate() -> None:
    assert isinstance(present(list(ITEMS), {"page_size": "1", "name": "zz"}, ()), list)


@pytest.mark.parametrize(
    ("query", "error", "reason"),
    [
        (
            {"page": "0"},
            "invalid_pagination_parameters",
            "Invalid pagination parameters: page number 0, page size undefined",
        ),
        (
            {"page": "1", "page_size": "600"},
            "invalid_pagination_parameters",
            "Invalid pagination parameters: page number 1, page size 600",
        ),
        ({"page": "1", "page_size": "x"}, "bad_request", "Pagination parameters are invalid"),
        (
            {"page": "1", "name": "(", "use_regex": "true"},
            "bad_request",
            "Pagination parameters are invalid",
        ),
        (
            {"page": "5", "page_size": "2"},
            "page_out_of_range",
            "Page out of range, page: 5 page size: 2, len: 4",
        ),
    ],
)
def test_bad_pagination_is_400(query: dict[str, str], error: str, reason: str) -> None:
    with pytest.raises(ApiError) as caught:
        present(list(ITEMS), query, ())
    assert (caught.value.status, caught.value.error, caught.value.reason) == (400, error, reason)
