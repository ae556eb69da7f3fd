"""RabbitMQ's list query parameters (rabbit_mgmt_util): ``sort`` / ``sort_reverse``,
``columns``, and pagination (``page``, ``page_size``, ``name``, ``use_regex``).

* ``sort=message_stats.publish`` sorts by a nested key (dots), items without it after
  those with a number, as Erlang orders ``undefined`` (numbers < atoms < maps < lists <
  strings), then by the
  listing's default keys (vhost and name for most, as RabbitMQ); ``sort_reverse=true``
  reverses the result.
* ``columns=name,message_stats.publish`` keeps only those (nested) keys of each item.
* With ``page`` the answer is the pagination wrapper ``{filtered_count, item_count, items,
  page, page_count, page_size, total_count}``; ``page_size`` is 100 by default and at most
  500; ``name`` filters on a case-insensitive substring of the name, or a regular
  expression with ``use_regex=true``. Without ``page`` a plain list is returned
  (``page_size`` and ``name`` alone are ignored, as in RabbitMQ).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from amqpd.shell.management.errors import ApiError, bad_request

DEFAULT_PAGE_SIZE: Final = 100
MAX_PAGE_SIZE: Final = 500

Item = dict[str, Any]


def _truthy(value: str | None) -> bool:
    return value is not None and value.lower() == "true"


def _lookup(item: Mapping[str, Any], path: Sequence[str]) -> Any:
    value: Any = item
    for part in path:
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _erlang_order(value: Any) -> tuple[int, Any]:
    """A sort key that orders mixed JSON values as Erlang terms compare."""
    if isinstance(value, bool) or value is None:
        return (1, str(value))
    if isinstance(value, int | float):
        return (0, value)
    if isinstance(value, Mapping):
        return (2, len(value))
    if isinstance(value, list | tuple):
        return (3, len(value))
    return (4, str(value))


def sort_items(
    items: list[Item], sort: str | None, reverse: bool, default: Sequence[str] = ()
) -> list[Item]:
    """``items`` sorted by the dotted key ``sort``, then the listing's ``default`` keys
    (RabbitMQ's sort_list), reversed if asked."""
    keys = [sort, *default] if sort else list(default)
    if keys:
        paths = [key.split(".") for key in keys]
        items = sorted(
            items, key=lambda item: [_erlang_order(_lookup(item, path)) for path in paths]
        )
    if reverse:
        items = list(reversed(items))
    return items


def select_columns(items: list[Item], columns: str | None) -> list[Item]:
    """Each item reduced to the dotted ``columns`` it has (all of it without ``columns``)."""
    if not columns:
        return items
    paths = [column.split(".") for column in columns.split(",") if column]
    return [_select(item, paths) for item in items]


def _select(item: Mapping[str, Any], paths: list[list[str]]) -> Item:
    out: Item = {}
    for path in paths:
        value: Any = item
        for part in path:
            if not isinstance(value, Mapping) or part not in value:
                break
            value = value[part]
        else:
            target = out
            for part in path[:-1]:
                target = target.setdefault(part, {})
            target[path[-1]] = value
    return out


class Pagination:
    """A request's ``page`` / ``page_size`` / ``name`` / ``use_regex`` (validated)."""

    __slots__ = ("name", "page", "page_size", "pattern")

    def __init__(self, query: Mapping[str, str]) -> None:
        raw_page = query.get("page")
        raw_size = query.get("page_size")
        self.page: int | None = None
        self.page_size = DEFAULT_PAGE_SIZE
        self.name = query.get("name") or None
        self.pattern: re.Pattern[str] | None = None
        if raw_page is None:
            return
        try:
            page = int(raw_page)
            size = int(raw_size) if raw_size is not None else None
            if self.name is not None and _truthy(query.get("use_regex")):
                self.pattern = re.compile(self.name)
        except (ValueError, re.error) as exc:
            raise bad_request("Pagination parameters are invalid") from exc
        if page < 1 or (size is not None and not 1 <= size <= MAX_PAGE_SIZE):
            shown = "undefined" if size is None else size
            raise ApiError(
                400,
                "invalid_pagination_parameters",
                f"Invalid pagination parameters: page number {page}, page size {shown}",
            )
        self.page = page
        if size is not None:
            self.page_size = size

    def matches(self, item: Mapping[str, Any]) -> bool:
        """Whether the item's name passes the ``name`` filter."""
        name = str(item.get("name", ""))
        if self.pattern is not None:
            return self.pattern.search(name) is not None
        assert self.name is not None
        return self.name.lower() in name.lower()

    def wrap(self, items: list[Item], columns: str | None) -> dict[str, Any]:
        """The pagination wrapper around one page of ``items`` (400 page_out_of_range)."""
        assert self.page is not None
        total = len(items)
        if self.name is not None:
            items = [item for item in items if self.matches(item)]
        filtered = len(items)
        page_count = math.ceil(filtered / self.page_size)
        if self.page > page_count and filtered:
            raise ApiError(
                400,
                "page_out_of_range",
                f"Page out of range, page: {self.page} page size: {self.page_size}, "
                f"len: {filtered}",
            )
        start = (self.page - 1) * self.page_size
        page = select_columns(items[start : start + self.page_size], columns)
        return {
            "filtered_count": filtered,
            "item_count": len(page),
            "items": page,
            "page": self.page,
            "page_count": page_count,
            "page_size": self.page_size,
            "total_count": total,
        }


def present(items: list[Item], query: Mapping[str, str], default: Sequence[str] = ()) -> Any:
    """A listing as the request asks for it: sorted (by ``sort``, then the ``default``
    keys), paginated, reduced to columns."""
    pagination = Pagination(query)
    items = sort_items(items, query.get("sort"), _truthy(query.get("sort_reverse")), default)
    columns = query.get("columns")
    if pagination.page is not None:
        return pagination.wrap(items, columns)
    return select_columns(items, columns)
