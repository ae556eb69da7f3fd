"""Command line: ``amqpd`` starts the broker (``amqpd --help`` lists the options)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

import anyio

from amqpd import __version__
from amqpd.cli import admin, ctl
from amqpd.cli.logs import configure_logging
from amqpd.cli.security import add_options, apply_options
from amqpd.model.broker import BrokerConfig
from amqpd.model.definitions import DefinitionsError
from amqpd.shell.server import ServerConfig, run
from persistence.errors import StoreError

log = logging.getLogger("amqpd")
E = TypeVar("E", bound=BaseException)


def _env(name: str, default: str) -> str:
    return os.environ.get(f"AMQPD_{name}", default)


SUBCOMMANDS = """\
subcommands (each has its own --help):
  amqpd ctl COMMAND ...        inspect a running broker: list-queues, list-exchanges,
                               list-bindings, list-connections, list-channels,
                               list-consumers, close-connection, status, ping
  amqpd users COMMAND ...      users and permissions: add, delete, change-password,
                               set-tags, list, set-permissions, clear-permissions,
                               list-permissions
  amqpd vhosts COMMAND ...     virtual hosts: add, set-max-connections, delete, list
  amqpd definitions COMMAND    RabbitMQ definitions JSON: export, import
  amqpd perf ...               the load generator (workloads W1-W6 against any broker)
"""


def build_parser() -> argparse.ArgumentParser:
    """The ``amqpd`` argument parser; every option also reads an AMQPD_* variable."""
    parser = argparse.ArgumentParser(
        prog="amqpd",
        usage="amqpd [options]  |  amqpd {ctl,users,vhosts,definitions,perf} ...",
        description="An AMQP 0-9-1 message broker that RabbitMQ clients use unchanged.\n"
        "Without a subcommand it runs the broker. Every option can also be set with the\n"
        "environment variable shown.",
        epilog=SUBCOMMANDS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"amqpd {__version__}")
    parser.add_argument(
        "--host",
        default=_env("HOST", "127.0.0.1"),
        help="address to listen on [AMQPD_HOST, default 127.0.0.1]",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=int(_env("PORT", "5672")),
        help="AMQP port; 0 picks a free one [AMQPD_PORT, default 5672]",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path(_env("DATA_DIR", "./data")),
        help="directory of the SQLite store [AMQPD_DATA_DIR, default ./data]",
    )
    parser.add_argument(
        "--sync",
        default=_env("SYNC", "full").lower(),
        choices=["full", "normal"],
        help="SQLite synchronous mode: full survives power loss; normal is faster and can "
        "lose the last commits on power loss (never on a crash of amqpd alone) "
        "[AMQPD_SYNC, default full]",
    )
    parser.add_argument(
        "--log-level",
        default=_env("LOG_LEVEL", "info"),
        choices=["debug", "info", "warning", "error"],
        help="log verbosity [AMQPD_LOG_LEVEL, default info]",
    )
    parser.add_argument(
        "--heartbeat",
        type=int,
        default=int(_env("HEARTBEAT", "60")),
        help="heartbeat interval offered to clients, seconds; 0 disables [AMQPD_HEARTBEAT]",
    )
    parser.add_argument(
        "--max-message-size",
        type=int,
        default=int(_env("MAX_MESSAGE_SIZE", str(128 << 20))),
        help="largest accepted message body in bytes [AMQPD_MAX_MESSAGE_SIZE, default 128 MiB]",
    )
    parser.add_argument(
        "--management-port",
        type=int,
        default=int(_env("MANAGEMENT_PORT", "15672")),
        help="port of the management HTTP API and dashboard, on --host "
        "[AMQPD_MANAGEMENT_PORT, default 15672]",
    )
    parser.add_argument(
        "--no-management",
        action="store_true",
        default=_env("NO_MANAGEMENT", "") == "true",
        help="do not serve the management API and dashboard [AMQPD_NO_MANAGEMENT=true]",
    )
    parser.add_argument(
        "--prometheus-port",
        type=int,
        default=int(_env("PROMETHEUS_PORT", "15692")),
        help="port of the Prometheus endpoint (/metrics), on --host "
        "[AMQPD_PROMETHEUS_PORT, default 15692]",
    )
    parser.add_argument(
        "--no-prometheus",
        action="store_true",
        default=_env("NO_PROMETHEUS", "") == "true",
        help="do not serve Prometheus metrics [AMQPD_NO_PROMETHEUS=true]",
    )
    add_options(parser)  # TLS, access control, limits and alarms (amqpd/security_cli.py)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``amqpd`` command."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "perf":
        from interop.perf.cli import main as perf_main

        return perf_main(argv[1:])
    if argv and argv[0] in admin.COMMANDS:
        return admin.main(argv)
    if argv and argv[0] == "ctl":
        return ctl.main(argv[1:])
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level)
    try:
        args.data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        log.error("cannot create data directory %s: %s; pass --data-dir", args.data_dir, exc)
        return 2
    try:
        applied = apply_options(args)
    except (ValueError, OSError) as exc:
        log.error("%s", exc)
        return 2
    broker_config = BrokerConfig(
        heartbeat=args.heartbeat, max_message_size=args.max_message_size, **applied.broker
    )
    server_config = ServerConfig(
        host=args.host,
        port=args.port,
        data_dir=args.data_dir,
        synchronous=args.sync.upper(),
        management_port=None if args.no_management else args.management_port,
        prometheus_port=None if args.no_prometheus else args.prometheus_port,
        **applied.server,
    )
    backend_options = {}
    try:
        import uvloop  # noqa: F401

        backend_options["use_uvloop"] = True
    except ImportError:
        pass
    try:
        anyio.run(
            run, broker_config, server_config, backend="asyncio", backend_options=backend_options
        )
    except (OSError, StoreError, DefinitionsError, BaseExceptionGroup) as exc:
        definitions_error = _find(exc, DefinitionsError)
        if definitions_error is not None:
            log.error("cannot import definitions: %s", definitions_error)
            return 2
        store_error = _find(exc, StoreError)
        if store_error is not None:
            log.error("cannot open the store: %s", store_error)
            return 2
        os_error = _find(exc, OSError)
        if os_error is None:
            raise
        log.error(
            "cannot listen on %s:%d: %s; is another broker running? Use --port",
            args.host,
            args.port,
            os_error.strerror or os_error,
        )
        return 1
    except KeyboardInterrupt:
        pass
    return 0


def _find(exc: BaseException, kind: type[E]) -> E | None:
    """The first ``kind`` exception in ``exc`` or, for an exception group, inside it."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _find(inner, kind)
            if found is not None:
                return found
    return None


if __name__ == "__main__":
    sys.exit(main())
