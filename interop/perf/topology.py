"""The exchange, queues and bindings of a run, and where each producer publishes.

Queue i is bound according to the exchange type (see `Route`); producer i publishes to
queue ``i mod N`` and consumer j consumes from queue ``j mod N``. The coordinator declares
(and purges) everything before the workers start and deletes it afterwards.

The teardown is bounded: a broker that never answers a delete (GarageMQ 0.0~git20200204
accepts exchange.delete and sends nothing back: its handler is a stub) leaves the rest in
place and the run still reports, instead of waiting forever for the reply.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from pamqp import commands
from pamqp.base import Frame as Method
from pamqp.common import FieldTable

from interop.perf.client import AMQPClient
from interop.perf.options import PerfOptions

HEADER_KEY = "perf-queue"
TEARDOWN_TIMEOUT = 10.0  # seconds for each delete's reply; the run is over by then


@dataclass(frozen=True, slots=True)
class Route:
    """How one queue is bound and how a publish reaches it."""

    queue: str
    binding_key: str
    binding_args: FieldTable | None
    routing_key: str
    headers: FieldTable | None


def route_for(options: PerfOptions, queue: str) -> Route:
    """The binding of ``queue`` and the publish that reaches it, by exchange type."""
    kind = options.exchange_type
    fixed = options.routing_key
    if options.exchange == "":
        return Route(queue, "", None, queue, None)
    if kind == "fanout":
        return Route(queue, "", None, fixed or "", None)
    if kind == "topic":
        key = fixed if fixed is not None else f"{queue}.#"
        return Route(queue, key, None, fixed if fixed is not None else f"{queue}.perf", None)
    if kind == "headers":
        headers: FieldTable = {HEADER_KEY: queue}
        args: FieldTable = {"x-match": "all", HEADER_KEY: queue}
        return Route(queue, "", args, fixed or "", headers)
    key = fixed if fixed is not None else queue
    return Route(queue, key, None, key, None)


def producer_route(options: PerfOptions, index: int) -> Route:
    """The route producer ``index`` publishes on (queue ``index mod N``)."""
    names = options.queue_names()
    return route_for(options, names[index % len(names)])


def consumer_queue(options: PerfOptions, index: int) -> str:
    """The queue consumer ``index`` consumes from."""
    names = options.queue_names()
    return names[index % len(names)]


def _is_builtin(exchange: str) -> bool:
    return exchange == "" or exchange.startswith("amq.")


async def declare(client: AMQPClient, options: PerfOptions) -> None:
    """Declare the exchange, the queues and their bindings; purge the queues."""
    if not _is_builtin(options.exchange):
        await client.call(
            commands.Exchange.Declare(
                exchange=options.exchange, exchange_type=options.exchange_type, durable=False
            ),
            commands.Exchange.DeclareOk,
        )
    arguments: FieldTable = dict(options.queue_args)
    for name in options.queue_names():
        await client.call(
            commands.Queue.Declare(queue=name, durable=options.durable, arguments=arguments),
            commands.Queue.DeclareOk,
        )
        await client.call(commands.Queue.Purge(queue=name), commands.Queue.PurgeOk)
        if options.exchange != "":
            route = route_for(options, name)
            await client.call(
                commands.Queue.Bind(
                    queue=name,
                    exchange=options.exchange,
                    routing_key=route.binding_key,
                    arguments=route.binding_args,
                ),
                commands.Queue.BindOk,
            )


async def delete(
    client: AMQPClient, options: PerfOptions, timeout: float = TEARDOWN_TIMEOUT
) -> str | None:
    """Delete the queues and (unless built in) the exchange.

    Returns None when everything was deleted, else what was left and why: the first delete
    the broker did not answer within ``timeout`` seconds ends the teardown (a late reply
    could be taken for the next one's), and it and everything after it stay in place.
    """
    steps: list[tuple[str, Method, type[Method]]] = [
        (f"queue {name}", commands.Queue.Delete(queue=name), commands.Queue.DeleteOk)
        for name in options.queue_names()
    ]
    if not _is_builtin(options.exchange):
        steps.append(
            (
                f"exchange {options.exchange}",
                commands.Exchange.Delete(exchange=options.exchange),
                commands.Exchange.DeleteOk,
            )
        )
    for index, (what, method, reply) in enumerate(steps):
        try:
            await asyncio.wait_for(client.call(method, reply), timeout)
        except TimeoutError:
            left = ", ".join(name for name, _, _ in steps[index:])
            return (
                f"teardown: no reply to {method.name} for {what} within {timeout:g} s; "
                f"left in place: {left}"
            )
    return None


async def queue_depths(client: AMQPClient, options: PerfOptions) -> dict[str, int]:
    """Ready message count of every queue (passive declare)."""
    depths: dict[str, int] = {}
    for name in options.queue_names():
        ok = await client.call(
            commands.Queue.Declare(queue=name, passive=True), commands.Queue.DeclareOk
        )
        depths[name] = ok.message_count or 0
    return depths
