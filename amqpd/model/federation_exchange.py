"""What a federated exchange's link computes, without doing I/O (pure).

RabbitMQ's design (rabbit_federation_exchange_link): for a downstream exchange X federated
from an upstream, the link declares on the upstream

* a durable queue ``federation: {UX} -> {cluster}[:{X} | :{vhost}:{X}]`` (`queue_name`;
  the suffix only when the downstream differs from the upstream exchange/vhost),
* an internal, auto-delete helper exchange of type ``x-federation-upstream`` named
  ``{queue} A`` or ``{queue} B`` (`helper_exchange`: the name alternates at each start so
  changed arguments never meet the old declaration; the old one is deleted afterwards),
  bound to the queue,

binds the upstream exchange UX to the helper with every binding key of X
(`upstream_bindings`, each carrying an ``x-bound-from`` entry so that bindings travel no
further than messages can: `binding_arguments`), consumes the queue and republishes each
message into X with an ``x-received-from`` entry prepended (`received_from`), unless it
already made ``max-hops`` hops or came from this cluster (`should_forward`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from exchanges.federation_upstream import ROUTING_HEADER, should_forward
from exchanges.identity import arguments_key

__all__ = [
    "BINDING_HEADER",
    "ROUTING_HEADER",
    "binding_arguments",
    "helper_exchange",
    "queue_name",
    "received_from",
    "should_forward",
    "upstream_bindings",
    "with_received_from",
]

BINDING_HEADER: Final = "x-bound-from"
SUFFIXES: Final = ("A", "B")


def queue_name(
    upstream_exchange: str, upstream_vhost: str, cluster: str, vhost: str, exchange: str
) -> str:
    """The upstream queue's name (rabbit_federation_exchange_link:upstream_queue_name)."""
    if vhost != upstream_vhost:
        down = f":{vhost}:{exchange}"
    elif exchange != upstream_exchange:
        down = f":{exchange}"
    else:
        down = ""
    return f"federation: {upstream_exchange} -> {cluster}{down}"


def helper_exchange(queue: str, suffix: str) -> str:
    """The helper exchange's name for ``suffix`` "A" or "B"."""
    return f"{queue} {suffix}"


def received_from(
    uri: str, upstream_exchange: str, redelivered: bool, cluster: str | None, vhost: str | None
) -> dict[str, Any]:
    """The ``x-received-from`` entry of one hop (``uri`` without credentials)."""
    entry: dict[str, Any] = {"uri": uri, "exchange": upstream_exchange, "redelivered": redelivered}
    if cluster is not None:
        entry["cluster-name"] = cluster
    if vhost is not None:
        entry["vhost"] = vhost
    return entry


def with_received_from(
    headers: Mapping[str, Any] | None, entry: Mapping[str, Any]
) -> dict[str, Any]:
    """A copy of ``headers`` with ``entry`` prepended to ``x-received-from``
    (rabbit_basic:prepend_table_header)."""
    out = dict(headers or {})
    previous = out.get(ROUTING_HEADER)
    out[ROUTING_HEADER] = [dict(entry), *(previous if isinstance(previous, list) else [])]
    return out


def _hops(entry: Mapping[str, Any]) -> int:
    hops = entry.get("hops")
    return hops if isinstance(hops, int) and not isinstance(hops, bool) else 0


def _already_seen(cluster: str | None, vhost: str | None, entries: list[Any]) -> bool:
    return any(
        isinstance(entry, Mapping)
        and entry.get("cluster-name") == cluster
        and entry.get("vhost") == vhost
        for entry in entries
    )


def binding_arguments(
    arguments: Mapping[str, Any],
    max_hops: int,
    upstream_cluster: str | None,
    upstream_vhost: str,
    cluster: str,
    vhost: str,
    exchange: str,
    suffix: str,
) -> dict[str, Any] | None:
    """The arguments of the upstream binding for a downstream binding with ``arguments``,
    or None: the binding must travel no further (rabbit_federation_exchange_link's
    update_binding: hops count down from the most restrictive max-hops passed through,
    and a binding never goes back to a cluster it came from)."""
    previous = arguments.get(BINDING_HEADER)
    if isinstance(previous, list) and previous and isinstance(previous[0], Mapping):
        if _already_seen(upstream_cluster, upstream_vhost, previous):
            hops = 0
        else:
            hops = min(_hops(previous[0]) - 1, max_hops)
    else:
        previous, hops = [], max_hops
    if hops <= 0:
        return None
    entry = {
        "cluster-name": cluster,
        "vhost": vhost,
        "exchange": f"{vhost}:{exchange} {suffix}",
        "hops": hops,
    }
    return {**arguments, BINDING_HEADER: [entry, *previous]}


def upstream_bindings(
    downstream: Iterable[tuple[str, Mapping[str, Any]]],
    max_hops: int,
    upstream_cluster: str | None,
    upstream_vhost: str,
    cluster: str,
    vhost: str,
    exchange: str,
    suffix: str,
) -> dict[tuple[str, Any], tuple[str, dict[str, Any]]]:
    """The bindings the upstream exchange must have to the helper exchange, for the
    downstream exchange's bindings ``(key, arguments)`` (each distinct one once), keyed by
    their identity."""
    wanted: dict[tuple[str, Any], tuple[str, dict[str, Any]]] = {}
    for key, arguments in downstream:
        upstream_args = binding_arguments(
            arguments, max_hops, upstream_cluster, upstream_vhost, cluster, vhost, exchange, suffix
        )
        if upstream_args is not None:
            wanted[(key, arguments_key(upstream_args))] = (key, upstream_args)
    return wanted
