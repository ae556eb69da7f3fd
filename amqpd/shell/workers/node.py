"""What a `Server` does differently as one worker of several (``--workers N``, N > 1).

Worker 0 (the front) places vhosts, gates every new connection (amqpd/shell/workers/
front.py) and replicates the access state after each change; worker K >= 1 listens on
its Unix sockets only: hand-overs and the control link (amqpd/shell/workers/inbox.py),
its management API and Prometheus endpoints for worker 0's gateway, and its admin socket
in its own data directory (``amqpd ctl --data-dir DATA/shard-K`` reaches it).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import suppress
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import anyio
import anyio.abc

from amqpd.model import user_limits
from amqpd.model.broker import Broker
from amqpd.shell import alarm_limits
from amqpd.shell.admin_socket import AdminReply, send_request
from amqpd.shell.workers import placement as placements
from amqpd.shell.workers.channel_tally import ChannelTally
from amqpd.shell.workers.definitions_merge import (
    keep_topology,
    split_topology,
    summed_imports,
    take_topology,
)
from amqpd.shell.workers.forward_links import ForwardInbox
from amqpd.shell.workers.front import Front
from amqpd.shell.workers.gateway import (
    UnixCaller,
    management_gateway,
    metrics_gateway,
    unix_caller,
)
from amqpd.shell.workers.handover import Arrival
from amqpd.shell.workers.inbox import listen_unix, serve_links, take_handovers
from amqpd.shell.workers.moves import HandoverLinks
from amqpd.shell.workers.placement import Placement
from amqpd.shell.workers.role import WorkerRole
from amqpd.shell.workers.spread import SpreadLinks
from persistence.errors import StoreError

log = logging.getLogger(__name__)

Handle = Callable[[anyio.abc.SocketStream, Arrival], Coroutine[Any, Any, None]]
Local = Callable[[dict[str, Any]], Awaitable[AdminReply]]
VHOST_LISTINGS = frozenset({"list-queues", "list-exchanges", "list-bindings", "list-consumers"})
SPREAD_LISTINGS = frozenset({"list-queues", "list-consumers"})  # a spread vhost's: merged
# every worker's rows: connections and channels, and the links of each vhost's worker
NODE_LISTINGS = frozenset(
    {"list-connections", "list-channels", "list-shovels", "list-federation-links"}
)


@runtime_checkable
class PlacementStore(Protocol):
    """A store that records the placement itself (persistence.postgres.store.PgStore)."""

    async def load_placement(self) -> str | None: ...

    async def save_placement(self, document: str) -> None: ...

    async def first_queue_beyond(self, workers: int) -> tuple[int, str, str] | None: ...


async def stored_placement(store: object, workers: int) -> Placement | None:
    """The placement a PostgreSQL store records (None: none, or an SQLite store, whose
    record is placement.json), checked against the worker count, ``--workers 1`` included,
    as is each spread vhost's queue in a worker's schema (amqpd/cli/worker_count.py checks
    an SQLite node's before it starts).

    Raises:
        StoreError: The record does not fit the worker count (exit 2), a queue lives on a
            worker beyond it, or either cannot be read.
    """
    if not isinstance(store, PlacementStore):
        return None
    document = await store.load_placement()
    try:
        placement = (
            None
            if document is None
            else Placement.from_json(json.loads(document), workers, shared=True)
        )
    except ValueError as exc:  # PlacementError included
        raise StoreError(f"the placement recorded in the store: {exc}") from None
    beyond = await store.first_queue_beyond(workers)
    if beyond is not None:
        index, vhost, name = beyond
        raise StoreError(
            f"queue '{name}' in vhost '{vhost}' lives on worker {index} (its data is in the "
            f"schema amqpd_shard_{index}): start with --workers {index + 1} or more"
        )
    return placement


class WorkerNode:
    """One worker's part in the node: its role, the placement, the links."""

    def __init__(
        self,
        role: WorkerRole,
        broker: Broker,
        data_dir: Path | None,
        shared: bool = False,
        spread_vhosts: tuple[str, ...] = (),
    ) -> None:
        self.role = role
        self.broker = broker
        self.spread_vhosts = spread_vhosts  # "*": every vhost (docs/multicore.md "Stage 2")
        self.spread: SpreadLinks | None = None  # their links, once started
        self.data_dir = data_dir  # this worker's own (DATA or DATA/shard-K)
        # a shared store (PostgreSQL) records the placement itself: `load_placement`
        self.placement = (
            Placement(role.count, fresh=True) if shared else placements.load(data_dir, role.count)
        )
        self._placement_store: PlacementStore | None = None
        self.front: Front | None = None
        self.forward_inbox: ForwardInbox | None = None  # stage 2: publishes forwarded here
        self.callers: list[UnixCaller] = []  # the gateways' clients (worker 0)
        self.topology: dict[int, dict[str, Any]] = {}  # see `split_definitions`
        self.channels = ChannelTally(role, broker)  # a user's max-channels for the node
        broker.other_workers = self.channels
        self.channels.publish()  # none yet (a restarted worker's predecessor had some)
        alarm_limits.restore(role.runtime, broker.alarms)  # amqpd ctl's changes, if any
        if role.front:
            # until the store is open, the vhosts seen are those in worker 0's store (some
            # perhaps created while it ran as one process): they stay on worker 0
            self.placement.fresh = True
            broker.hosts = lambda name: self.is_spread(name) or self.placement.place(name) == 0
        else:
            broker.hosts = lambda name: (
                self.is_spread(name) or self.placement.owner(name) == role.index
            )

    def is_spread(self, vhost: str) -> bool:
        """Whether ``vhost`` lives on every worker (its queues on the declaring connection's)."""
        spread = self.spread_vhosts
        return bool(spread) and ("*" in spread or vhost in spread)

    async def load_placement(self, store: object) -> None:
        """Before the store is loaded: a PostgreSQL store's recorded placement (worker 0's
        schema holds the node's, worker K's a copy), which active and standby nodes share;
        the SQLite store's is placement.json, read at start.

        Raises:
            StoreError: The record does not fit the worker count, or cannot be read.
        """
        if not isinstance(store, PlacementStore):
            return
        self._placement_store = store
        placement = await stored_placement(store, self.role.count)
        if placement is not None:
            placement.fresh = self.placement.fresh
            self.placement = placement

    async def _save_placement(self) -> None:
        if self._placement_store is not None:
            await self._placement_store.save_placement(json.dumps(self.placement.to_json()))
        else:
            placements.save(self.data_dir, self.placement)

    def store_opened(self) -> None:
        """The store's vhosts are known: vhosts from now on (a definitions file's too) are
        new ones, spread over the workers."""
        self.placement.fresh = False

    async def start_forward_inbox(
        self, group: anyio.abc.TaskGroup, after_core: Callable[[], None], timeout: float
    ) -> HandoverLinks | None:
        """Every worker: take the publishes other workers forward to its queues (issue 26
        stage 2; amqpd/shell/workers/forward_links.py); with spread vhosts, their links
        (spread.py) and the hand-over links their connections move on (moves.py: a
        restarting worker is waited for up to ``timeout``)."""
        self.forward_inbox = ForwardInbox(self.broker, after_core)
        await group.start(self.forward_inbox.serve, self.role.forward_socket(self.role.index))
        if self.spread_vhosts:
            spread = self.spread = SpreadLinks(self.role, self.broker, self.is_spread, after_core)
            self.broker.replica_of = lambda name: spread if self.is_spread(name) else None
            for name, vhost in self.broker.vhosts.items():
                if self.is_spread(name):
                    vhost.replica = spread
                    vhost.consuming = spread.consuming
            self.forward_inbox.on_snapshot = spread.snapshot_applied
            group.start_soon(spread.forwarder.run)
            await spread.ready()  # no connection before it has the others' queues
            return HandoverLinks(self.role, timeout)
        return None

    def after_core(self) -> None:
        """After input to the core: answers for other workers (a batch may have committed),
        a spread vhost's changes and forwarded publishes out."""
        if self.forward_inbox is not None:
            self.forward_inbox.wake()
        if self.spread is not None:
            self.spread.flush()

    async def take_moved(self, handle: Handle) -> None:
        """Worker 0 of a node with spread vhosts: take the connections other workers move
        here (worker K takes them on the socket worker 0 hands over on, inbox.py)."""
        path = self.role.handover_socket(0)
        listener = listen_unix(path, socket.SOCK_SEQPACKET)
        try:
            await take_handovers(listener, handle)
        finally:
            listener.close()
            with suppress(OSError):
                path.unlink()

    async def on_front(self, request: dict[str, Any], local: Local) -> AdminReply | None:
        """An admin request that worker 0 owns (runtime parameters): sent to worker 0's admin
        socket from worker K (its data directory is DATA/shard-K), handled by ``local`` on
        worker 0."""
        if self.front is None and self.data_dir is not None:
            return await anyio.to_thread.run_sync(send_request, self.data_dir.parent, request)
        return await local(request)

    async def start_front(
        self, group: anyio.abc.TaskGroup, handshake_timeout: float, handle: Handle
    ) -> Front:
        """Worker 0, once its store is open: record the placement, link to the workers, and
        (spread vhosts) take the connections other workers move here with ``handle``."""
        if self.spread is not None:
            group.start_soon(self.take_moved, handle)
        self._forget_deleted()
        for name in self.broker.access.state.vhosts:
            self.placement.place(name)
        await self._save_placement()
        self.front = Front(
            self.role, self.placement, handshake_timeout, lambda: self.broker.access.state
        )
        self.front.topology = self.topology
        self.front.refusal = self.connection_refusal
        self.front.spread = self.is_spread
        group.start_soon(self.front.run_control)
        return self.front

    async def start_back(
        self,
        group: anyio.abc.TaskGroup,
        handle: Handle,
        adopt: Callable[[dict[str, Any]], Awaitable[None]],
    ) -> None:
        """Worker K: take hand-overs and the state from worker 0 (``adopt``: the message's
        access state, front and definitions, amqpd/shell/workers/front.py)."""

        async def adopt_state(message: dict[str, Any], placement: Placement) -> None:
            self.placement = placement
            await self._save_placement()
            await adopt(message)
            self.channels.publish()  # the users with a max-channels limit may have changed

        await group.start(serve_links, self.role, handle, adopt_state)

    def split_definitions(self, data: Any) -> Any:
        """Worker 0, importing a definitions file at startup: the document for itself; the
        exchanges, queues and bindings of vhosts on other workers are sent to them with the
        state (their vhosts are placed now)."""
        if not isinstance(data, dict):
            return data
        mine, self.topology = self._split(data)
        return mine

    def _split(self, data: dict[str, Any]) -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
        """A definitions document: the part for worker 0 (with every access section), and
        each other worker's exchanges, queues and bindings (the document's vhosts placed)."""
        for item in data.get("vhosts") or []:
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                self.placement.place(item["name"])
        return split_topology(data, self.placement.owner)

    async def access_saved(self) -> None:
        """Worker 0: the access state changed and is stored; record the placement and
        have every worker apply both."""
        if self.front is None:
            return
        self._forget_deleted()
        for name in self.broker.access.state.vhosts:
            self.placement.place(name)
        await self._save_placement()
        self.channels.publish()  # the users with a max-channels limit may have changed
        await self.front.replicate()

    async def ctl(self, request: dict[str, Any], local: Local) -> AdminReply:
        """Worker 0: an ``amqpd ctl`` request answered for the whole node. A vhost's
        listing comes from its worker; connections and channels from every worker, merged;
        close-connection goes to whichever worker has the connection; an alarm's limit is
        changed on every worker."""
        command = request.get("command")
        if command in VHOST_LISTINGS:
            vhost = str(request.get("vhost") or "/")
            if not self.is_spread(vhost):
                owner = self.placement.owner(vhost)
                return await local(request) if owner == 0 else await self._ask(owner, request)
            if command not in SPREAD_LISTINGS:
                return await local(request)  # every worker has its exchanges and bindings
        if command in NODE_LISTINGS or command in SPREAD_LISTINGS:
            replies = [await local(request)]
            replies += [await self._ask(index, request) for index in range(1, self.role.count)]
            return _merge_tables(replies)
        if command == "status":
            return await self._status(request, local)
        if command in alarm_limits.COMMANDS:  # node-wide: every worker's alarms
            reply = await local(request)
            if not reply.ok:
                return reply
            alarm_limits.remember(self.role.runtime, request)  # a restarted worker's too
            for index in range(1, self.role.count):
                answer = await self._ask(index, request)
                if not answer.ok:
                    return answer
            return reply
        if command == "close-connection":
            reply = await local(request)
            for index in range(1, self.role.count):
                if reply.ok:
                    break
                reply = await self._ask(index, request)
            return reply
        return await local(request)

    async def definitions(self, request: dict[str, Any], local: Local) -> AdminReply:
        """Worker 0: ``amqpd definitions export|import`` for the whole node. Export: the
        access state from here, each vhost's exchanges, queues and bindings from its worker.
        Import: the access part and this worker's vhosts here (replicated before it
        answers), then each other worker's vhosts there."""
        if request.get("command") == "export":
            reply = await local(request)
            if not reply.ok:
                return reply
            document = json.loads(reply.text)
            keep_topology(document, 0, self.placement)
            for index in range(1, self.role.count):
                answer = await self._ask(index, request)
                if not answer.ok:
                    return answer
                take_topology(document, json.loads(answer.text), index, self.placement)
            return AdminReply(True, json.dumps(document, indent=2))
        document = request.get("definitions")
        if not isinstance(document, dict):
            return await local(request)
        mine, theirs = self._split(document)
        reply = await local({**request, "definitions": mine})
        outputs = [reply.text]
        for index, part in sorted(theirs.items()):
            if not reply.ok:
                return reply
            reply = await self._ask(index, {**request, "definitions": part})
            outputs.append(reply.text)
        return AdminReply(True, summed_imports(outputs)) if reply.ok else reply

    async def _status(self, request: dict[str, Any], local: Local) -> AdminReply:
        """``amqpd ctl status`` for the node: worker 0's (its pid is the node's, the
        supervisor's), with the memory (which counts the supervisor's: node_sample.py
        `of_node`), descriptors, sockets, store size and totals summed over the workers, and
        a row per worker (its pid, vhosts and totals)."""
        reply = await local(request)
        if not reply.ok:
            return reply
        status = json.loads(reply.text)
        rows = [self._worker_row(0, {**status, "pid": str(os.getpid())})]
        for index in range(1, self.role.count):
            answer = await self._ask(index, request)
            if not answer.ok:
                rows.append({"index": index, "pid": None, "state": answer.text})
                continue
            theirs = json.loads(answer.text)
            rows.append(self._worker_row(index, theirs))
            _add_status(status, theirs)
        status["workers"] = rows
        return AdminReply(True, json.dumps(status))

    def _worker_row(self, index: int, status: dict[str, Any]) -> dict[str, Any]:
        """One worker in ``amqpd ctl status``: its vhosts are those placed on it and the
        spread ones (on every worker)."""
        return {
            "index": index,
            "pid": status["pid"],
            "state": "running",
            "vhosts": sorted(
                name
                for name in self.broker.access.state.vhosts
                if self.is_spread(name) or self.placement.owner(name) == index
            ),
            "connections": status["totals"]["connections"],
            "queues": status["totals"]["queues"],
            "messages": status["queue_totals"]["messages"],
        }

    async def connection_refusal(self, user: str, vhost: str) -> str | None:
        """Why one more connection of ``user`` to ``vhost`` is refused by the node's
        connection limit (``connection_max``), a spread vhost's ``max-connections`` (its
        connections are on every worker) or the user's ``max-connections``, in RabbitMQ's
        order (rabbit_reader) and wording, counting the connections of every worker (None:
        admitted, or for the engine to refuse: an unknown vhost is "not found" first, and a
        vhost on one worker has all its connections there, where its limit is checked).
        Only asked when a limit is set; a worker that does not answer (restarting) has
        none. Opens racing through the gate at the same moment may pass together, as with
        RabbitMQ's connection tracking."""
        state = self.broker.access.state
        info = state.vhosts.get(vhost)
        if info is None:
            return None
        node_limit = self.broker.config.connection_max
        vhost_limit = info.max_connections if self.is_spread(vhost) else None
        if vhost_limit is not None and vhost_limit < 0:
            vhost_limit = None  # negative: no limit
        user_limited = user_limits.MAX_CONNECTIONS in (state.user_limits.get(user) or {})
        if node_limit is None and vhost_limit is None and not user_limited:
            return None
        users = [connection.user for connection in self.broker.connections]
        total, of_user = len(users), users.count(user)
        of_vhost = self.broker.vhost_connections.get(vhost, 0)
        request = {"group": "ctl", "command": "count-connections", "user": user, "vhost": vhost}
        for index in range(1, self.role.count):
            reply = await self._ask(index, request)
            if reply.ok:
                counts = json.loads(reply.text)
                total += int(counts["connections"])
                of_user += int(counts["of_user"])
                of_vhost += int(counts.get("of_vhost", 0))
        if node_limit is not None and total >= node_limit:
            return f"connection refused: node connection limit ({node_limit}) is reached"
        if vhost_limit is not None and of_vhost >= vhost_limit:
            refused = f"access to vhost '{vhost}' refused for user '{user}'"
            return f"{refused}: connection limit ({vhost_limit}) is reached"
        return user_limits.connection_refused(self.broker, user, itertools.repeat(user, of_user))

    async def _ask(self, index: int, request: dict[str, Any]) -> AdminReply:
        """Worker ``index``'s answer, through its admin socket in its data directory."""
        base = self.data_dir
        reply = None
        if base is not None:
            shard = self.role.with_index(index).data_dir(base)
            assert shard is not None
            reply = await anyio.to_thread.run_sync(send_request, shard, request)
        if reply is None:
            return AdminReply(False, f"worker {index} is not running (restarting?); try again")
        return reply

    def _forget_deleted(self) -> None:
        self.placement.keep_only(self.broker.access.state.vhosts)

    def placement_owner(self, vhost: str) -> int:
        """The worker of ``vhost`` now (the gateway asks per request)."""
        return self.placement.owner(vhost)

    def management_gateway(self, app: Any) -> Any:
        """Worker 0's management ``app`` behind the gateway that answers for every worker
        (amqpd/shell/workers/gateway.py)."""
        caller = unix_caller(app, self.role.management_socket)
        self.callers.append(caller)
        return management_gateway(
            app, self.role.count, self.placement_owner, caller, self.is_spread
        )

    def metrics_gateway(self, app: Any) -> Any:
        """Worker 0's Prometheus ``app`` behind the gateway that merges every worker's."""
        caller = unix_caller(app, self.role.prometheus_socket)
        self.callers.append(caller)
        return metrics_gateway(app, self.role.count, caller)

    async def aclose(self) -> None:
        """Close the links to the workers (hand-over sockets, the gateways' clients)."""
        if self.front is not None:
            self.front.close()
        for caller in self.callers:
            await caller.aclose()


def _merge_tables(replies: list[AdminReply]) -> AdminReply:
    """One listing of every worker's rows (the first failure instead, if any)."""
    failed = next((reply for reply in replies if not reply.ok), None)
    if failed is not None:
        return failed
    tables = [json.loads(reply.text) for reply in replies]
    merged = tables[0]
    for table in tables[1:]:
        merged["rows"].extend(table["rows"])
    return AdminReply(True, json.dumps(merged))


def _add_status(node: dict[str, Any], worker: dict[str, Any]) -> None:
    """Add one more worker's ``amqpd ctl status`` figures to the node's (an alarm is the
    node's if any worker has it, as in ``/api/nodes``)."""
    node["alarms"] = sorted({*node["alarms"], *worker["alarms"]})
    node["memory"]["alarm"] = node["memory"]["alarm"] or worker["memory"]["alarm"]
    node["disk"]["alarm"] = node["disk"]["alarm"] or worker["disk"]["alarm"]
    node["memory"]["used"] += worker["memory"]["used"]
    node["store_bytes"] += worker["store_bytes"]
    for key in ("used", "sockets_used"):
        node["file_descriptors"][key] += worker["file_descriptors"][key]
    for section in ("totals", "queue_totals"):
        for key, value in worker[section].items():
            if isinstance(value, int):
                node[section][key] = node[section].get(key, 0) + value
