"""``amqpd users|vhosts|definitions …``: manage access control in a data directory.

Part of the I/O shell. The commands open the SQLite store of ``--data-dir`` (which takes
the directory's lock), change it in one transaction and close it. A running broker holds
that lock, so they work on a stopped broker's data directory; for a running broker, put the
change in a definitions file and (re)start it with ``--definitions FILE``, which imports it
at startup. The commands say so when the directory is in use.

Commands (RabbitMQ's ``rabbitmqctl`` equivalents in brackets):

    users add NAME [PASSWORD] [--tags t1,t2]      [add_user] (password from stdin if omitted)
    users delete NAME                             [delete_user]
    users change-password NAME [PASSWORD]         [change_password]
    users set-tags NAME [TAG ...]                 [set_user_tags]
    users list                                    [list_users]
    users set-permissions NAME CONF WRITE READ [--vhost V]   [set_permissions -p V]
    users clear-permissions NAME [--vhost V]      [clear_permissions -p V]
    users list-permissions [--vhost V]            [list_permissions -p V]
    vhosts add NAME [--description D] [--max-connections N]  [add_vhost, set_vhost_limits]
    vhosts set-max-connections NAME N             [set_vhost_limits] (negative: no limit)
    vhosts delete NAME                            [delete_vhost] (with everything in it)
    vhosts list                                   [list_vhosts]
    definitions export [FILE]                     [export_definitions] (stdout without FILE)
    definitions import FILE                       [import_definitions]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from amqpd.auth import (
    DEFAULT_HASHING,
    AccessState,
    Permission,
    User,
    VhostInfo,
    hash_password,
    validate_regex,
)
from amqpd.broker import Broker, BrokerConfig
from amqpd.definitions import DefinitionsError, export_definitions, import_definitions
from persistence.errors import StoreError
from persistence.journal import Journal
from persistence.records import RecoveredState
from persistence.store import Store

COMMANDS = ("users", "vhosts", "definitions")


class AdminError(Exception):
    """A command that cannot be carried out (printed, exit status 1)."""


def build_parser() -> argparse.ArgumentParser:
    """The parser of the admin commands."""
    parser = argparse.ArgumentParser(
        prog="amqpd",
        description="Manage users, vhosts and permissions in a stopped broker's data "
        "directory (a running broker imports --definitions FILE at startup).",
    )
    data_dir = argparse.ArgumentParser(add_help=False)
    data_dir.add_argument(
        "--data-dir",
        type=Path,
        default=Path(os.environ.get("AMQPD_DATA_DIR", "./data")),
        help="the broker's data directory [AMQPD_DATA_DIR, default ./data]",
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
    p = vhosts.add_parser("delete", parents=[data_dir], help="delete a vhost and its contents")
    p.add_argument("name")
    vhosts.add_parser("list", parents=[data_dir], help="list virtual hosts")

    definitions = groups.add_parser("definitions", help="RabbitMQ definitions JSON").add_subparsers(
        dest="command", required=True
    )
    p = definitions.add_parser("export", parents=[data_dir], help="write the definitions")
    p.add_argument("file", nargs="?", type=Path, help="standard output if omitted")
    p = definitions.add_parser("import", parents=[data_dir], help="import a definitions file")
    p.add_argument("file", type=Path)
    return parser


def main(argv: Sequence[str], stdin: TextIO | None = None, stdout: TextIO | None = None) -> int:
    """Run one admin command; 0 on success, 1 on a refused command, 2 on a bad store."""
    args = build_parser().parse_args(argv)
    out = stdout or sys.stdout
    handler = _HANDLERS[(args.group, args.command)]
    try:
        asyncio.run(_with_store(args.data_dir, lambda store: handler(store, args, stdin, out)))
    except AdminError as exc:
        print(f"amqpd: {exc}", file=sys.stderr)
        return 1
    except StoreError as exc:
        if "in use by another amqpd" in str(exc):
            print(
                f"amqpd: {exc}\nThese commands change a stopped broker's data directory. For a "
                "running broker, put the change in a definitions file and restart it with "
                "--definitions FILE.",
                file=sys.stderr,
            )
        else:
            print(f"amqpd: cannot open the store: {exc}", file=sys.stderr)
        return 2
    return 0


async def _with_store(data_dir: Path, action: Callable[[Store], Awaitable[None]]) -> None:
    store = await Store.open(data_dir)
    try:
        await action(store)
    finally:
        await store.close()


def _password(given: str | None, stdin: TextIO | None) -> str:
    if given is not None:
        return given
    line = (stdin or sys.stdin).readline()
    if not line:
        raise AdminError("no password given (as an argument or on standard input)")
    return line.rstrip("\r\n")


def _user(state: AccessState, name: str) -> User:
    user = state.users.get(name)
    if user is None:
        raise AdminError(f"no such user: '{name}'")
    return user


def _vhost(state: AccessState, name: str) -> VhostInfo:
    info = state.vhosts.get(name)
    if info is None:
        raise AdminError(f"no such vhost: '{name}'")
    return info


Handler = Callable[[Store, argparse.Namespace, "TextIO | None", TextIO], Awaitable[None]]


async def _users_add(
    store: Store, args: argparse.Namespace, stdin: TextIO | None, out: TextIO
) -> None:
    state = await store.load_access()
    if args.name in state.users:
        raise AdminError(f"user '{args.name}' already exists")
    password_hash = "" if args.no_password else hash_password(_password(args.password, stdin))
    tags = tuple(tag for tag in args.tags.split(",") if tag)
    state.users[args.name] = User(args.name, password_hash, DEFAULT_HASHING, tags)
    await store.save_access(state)
    print(f"Added user '{args.name}'.", file=out)


async def _users_delete(
    store: Store, args: argparse.Namespace, _in: TextIO | None, out: TextIO
) -> None:
    state = await store.load_access()
    _user(state, args.name)
    del state.users[args.name]
    for key in [key for key in state.permissions if key[0] == args.name]:
        del state.permissions[key]
    await store.save_access(state)
    print(f"Deleted user '{args.name}'.", file=out)


async def _users_password(
    store: Store, args: argparse.Namespace, stdin: TextIO | None, out: TextIO
) -> None:
    state = await store.load_access()
    user = _user(state, args.name)
    user.password_hash = hash_password(_password(args.password, stdin))
    user.hashing_algorithm = DEFAULT_HASHING
    await store.save_access(state)
    print(f"Changed the password of user '{args.name}'.", file=out)


async def _users_tags(
    store: Store, args: argparse.Namespace, _in: TextIO | None, out: TextIO
) -> None:
    state = await store.load_access()
    _user(state, args.name).tags = tuple(args.tags)
    await store.save_access(state)
    print(f"Set the tags of user '{args.name}' to {list(args.tags)}.", file=out)


async def _users_list(
    store: Store, _args: argparse.Namespace, _in: TextIO | None, out: TextIO
) -> None:
    state = await store.load_access()
    print("user\ttags", file=out)
    for user in state.users.values():
        print(f"{user.name}\t[{', '.join(user.tags)}]", file=out)


async def _set_permissions(
    store: Store, args: argparse.Namespace, _in: TextIO | None, out: TextIO
) -> None:
    state = await store.load_access()
    _user(state, args.name)
    _vhost(state, args.vhost)
    for regex in (args.configure, args.write, args.read):
        try:
            validate_regex(regex)
        except ValueError as exc:
            raise AdminError(str(exc)) from exc
    state.permissions[(args.name, args.vhost)] = Permission(args.configure, args.write, args.read)
    await store.save_access(state)
    print(f"Set permissions for user '{args.name}' in vhost '{args.vhost}'.", file=out)


async def _clear_permissions(
    store: Store, args: argparse.Namespace, _in: TextIO | None, out: TextIO
) -> None:
    state = await store.load_access()
    _user(state, args.name)
    if state.permissions.pop((args.name, args.vhost), None) is None:
        raise AdminError(f"user '{args.name}' has no permissions in vhost '{args.vhost}'")
    await store.save_access(state)
    print(f"Cleared permissions for user '{args.name}' in vhost '{args.vhost}'.", file=out)


async def _list_permissions(
    store: Store, args: argparse.Namespace, _in: TextIO | None, out: TextIO
) -> None:
    state = await store.load_access()
    _vhost(state, args.vhost)
    print("user\tconfigure\twrite\tread", file=out)
    for (user, vhost), p in state.permissions.items():
        if vhost == args.vhost:
            print(f"{user}\t{p.configure}\t{p.write}\t{p.read}", file=out)


async def _vhosts_add(
    store: Store, args: argparse.Namespace, _in: TextIO | None, out: TextIO
) -> None:
    state = await store.load_access()
    if args.name in state.vhosts:
        raise AdminError(f"vhost '{args.name}' already exists")
    state.vhosts[args.name] = VhostInfo(args.name, args.description, (), args.max_connections)
    await store.save_access(state)
    print(f"Added vhost '{args.name}'.", file=out)


async def _vhosts_limit(
    store: Store, args: argparse.Namespace, _in: TextIO | None, out: TextIO
) -> None:
    state = await store.load_access()
    limit = args.max_connections
    _vhost(state, args.name).max_connections = None if limit < 0 else limit
    await store.save_access(state)
    print(f"Set max-connections of vhost '{args.name}' to {limit}.", file=out)


async def _vhosts_delete(
    store: Store, args: argparse.Namespace, _in: TextIO | None, out: TextIO
) -> None:
    state = await store.load_access()
    _vhost(state, args.name)
    topology = await store.load(body_window=0)
    journal = Journal()
    for queue in topology.queues:
        if queue.vhost == args.name:
            journal.delete_queue(queue.vhost, queue.name)  # with its messages and bindings
    for exchange in topology.exchanges:
        if exchange.vhost == args.name:
            journal.delete_exchange(exchange.vhost, exchange.name)
    batch = journal.take_batch()
    if batch is not None:
        await store.apply(batch)
    del state.vhosts[args.name]
    for key in [key for key in state.permissions if key[1] == args.name]:
        del state.permissions[key]
    await store.save_access(state)
    print(f"Deleted vhost '{args.name}' and everything in it.", file=out)


async def _vhosts_list(
    store: Store, _args: argparse.Namespace, _in: TextIO | None, out: TextIO
) -> None:
    state = await store.load_access()
    print("name\tmax-connections\tdescription", file=out)
    for info in state.vhosts.values():
        limit = "" if info.max_connections is None else str(info.max_connections)
        print(f"{info.name}\t{limit}\t{info.description}", file=out)


async def _export(store: Store, args: argparse.Namespace, _in: TextIO | None, out: TextIO) -> None:
    state = await store.load_access()
    topology = await store.load(body_window=0)
    document = export_definitions(state, topology.exchanges, topology.queues, topology.bindings)
    text = json.dumps(document, indent=2, sort_keys=False) + "\n"
    if args.file is None:
        out.write(text)
    else:
        args.file.write_text(text)
        print(f"Exported definitions to {args.file}.", file=out)


async def _import(store: Store, args: argparse.Namespace, _in: TextIO | None, out: TextIO) -> None:
    try:
        data: Any = json.loads(args.file.read_text())
    except (OSError, ValueError) as exc:
        raise AdminError(f"cannot read {args.file}: {exc}") from exc
    journal = Journal()
    broker = Broker(BrokerConfig(), journal)
    broker.load_access(await store.load_access())
    topology = await store.load(body_window=0)
    broker.recover(RecoveredState(topology.exchanges, topology.queues, topology.bindings, {}))
    try:
        counts = import_definitions(broker, data)
    except DefinitionsError as exc:
        raise AdminError(f"{args.file}: {exc}") from exc
    batch = journal.take_batch()
    if batch is not None:
        await store.apply(batch)
    await store.save_access(broker.access.state)
    summary = ", ".join(f"{count} {section}" for section, count in counts.items())
    print(f"Imported {summary} from {args.file}.", file=out)


_HANDLERS: dict[tuple[str, str], Handler] = {
    ("users", "add"): _users_add,
    ("users", "delete"): _users_delete,
    ("users", "change-password"): _users_password,
    ("users", "set-tags"): _users_tags,
    ("users", "list"): _users_list,
    ("users", "set-permissions"): _set_permissions,
    ("users", "clear-permissions"): _clear_permissions,
    ("users", "list-permissions"): _list_permissions,
    ("vhosts", "add"): _vhosts_add,
    ("vhosts", "set-max-connections"): _vhosts_limit,
    ("vhosts", "delete"): _vhosts_delete,
    ("vhosts", "list"): _vhosts_list,
    ("definitions", "export"): _export,
    ("definitions", "import"): _import,
}
