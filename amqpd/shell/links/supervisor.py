"""Starts, stops and restarts the broker's shovels when their parameters change.

Part of the I/O shell. The model only stores and validates the ``shovel`` runtime
parameters (amqpd/model/parameters.py); after every change to the definitions the server
calls `LinkSupervisor.reconcile`, which compares the stored parameters with the running
links: a new parameter starts a link (an asyncio task on the broker's loop running
`ShovelLink.run`), a changed one restarts it, a cleared one (or one of a deleted vhost)
stops it. A link that reached ``src-delete-after`` asks the server to clear its parameter,
as RabbitMQ's shovel does. A link's failure never leaves its task: it is retried there.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from amqpd.model.broker import Broker
from amqpd.model.shovels import parse, validate
from amqpd.shell.links.link_specs import LocalEndpoint
from amqpd.shell.links.runs_here import runs_here

if TYPE_CHECKING:  # imported by the first shovel (link_specs.py: aiormq only when used)
    from amqpd.shell.links.shovel import ShovelLink

__all__ = ["SHOVEL_COLUMNS", "LinkSupervisor", "shovel_table"]

log = logging.getLogger(__name__)

Finished = Callable[[str, str], Awaitable[None]]


class LinkSupervisor:
    """The running shovels of one broker, keyed by (vhost, name)."""

    def __init__(self, broker: Broker, local: LocalEndpoint, node: str, finished: Finished):
        self._broker = broker
        self._local = local
        self._node = node
        self._finished = finished
        self._links: dict[tuple[str, str], tuple[Any, ShovelLink, asyncio.Task[None]]] = {}
        self._stopping: set[asyncio.Task[None]] = set()

    def reconcile(self) -> None:
        """Make the running shovels match the stored ``shovel`` parameters."""
        wanted = {
            (vhost, name): value
            for (component, vhost, name), value in self._broker.access.state.parameters.items()
            if component == "shovel" and runs_here(self._broker, vhost, name)
        }
        for key, (value, _link, _task) in list(self._links.items()):
            if wanted.get(key) != value:
                self._stop(key)
        for key, value in wanted.items():
            if key not in self._links and not validate(key[1], value):
                self._start(key, value)

    def _start(self, key: tuple[str, str], value: Any) -> None:
        from amqpd.shell.links.shovel import ShovelLink

        link = ShovelLink(parse(key[0], key[1], value), self._local, self._node)
        task = asyncio.get_running_loop().create_task(self._run(key, link))
        self._links[key] = (value, link, task)
        log.info("shovel '%s' in vhost '%s' started", key[1], key[0])

    async def _run(self, key: tuple[str, str], link: ShovelLink) -> None:
        try:
            await link.run()
        except Exception:  # a bug in a link must not take the broker down
            log.exception("shovel '%s' in vhost '%s' stopped by an error", key[1], key[0])
            return
        if link.reason == "shutdown, autodelete":
            log.info("shovel '%s' in vhost '%s' done (src-delete-after)", key[1], key[0])
            await self._finished(*key)

    def _stop(self, key: tuple[str, str]) -> None:
        _value, link, task = self._links.pop(key)
        link.stop(task)
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)
        log.info("shovel '%s' in vhost '%s' stopped", key[1], key[0])

    def status(self, vhost: str | None = None) -> list[dict[str, Any]]:
        """RabbitMQ's ``/api/shovels`` items, sorted by vhost and name."""
        return [
            link.status()
            for (where, _name), (_value, link, _task) in sorted(self._links.items())
            if vhost is None or where == vhost
        ]

    async def aclose(self) -> None:
        """Stop every shovel and wait until their connections are closed."""
        for key in list(self._links):
            self._stop(key)
        tasks = list(self._stopping)
        for task in tasks:
            with suppress(asyncio.CancelledError, Exception):
                await task


SHOVEL_COLUMNS = (
    "name",
    "vhost",
    "type",
    "state",
    "source",
    "destination",
    "termination_reason",
    "source_protocol",
    "destination_protocol",
    "last_changed",
)


def shovel_table(status: list[dict[str, Any]], node: str) -> dict[str, Any]:
    """``amqpd ctl list-shovels``: rabbitmqctl shovel_status's columns and banner."""
    rows = [
        [
            item["name"],
            item["vhost"],
            item["type"],
            item["state"],
            item.get("src_uri", ""),
            item.get("dest_uri", ""),
            item.get("reason", ""),
            item.get("src_protocol", ""),
            item.get("dest_protocol", ""),
            item["timestamp"],
        ]
        for item in status
    ]
    return {"banner": f"Shovel status on node {node} ...", "columns": SHOVEL_COLUMNS, "rows": rows}
