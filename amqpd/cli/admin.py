"""``amqpd users|vhosts|definitions …``: manage access control of a broker's data directory.

Part of the I/O shell. The command line becomes a request (amqpd/admin_commands.py, which
carries it out). If a broker is running on ``--data-dir`` the request goes to its admin
socket (amqpd/admin_socket.py) and takes effect at once: a new user can log in, changed
permissions apply to open channels, a deleted user's or vhost's connections are closed
with 320, as with ``rabbitmqctl``. Otherwise the command opens the directory's SQLite store
(or the PostgreSQL store of ``--store``) itself (taking its lock), carries the request out
on the stored definitions and writes the result back (topology changes, then the access
tables: one transaction each); a stopped ``--workers N`` node's other workers' stores too
where the command reads or changes their topology (amqpd/cli/shards.py).

Commands (RabbitMQ's ``rabbitmqctl`` equivalents in brackets):

    users add NAME [PASSWORD] [--tags t1,t2]      [add_user] (password from stdin if omitted)
    users delete NAME                             [delete_user]
    users change-password NAME [PASSWORD]         [change_password]
    users set-tags NAME [TAG ...]                 [set_user_tags]
    users list                                    [list_users]
    users set-limit NAME LIMIT N                  [set_user_limits] (max-connections, max-channels)
    users clear-limit NAME LIMIT                  [clear_user_limits]
    users set-permissions NAME CONF WRITE READ [--vhost V]   [set_permissions -p V]
    users clear-permissions NAME [--vhost V]      [clear_permissions -p V]
    users list-permissions [--vhost V]            [list_permissions -p V]
    vhosts add NAME [--description D] [--max-connections N]  [add_vhost, set_vhost_limits]
    vhosts set-max-connections NAME N             [set_vhost_limits] (negative: no limit)
    vhosts set-max-queues NAME N                  [set_vhost_limits] (negative: no limit)
    vhosts delete NAME                            [delete_vhost] (with everything in it)
    vhosts list                                   [list_vhosts]
    definitions export [FILE]                     [export_definitions] (stdout without FILE or -)
    definitions import FILE                       [import_definitions] (- is stdin); exit 1 and
                                                  a list if something could not be applied
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from amqpd.cli.shards import (
    NodeShards,
    SqliteShards,
    delete_in_shards,
    export_node,
    import_in_shards,
    removes_topology,
    split_import,
    uses_shards,
)
from amqpd.model import bounded_json
from amqpd.model.admin_commands import AdminError, Outcome, execute, problems_text
from amqpd.model.auth import hash_password
from amqpd.model.broker import Broker, BrokerConfig
from amqpd.shell.admin_socket import AdminSocketError, send_request
from persistence.backend import StoreBackend, parse_store_url
from persistence.errors import StoreError
from persistence.journal import Journal
from persistence.store import Store

COMMANDS = ("users", "vhosts", "definitions")


def build_parser() -> argparse.ArgumentParser:
    """The parser of the admin commands."""
    parser = argparse.ArgumentParser(
        prog="amqpd",
        description="Manage users, vhosts and permissions of the broker using a data "
        "directory: through its admin socket while it runs, in its store while it is stopped.",
    )
    data_dir = argparse.ArgumentParser(add_help=False)
    data_dir.add_argument(
        "--data-dir",
        type=Path,
        default=Path(os.environ.get("AMQPD_DATA_DIR", "./data")),
        help="the broker's data directory [AMQPD_DATA_DIR, default ./data]",
    )
    data_dir.add_argument(
        "--store",
        default=os.environ.get("AMQPD_STORE") or None,
        metavar="URL",
        help="the broker's PostgreSQL store, used when no broker answers on --data-dir "
        "[AMQPD_STORE, default: the SQLite store in --data-dir]",
    )
    vhost = argparse.ArgumentParser(add_help=False)
    vhost.add_argument("--vhost", "-p", default="/", help="virtual host (default /)")
    groups = parser.add_subparsers(dest="group", required=True)

    users = groups.add_parser("users", help="users and their permissions").add_subparsers(
        dest="command", required=True
    )
    p = users.add_parser("add", parents=[data_dir], help="add a user")
    p.add_argument("name")
    p.add_argument("password", nargs="?", help="read from standard input if omitted")
    p.add_argument("--tags", default="", help="comma-separated tags, e.g. administrator")
    p.add_argument("--no-password", action="store_true", help="certificate (EXTERNAL) login only")
    p = users.add_parser("delete", parents=[data_dir], help="delete a user")
    p.add_argument("name")
    p = users.add_parser("change-password", parents=[data_dir], help="set a new password")
    p.add_argument("name")
    p.add_argument("password", nargs="?", help="read from standard input if omitted")
    p = users.add_parser("set-tags", parents=[data_dir], help="replace a user's tags")
    p.add_argument("name")
    p.add_argument("tags", nargs="*")
    users.add_parser("list", parents=[data_dir], help="list users and their tags")
    p = users.add_parser(
        "set-limit", parents=[data_dir], help="max-connections or max-channels (negative: none)"
    )
    p.add_argument("user")
    p.add_argument("name", metavar="LIMIT")
    p.add_argument("value", type=int)
    p = users.add_parser("clear-limit", parents=[data_dir], help="remove a user limit")
    p.add_argument("user")
    p.add_argument("name", metavar="LIMIT")
    p = users.add_parser(
        "set-permissions", parents=[data_dir, vhost], help="grant configure/write/read regexes"
    )
    p.add_argument("name")
    p.add_argument("configure")
    p.add_argument("write")
    p.add_argument("read")
    p = users.add_parser("clear-permissions", parents=[data_dir, vhost], help="revoke access")
    p.add_argument("name")
    users.add_parser("list-permissions", parents=[data_dir, vhost], help="permissions in a vhost")

    vhosts = groups.add_parser("vhosts", help="virtual hosts").add_subparsers(
        dest="command", required=True
    )
    p = vhosts.add_parser("add", parents=[data_dir], help="add a virtual host")
    p.add_argument("name")
    p.add_argument("--description", default="")
    p.add_argument("--max-connections", type=int, default=None)
    p = vhosts.add_parser(
        "set-max-connections", parents=[data_dir], help="limit connections (negative: none)"
    )
    p.add_argument("name")
    p.add_argument("max_connections", type=int)
    p = vhosts.add_parser(
        "set-max-queues", parents=[data_dir], help="limit queues (negative: none)"
    )
    p.add_argument("name")
    p.add_argument("max_queues", type=int)
    p = vhosts.add_parser("delete", parents=[data_dir], help="delete a vhost and its contents")
    p.add_argument("name")
    vhosts.add_parser("list", parents=[data_dir], help="list virtual hosts")

    definitions = groups.add_parser("definitions", help="RabbitMQ definitions JSON").add_subparsers(
        dest="command", required=True
    )
    p = definitions.add_parser("export", parents=[data_dir], help="write the definitions")
    p.add_argument("file", nargs="?", type=Path, help="standard output if omitted or -")
    p = definitions.add_parser("import", parents=[data_dir], help="import a definitions file")
    p.add_argument("file", type=Path, help="- reads standard input")
    return parser


def main(argv: Sequence[str], stdin: TextIO | None = None, stdout: TextIO | None = None) -> int:
    """Run one admin command; 0 on success, 1 on a refused command, 2 when neither the
    running broker nor the store can be reached."""
    args = build_parser().parse_args(argv)
    out = stdout or sys.stdout
    try:
        request = _request(args, stdin)
        outcome = run_request(args.data_dir, request, args.store)
    except AdminError as exc:
        print(f"amqpd: {exc}", file=sys.stderr)
        return 1
    except AdminSocketError as exc:
        print(f"amqpd: {exc}", file=sys.stderr)
        return 2
    except StoreError as exc:
        if "in use by another amqpd" in str(exc):
            print(
                f"amqpd: {exc}\nThe broker using it has no admin socket "
                f"({args.data_dir}/amqpd.sock): stop it and run the command again, or put "
                "the change in a definitions file and restart it with --definitions FILE.",
                file=sys.stderr,
            )
        else:
            print(f"amqpd: cannot open the store: {exc}", file=sys.stderr)
        return 2
    to_file = args.group == "definitions" and args.command == "export" and args.file is not None
    if to_file and str(args.file) != "-":
        try:
            args.file.write_text(outcome.output + "\n")
        except OSError as exc:
            print(f"amqpd: cannot write {args.file}: {exc}", file=sys.stderr)
            return 1
        print(f"Exported definitions to {args.file}.", file=out)
    elif not outcome.problems:
        print(outcome.output, file=out)
    if outcome.problems:
        print(f"amqpd: {problems_text(outcome)}", file=sys.stderr)
        return 1
    return 0


def run_request(data_dir: Path, request: dict[str, Any], store_url: str | None = None) -> Outcome:
    """Carry a request out on the broker running on ``data_dir`` (its admin socket) or, if
    none runs, on its store: ``store_url`` (default ``AMQPD_STORE``) if it names a
    PostgreSQL database, else the directory's SQLite store.

    Raises:
        AdminError: the command was refused.
        AdminSocketError: a broker is there but did not answer.
        StoreError: the store cannot be opened.
    """
    reply = send_request(data_dir, request)
    if reply is None:
        url = store_url or os.environ.get("AMQPD_STORE") or None
        return asyncio.run(_run_on_store(data_dir, request, url))
    if not reply.ok:
        raise AdminError(reply.text)
    return Outcome(reply.text)


def _request(args: argparse.Namespace, stdin: TextIO | None) -> dict[str, Any]:
    """The request for `admin_commands.execute`: the CLI's arguments, with the password
    hashed here and a definitions file read here (paths are the caller's)."""
    request: dict[str, Any] = {
        key: value
        for key, value in vars(args).items()
        if key not in ("data_dir", "store", "password", "no_password", "file")
    }
    if args.group == "users" and args.command == "add":
        request["tags"] = args.tags.split(",")
        request["password_hash"] = (
            "" if args.no_password else hash_password(_password(args.password, stdin))
        )
    elif args.group == "users" and args.command == "change-password":
        request["password_hash"] = hash_password(_password(args.password, stdin))
    elif args.group == "definitions" and args.command == "import":
        try:
            text = (stdin or sys.stdin).read() if str(args.file) == "-" else args.file.read_text()
            request["definitions"] = bounded_json.loads(text)
        except (OSError, ValueError) as exc:
            raise AdminError(f"cannot read {args.file}: {exc}") from exc
    return request


async def _open(data_dir: Path, store_url: str | None) -> StoreBackend:
    """The SQLite store in ``data_dir``, or the PostgreSQL store if no broker holds its lock."""
    if store_url is None:
        return await Store.open(data_dir)
    parse_store_url(store_url)
    # imported here: asyncpg is loaded by the processes that use a PostgreSQL store only
    from amqpd.cli.pg_shards import open_node_store

    return await open_node_store(store_url)


async def _run_on_store(data_dir: Path, request: dict[str, Any], store_url: str | None) -> Outcome:
    """Carry the request out on a stopped broker's store (and, for a --workers node, on its
    workers' shards: amqpd/cli/shards.py)."""
    store = await _open(data_dir, store_url)
    try:
        shards = await _node_shards(data_dir, store_url, store, request)
        try:
            return await _carry_out(store, shards, request)
        finally:
            await shards.close()
    finally:
        await store.close()


async def _node_shards(
    data_dir: Path, store_url: str | None, store: StoreBackend, request: dict[str, Any]
) -> NodeShards:
    """The shards of the node whose worker 0 store is ``store``: SQLite's ``shard-K/``
    directories, or PostgreSQL's ``amqpd_shard_K`` schemas (locked and opened now, and only
    for a command that uses them)."""
    if store_url is None:
        return SqliteShards(data_dir)
    from amqpd.cli.pg_shards import PgShards  # see `_open`
    from persistence.postgres.store import PgStore

    assert isinstance(store, PgStore)
    if uses_shards(request):
        return await PgShards.find(store_url, store)
    return PgShards(store_url, store, {})


async def _carry_out(store: StoreBackend, shards: NodeShards, request: dict[str, Any]) -> Outcome:
    """Load the store's definitions (not its messages) into a broker core, execute, write
    back what changed (topology changes, then the access tables: one transaction each)."""
    journal = Journal()
    broker = Broker(BrokerConfig(), journal)
    broker.load_access(await store.load_access())
    broker.recover(await store.load(messages=False))
    request, parts = await split_import(shards, request)  # a --workers node's shards
    outcome = execute(broker, request)
    exporting = request.get("group") == "definitions" and request.get("command") == "export"
    if exporting and shards.indexes:
        # a --workers node: the other workers' vhosts are in their shards
        return Outcome(await export_node(shards, broker.access.state, outcome.output))
    if outcome.changed and removes_topology(request):
        # a --workers node: what the vhost had on the other workers goes too
        await delete_in_shards(shards, await store.load_access(), request)
    if outcome.changed:
        batch = journal.take_batch()
        if batch is not None:
            await store.apply(batch)  # a deleted vhost's queues go before the vhost
        await store.save_access(broker.access.state)
    if parts:
        outcome = await import_in_shards(shards, broker.access.state, parts, outcome)
    return outcome


def _password(given: str | None, stdin: TextIO | None) -> str:
    if given is not None:
        return given
    line = (stdin or sys.stdin).readline()
    if not line:
        raise AdminError("no password given (as an argument or on standard input)")
    return line.rstrip("\r\n")
