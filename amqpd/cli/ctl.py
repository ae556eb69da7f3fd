"""``amqpd ctl …``: look inside a running broker, the ``rabbitmqctl`` way.

Part of the I/O shell. Each command is a request to the broker's admin socket
(``<data-dir>/amqpd.sock``, see amqpd/shell/admin_socket.py), carried out by
amqpd/engine/ctl_commands.py on the live broker. Listings use ``rabbitmqctl``'s column
names and print like it: a banner (left out with ``-q``), a header line (left out with
``--no-table-headers``) and tab-separated rows; ``--format json`` prints a JSON array of
objects as ``rabbitmqctl --formatter json`` does.

Commands (``rabbitmqctl`` equivalents in brackets):

    list-queues [-p VHOST] [COLUMN ...]        [list_queues]       default: name messages
    list-exchanges [-p VHOST] [COLUMN ...]     [list_exchanges]    default: name type
    list-bindings [-p VHOST] [COLUMN ...]      [list_bindings]
    list-connections [COLUMN ...]              [list_connections]  default: user peer_host
                                                                    peer_port state
    list-channels [COLUMN ...]                 [list_channels]
    list-consumers [-p VHOST] [COLUMN ...]     [list_consumers]
    close-connection NAME [REASON]             [close_connection]  NAME as listed by
                                                                    list-connections name
    status                                     [status]
    ping                                       [ping]
    set-policy [-p V] [--priority N] [--apply-to T] NAME PATTERN DEFINITION   [set_policy]
    clear-policy [-p V] NAME                   [clear_policy]
    list-policies [-p V]                       [list_policies]
    set-operator-policy / clear-operator-policy / list-operator-policies     [same, operator]

    set-parameter [-p V] COMPONENT NAME VALUE  [set_parameter]
                         COMPONENT: shovel, federation-upstream, federation-upstream-set
    clear-parameter [-p V] COMPONENT NAME      [clear_parameter]
    list-parameters [-p V]                     [list_parameters]
    set-cluster-name NAME                      [set_cluster_name]
    set-vm-memory-high-watermark FRACTION | absolute SIZE   [set_vm_memory_high_watermark]
    set-disk-free-limit SIZE | mem_relative FACTOR          [set_disk_free_limit]
    list-shovels                               [shovel_status]
    list-federation-links                      [federation_status]

The policy and parameter commands also work on a stopped broker's data directory (like
``amqpd users``); a refused one prints its banner, then ``Error:`` and RabbitMQ's text, and
exits with 69, as ``rabbitmqctl set_policy`` does (checked side by side with RabbitMQ 3.10).

Exit status: 0 success; 1 the broker refused the command (unknown column, vhost or
connection); 69 (EX_UNAVAILABLE) no broker answers on the data directory; 75 (EX_TEMPFAIL)
the broker did not answer in time. ``amqpd ctl ping`` is meant for liveness probes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, TextIO

from amqpd.cli import admin, ctl_limits
from amqpd.engine.ctl_commands import LISTINGS
from amqpd.model.admin_commands import AdminError
from amqpd.shell.admin_socket import AdminSocketError, send_request, socket_path
from persistence.errors import StoreError

EX_UNAVAILABLE: Final = 69
EX_TEMPFAIL: Final = 75
_VHOST_LISTINGS: Final = ("list-queues", "list-exchanges", "list-bindings", "list-consumers")


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``amqpd ctl``."""
    parser = argparse.ArgumentParser(
        prog="amqpd ctl",
        description="Inspect and manage a running broker through its admin socket "
        "(rabbitmqctl's listings and column names).",
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--data-dir",
        type=Path,
        default=Path(os.environ.get("AMQPD_DATA_DIR", "./data")),
        help="the running broker's data directory [AMQPD_DATA_DIR, default ./data]",
    )
    common.add_argument(
        "--format",
        "--formatter",
        dest="format",
        choices=["tsv", "json"],
        default="tsv",
        help="tab-separated table (default) or JSON",
    )
    common.add_argument("-q", "--quiet", action="store_true", help="no banner lines")
    common.add_argument("--no-table-headers", action="store_true", help="no header line")
    common.add_argument(
        "-t", "--timeout", type=float, default=60.0, help="seconds to wait (default 60)"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, listing in LISTINGS.items():
        sub = commands.add_parser(
            name,
            parents=[common],
            help=f"{name.replace('-', ' ')} (default columns: {' '.join(listing.default)})",
            description=f"Columns: {' '.join(listing.getters)}",
        )
        if name in _VHOST_LISTINGS:
            sub.add_argument("-p", "--vhost", default="/", help="virtual host (default /)")
        sub.add_argument("columns", nargs="*", metavar="COLUMN")
    sub = commands.add_parser(
        "close-connection", parents=[common], help="close a client connection (320)"
    )
    sub.add_argument("name", help="the connection's name, as list-connections name shows it")
    sub.add_argument("reason", nargs="?", default="", help="told to the client")
    _add_policy_commands(commands, common)
    _add_parameter_commands(commands, common)
    commands.add_parser(
        "list-shovels", parents=[common], help="the shovels' state (rabbitmqctl shovel_status)"
    )
    commands.add_parser(
        "list-federation-links",
        parents=[common],
        help="the federation links' state (rabbitmqctl federation_status)",
    )
    ctl_limits.add_commands(commands, common)
    commands.add_parser("status", parents=[common], help="node status, alarms and totals")
    commands.add_parser("ping", parents=[common], help="exit 0 if the broker answers")
    return parser


def _add_policy_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    for kind in ("policy", "operator-policy"):
        what = "an operator policy (overrides limits)" if kind != "policy" else "a policy"
        sub = commands.add_parser(f"set-{kind}", parents=[common], help=f"set {what}")
        sub.add_argument("-p", "--vhost", default="/", help="virtual host (default /)")
        sub.add_argument("--priority", type=int, default=0, help="higher wins (default 0)")
        sub.add_argument(
            "--apply-to",
            default="all",
            help="queues, classic_queues, quorum_queues, exchanges or all (default all)",
        )
        sub.add_argument("name")
        sub.add_argument("pattern", help="regular expression over queue/exchange names")
        sub.add_argument("definition", help="JSON object, e.g. '{\"max-length\":1000}'")
        sub = commands.add_parser(f"clear-{kind}", parents=[common], help=f"delete {what}")
        sub.add_argument("-p", "--vhost", default="/", help="virtual host (default /)")
        sub.add_argument("name")
        plural = "policies" if kind == "policy" else "operator-policies"
        sub = commands.add_parser(f"list-{plural}", parents=[common], help=f"list {plural}")
        sub.add_argument("-p", "--vhost", default="/", help="virtual host (default /)")


def _add_parameter_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    sub = commands.add_parser("set-parameter", parents=[common], help="set a runtime parameter")
    sub.add_argument("-p", "--vhost", default="/", help="virtual host (default /)")
    sub.add_argument("component", help="shovel, federation-upstream or federation-upstream-set")
    sub.add_argument("name")
    sub.add_argument("value", help='JSON, e.g. \'{"src-uri":"amqp://", ...}\'')
    sub = commands.add_parser(
        "clear-parameter", parents=[common], help="delete a runtime parameter"
    )
    sub.add_argument("-p", "--vhost", default="/", help="virtual host (default /)")
    sub.add_argument("component")
    sub.add_argument("name")
    sub = commands.add_parser(
        "list-parameters", parents=[common], help="list a vhost's runtime parameters"
    )
    sub.add_argument("-p", "--vhost", default="/", help="virtual host (default /)")
    sub = commands.add_parser(
        "set-cluster-name",
        parents=[common],
        help="the cluster name (federation, Connection.Start; default: the node name)",
    )
    sub.add_argument("name")


_REQUEST_KEYS: Final = (
    "command",
    "vhost",
    "name",
    "pattern",
    "definition",
    "priority",
    "apply_to",
    "component",
    "value",
)


def _policy_command(args: argparse.Namespace, out: TextIO) -> int:
    request: dict[str, Any] = {
        key: value for key, value in vars(args).items() if key in _REQUEST_KEYS
    }
    parameters = "parameter" in args.command or args.command == "set-cluster-name"
    request["group"] = "parameters" if parameters else "policies"
    try:
        outcome = admin.run_request(args.data_dir, request)
    except AdminError as exc:  # as rabbitmqctl: the banner, then the error, exit 69
        if not args.quiet:
            print(_policy_banner(args), file=out)
        print(f"Error:\n{exc}", file=sys.stderr)
        return EX_UNAVAILABLE
    except (AdminSocketError, StoreError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return EX_UNAVAILABLE
    lines = outcome.output.split("\n")
    if args.quiet:
        lines = lines[1:]
    headers = ("vhost\t", "component\t")
    if args.no_table_headers and len(lines) > 1 and lines[0].startswith(headers):
        lines = lines[1:]
    if args.command.startswith("list-") and args.format == "json":
        lines = [_json_rows(lines[1 if not args.quiet else 0 :])]
    if lines:
        print("\n".join(lines), file=out)
    return 0


def _policy_banner(args: argparse.Namespace) -> str:
    if args.command == "set-cluster-name":
        return f"Setting cluster name to {args.name} ..."
    if "parameter" in args.command:
        return _parameter_banner(args)
    operator = "operator" in args.command
    if args.command.startswith("set-"):
        what = "operator policy override" if operator else "policy"
        return (
            f'Setting {what} "{args.name}" for pattern "{args.pattern}" to "{args.definition}" '
            f'with priority "{args.priority}" for vhost "{args.vhost}" ...'
        )
    if args.command.startswith("clear-"):
        what = "operator policy" if operator else "policy"
        return f'Clearing {what} "{args.name}" on vhost "{args.vhost}" ...'
    what = "operator policy overrides" if operator else "policies"
    return f'Listing {what} for vhost "{args.vhost}" ...'


def _parameter_banner(args: argparse.Namespace) -> str:
    if args.command.startswith("set-"):
        return (
            f'Setting runtime parameter "{args.name}" for component "{args.component}" to '
            f'"{args.value}" in vhost "{args.vhost}" ...'
        )
    if args.command.startswith("clear-"):
        return (
            f'Clearing runtime parameter "{args.name}" for component "{args.component}" on '
            f'vhost "{args.vhost}" ...'
        )
    return f'Listing runtime parameters for vhost "{args.vhost}" ...'


def _json_rows(lines: list[str]) -> str:
    if not lines:
        return "[\n]"
    columns = lines[0].split("\t")
    objects = []
    for line in lines[1:]:
        row: dict[str, Any] = dict(zip(columns, line.split("\t"), strict=True))
        if "value" in row:
            row["value"] = json.loads(row["value"])
        else:
            row["definition"] = json.loads(row["definition"])
            row["priority"] = int(row["priority"])
        objects.append(json.dumps(row, separators=(",", ":")))
    return "[\n" + ",\n".join(objects) + "\n]"


def main(argv: Sequence[str], stdout: TextIO | None = None) -> int:
    """Run one ``amqpd ctl`` command (``argv`` after ``ctl``); the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    out = stdout or sys.stdout
    if "polic" in args.command or "parameter" in args.command or "cluster" in args.command:
        return _policy_command(args, out)
    request: dict[str, Any] = {"group": "ctl", "command": args.command}
    if args.command in LISTINGS:
        request["columns"] = args.columns
        request["vhost"] = getattr(args, "vhost", "/")
    elif args.command == "close-connection":
        request["name"], request["reason"] = args.name, args.reason
    elif args.command in ctl_limits.COMMANDS:
        try:
            request = {"group": "ctl", **ctl_limits.request(args)}
        except ValueError as exc:
            parser.error(f"{args.command}: {exc}")
    try:
        reply = send_request(args.data_dir, request, timeout=args.timeout)
    except AdminSocketError as exc:
        timed_out = isinstance(exc.__cause__, TimeoutError)
        print(f"Error: {exc}", file=sys.stderr)
        return EX_TEMPFAIL if timed_out else EX_UNAVAILABLE
    if reply is None:
        print(
            f"Error: no broker is running on {args.data_dir} "
            f"(no one listens on {socket_path(args.data_dir)}); point amqpd ctl at the "
            "broker's data directory with --data-dir DIR or AMQPD_DATA_DIR=DIR (the "
            "directory the broker was started with)",
            file=sys.stderr,
        )
        return EX_UNAVAILABLE
    if not reply.ok:
        print(f"Error: {reply.text}", file=sys.stderr)
        return 1
    answer = json.loads(reply.text)
    if args.command == "ping":
        if not args.quiet:
            print(f"Ping succeeded: {answer['node']}", file=out)
    elif args.command == "close-connection":
        print(answer, file=out)
    elif args.command in ctl_limits.COMMANDS:
        if not args.quiet:
            print(ctl_limits.banner(args, answer["node"]), file=out)
    elif args.command == "status":
        print(json.dumps(answer, indent=2) if args.format == "json" else _status(answer), file=out)
    else:
        _print_table(answer, args, out)
    return 0


def _print_table(table: dict[str, Any], args: argparse.Namespace, out: TextIO) -> None:
    columns: list[str] = table["columns"]
    rows: list[list[Any]] = table["rows"]
    if args.format == "json":
        objects = [
            json.dumps(dict(zip(columns, row, strict=True)), separators=(",", ":")) for row in rows
        ]
        print("[\n" + ",\n".join(objects) + ("\n" if objects else "") + "]", file=out)
        return
    if not args.quiet:
        print(table["banner"], file=out)
    if rows and not args.no_table_headers:
        print("\t".join(columns), file=out)
    for row in rows:
        print("\t".join(_cell(value) for value in row), file=out)


def _cell(value: Any) -> str:
    """A value as rabbitmqctl prints it: true/false, empty for none, tables as
    ``[{"key",value}]``."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "[" + ",".join(f"{{{json.dumps(k)},{_term(v)}}}" for k, v in value.items()) + "]"
    if isinstance(value, list):
        return "[" + ",".join(_term(item) for item in value) + "]"
    return str(value)


def _term(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    return _cell(value)


def _size(size: int) -> str:
    return f"{size / 1e9:.4f} gb"


def _status(status: dict[str, Any]) -> str:
    """``rabbitmqctl status``-style text."""
    memory, disk = status["memory"], status["disk"]
    fds, totals = status["file_descriptors"], status["totals"]
    queue_totals = status["queue_totals"]
    lines = [
        f"Status of node {status['node']} ...",
        "Runtime",
        "",
        f"Role: {status.get('role', 'standalone')}",
        f"OS PID: {status['pid']}",
        f"Uptime (seconds): {status['uptime']}",
        f"{status['product_name']} version: {status['product_version']}",
        "",
        "Alarms",
        "",
        *([f"{alarm} alarm" for alarm in status["alarms"]] or ["(none)"]),
        "",
        "Memory",
        "",
        f"Total memory used: {_size(memory['used'])}",
        "Memory high watermark: "
        + (
            _size(memory["limit"])
            if memory["limit"] or memory["alarm"]  # 0: set so, every publisher blocked
            else "none (no memory alarm)"
        ),
        "",
        "File Descriptors",
        "",
        f"Total: {fds['used']}, limit: {fds['total']}",
        f"Sockets: {fds['sockets_used']}, limit: {fds['sockets_total']}",
        "",
        "Free Disk Space",
        "",
        "Low free disk space watermark: "
        + (_size(disk["limit"]) if disk["limit"] else "none (no disk alarm)"),
        f"Free disk space: {_size(disk['free'])}",
        f"Store size: {_size(status['store_bytes'])}",
        "",
        "Listeners",
        "",
        *(
            f"Interface: {item['ip_address']}, port: {item['port']}, protocol: {item['protocol']}"
            for item in status["listeners"]
        ),
        "",
        "Totals",
        "",
        f"Connection count: {totals['connections']}",
        f"Channel count: {totals['channels']}",
        f"Queue count: {totals['queues']}",
        f"Exchange count: {totals['exchanges']}",
        f"Consumer count: {totals['consumers']}",
        f"Messages: {queue_totals['messages']} (ready {queue_totals['messages_ready']}, "
        f"unacknowledged {queue_totals['messages_unacknowledged']})",
    ]
    if status.get("workers"):  # amqpd --workers N
        lines += ["", "Workers", ""]
        for row in status["workers"]:
            if row["pid"] is None:
                lines.append(f"Worker {row['index']}: {row['state']}")
                continue
            vhosts = ", ".join(row["vhosts"]) or "(none)"
            lines.append(
                f"Worker {row['index']}: OS PID {row['pid']}, vhosts: {vhosts}, "
                f"connections: {row['connections']}, queues: {row['queues']}, "
                f"messages: {row['messages']}"
            )
    return "\n".join(lines)
