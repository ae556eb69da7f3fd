"""Merging the workers' answers into one broker's (amqpd/shell/workers/gateway.py): the
listings (each vhost's rows from its owner), the overview (totals and rates summed), the
definitions export (each vhost's topology from its owner) and the alarms."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

from amqpd.shell.management.bindings import BINDING_ORDER
from amqpd.shell.workers.worker_calls import Answer

TOPOLOGY: Final = ("queues", "exchanges", "bindings")  # what lives on a vhost's owner


# -- how the rows of each listing are kept -----------------------------------------------------
VhostOf = Callable[[dict[str, Any]], Any]


def _row_vhost(row: dict[str, Any]) -> Any:
    return row.get("vhost")


def _consumer_vhost(row: dict[str, Any]) -> Any:
    queue = row.get("queue")
    return queue.get("vhost") if isinstance(queue, dict) else None


def _vhost_name(row: dict[str, Any]) -> Any:
    return row.get("name")


def _anywhere(row: dict[str, Any]) -> Any:
    return None  # every worker's rows are kept


@dataclass(frozen=True, slots=True)
class Listing:
    vhost: VhostOf = _row_vhost
    order: tuple[str, ...] = ("vhost", "name")  # Call.listing's default sort keys


LISTINGS: Final[dict[str, Listing]] = {
    "queues": Listing(),
    "exchanges": Listing(),
    "bindings": Listing(order=BINDING_ORDER),
    "connections": Listing(),
    "channels": Listing(),
    "consumers": Listing(vhost=_consumer_vhost),
    "vhosts": Listing(vhost=_vhost_name),
    "shovels": Listing(vhost=_anywhere),
    "federation-links": Listing(vhost=_anywhere),
}


# -- merging -----------------------------------------------------------------------------------
def documents_of(answers: Sequence[Answer]) -> list[Any]:
    return [orjson.loads(body) for _status, _headers, body in answers]


def _sum(a: Any, b: Any) -> Any:
    """Numbers added, objects merged key by key, rate samples added by timestamp; anything
    else: ``a``."""
    if _number(a) and _number(b):
        return a + b
    if isinstance(a, dict) and isinstance(b, dict):
        out = dict(a)
        for key, value in b.items():
            if key == "samples" and isinstance(a.get(key), list) and isinstance(value, list):
                out[key] = _samples(a[key], value)
            else:
                out[key] = _sum(a[key], value) if key in a else value
        return out
    return a


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _samples(a: list[Any], b: list[Any]) -> list[Any]:
    extra: dict[Any, Any] = {}
    for point in b:
        if isinstance(point, dict) and _number(point.get("sample")):
            extra[point.get("timestamp")] = extra.get(point.get("timestamp"), 0) + point["sample"]
    out = []
    for point in a:
        if isinstance(point, dict) and _number(point.get("sample")):
            point = {**point, "sample": point["sample"] + extra.get(point.get("timestamp"), 0)}
        out.append(point)
    return out


def merge_overview(documents: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Worker 0's overview with the totals and message counters of every worker summed."""
    out = dict(documents[0])
    for key in ("object_totals", "queue_totals", "message_stats", "churn_rates"):
        for document in documents[1:]:
            if key in document:
                out[key] = _sum(out[key], document[key]) if key in out else document[key]
    return out


NODE_SUMS: Final = ("mem_used", "fd_used", "sockets_used", "proc_used", "store_bytes", "run_queue")
NODE_ALARMS: Final = ("mem_alarm", "disk_free_alarm")


def merge_nodes(documents: Sequence[Any]) -> Any:
    """``GET /api/nodes`` (a list of the one node) or ``/api/nodes/{name}``: worker 0's
    node with the memory, descriptors, sockets, processes and store of every worker summed
    and an alarm raised if any worker has it (the limits are the node's, as given)."""
    if all(isinstance(document, dict) for document in documents):
        return _merge_node(documents)
    if all(isinstance(d, list) and d and isinstance(d[0], dict) for d in documents):
        return [_merge_node([document[0] for document in documents]), *documents[0][1:]]
    return documents[0]


def _merge_node(nodes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    out = dict(nodes[0])
    for node in nodes[1:]:
        for key in NODE_SUMS:
            if _number(out.get(key)) and _number(node.get(key)):
                out[key] += node[key]
        for key in NODE_ALARMS:
            if key in out:
                out[key] = bool(out[key]) or bool(node.get(key))
    return out


def merge_summed(documents: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Every worker's object summed key by key (numbers and rates added, the rest worker
    0's): ``GET /api/nodes/{name}/memory``, so its totals are the node's memory (worker 0's
    counts the supervisor's: amqpd/shell/node_sample.py `of_node`) as ``mem_used`` is, and
    ``GET /api/vhosts/{name}`` of a spread vhost (its queues, messages and traffic are on
    every worker)."""
    out = dict(documents[0])
    for document in documents[1:]:
        out = _sum(out, document)
    return out


def merge_vhosts(
    documents: Sequence[Any], owner: Callable[[str], int], spread: Callable[[str], bool]
) -> list[dict[str, Any]]:
    """``GET /api/vhosts``: each vhost's row from its worker; a spread vhost has a row on
    every worker, which are summed (`merge_summed`)."""
    out: list[dict[str, Any]] = []
    at: dict[str, int] = {}

    def where(name: str) -> int:
        return EVERY_WORKER if spread(name) else owner(name)

    for row in merge_rows(documents, where, _vhost_name):
        name = row.get("name")
        if isinstance(name, str) and name in at:
            out[at[name]] = _sum(out[at[name]], row)
            continue
        if isinstance(name, str):
            at[name] = len(out)
        out.append(row)
    return out


EVERY_WORKER: Final = -1  # an owner that means: every worker's rows (a spread vhost's queues)


def _owned(owner: Callable[[str], int], vhost: Any, index: int) -> bool:
    if vhost is None or not isinstance(vhost, str):
        return True
    found = owner(vhost)
    return found in (index, EVERY_WORKER)


def merge_rows(
    documents: Sequence[Any], owner: Callable[[str], int], vhost_of: VhostOf = _row_vhost
) -> list[dict[str, Any]]:
    """Every worker's rows, each of a vhost taken from the vhost's owner only."""
    return [
        row
        for index, rows in enumerate(documents)
        for row in rows
        if isinstance(row, dict) and _owned(owner, vhost_of(row), index)
    ]


def merge_definitions(
    documents: Sequence[Any], owner: Callable[[str], int], queues_owner: Callable[[str], int]
) -> dict[str, Any]:
    """Worker 0's export with every worker's queues (``queues_owner``: where a vhost's queues
    are), exchanges and bindings (``owner``)."""
    out = dict(documents[0])
    for section in TOPOLOGY:
        rows = [document.get(section) or [] for document in documents]
        where = queues_owner if section == "queues" else owner
        out[section] = merge_rows(rows, where, lambda row: row.get("vhost", "/"))
    return out


def merge_alarms(documents: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The first failing worker's answer with every failing worker's alarms (each once)."""
    out = dict(documents[0])
    out["alarms"] = [
        alarm
        for index, document in enumerate(documents)
        for alarm in document.get("alarms", [])
        if alarm not in [a for d in documents[:index] for a in d.get("alarms", [])]
    ]
    return out
