"""The ``amqpd`` options for TLS, access control, definitions, limits and alarms.

Part of the CLI (the I/O shell): `add_options` extends the main parser, `apply_options`
turns the parsed values into `BrokerConfig` / `ServerConfig` fields. Every option also reads
an ``AMQPD_*`` environment variable, like the others.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from amqpd.engine import handshake
from amqpd.shell import resources
from amqpd.shell.tls import LOGIN_FROM, TLSOptions, server_context


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"AMQPD_{name}", default)


def _flag(name: str) -> bool:
    return (_env(name, "") or "").lower() in ("1", "true", "yes", "on")


def _path(name: str) -> Path | None:
    value = _env(name)
    return Path(value) if value else None


def add_options(parser: argparse.ArgumentParser) -> None:
    """Add the security and limit options to the ``amqpd`` parser."""
    group = parser.add_argument_group("TLS (AMQPS)")
    group.add_argument(
        "--tls-port",
        type=int,
        default=int(_env("TLS_PORT", "5671") or 5671),
        help="AMQPS port, used when --tls-cert is given; 0 picks a free one "
        "[AMQPD_TLS_PORT, default 5671]",
    )
    group.add_argument(
        "--tls-cert",
        type=Path,
        default=_path("TLS_CERT"),
        help="server certificate (PEM) [AMQPD_TLS_CERT]; enables the AMQPS listener",
    )
    group.add_argument(
        "--tls-key",
        type=Path,
        default=_path("TLS_KEY"),
        help="server private key (PEM) [AMQPD_TLS_KEY]",
    )
    group.add_argument(
        "--tls-ca",
        type=Path,
        default=_path("TLS_CA"),
        help="CA certificates that sign client certificates (PEM) [AMQPD_TLS_CA]",
    )
    group.add_argument(
        "--tls-verify-peer",
        action="store_true",
        default=_flag("TLS_VERIFY_PEER"),
        help="verify client certificates against --tls-ca and offer the EXTERNAL mechanism "
        "[AMQPD_TLS_VERIFY_PEER]",
    )
    group.add_argument(
        "--tls-fail-if-no-peer-cert",
        action="store_true",
        default=_flag("TLS_FAIL_IF_NO_PEER_CERT"),
        help="with --tls-verify-peer: refuse clients without a certificate "
        "[AMQPD_TLS_FAIL_IF_NO_PEER_CERT]",
    )
    group.add_argument(
        "--tls-cert-login-from",
        choices=LOGIN_FROM,
        default=_env("TLS_CERT_LOGIN_FROM", "distinguished_name"),
        help="EXTERNAL user name: the certificate's subject DN or its CN "
        "[AMQPD_TLS_CERT_LOGIN_FROM, default distinguished_name]",
    )
    group = parser.add_argument_group("access control")
    group.add_argument(
        "--definitions",
        type=Path,
        default=_path("DEFINITIONS"),
        help="RabbitMQ definitions JSON (users, vhosts, permissions, exchanges, queues, "
        "bindings) to import at startup [AMQPD_DEFINITIONS]",
    )
    group.add_argument(
        "--loopback-users",
        default=_env("LOOPBACK_USERS", "guest"),
        help="comma-separated users that may only connect from localhost; empty for none "
        "[AMQPD_LOOPBACK_USERS, default guest]",
    )
    group.add_argument(
        "--auth-mechanisms",
        default=_env("AUTH_MECHANISMS", "PLAIN,AMQPLAIN"),
        help="comma-separated SASL mechanisms to offer (PLAIN, AMQPLAIN, EXTERNAL); EXTERNAL "
        "is offered only on TLS connections with a verified client certificate "
        "[AMQPD_AUTH_MECHANISMS, default PLAIN,AMQPLAIN as RabbitMQ's auth_mechanisms]",
    )
    group.add_argument(
        "--server-property",
        action="append",
        metavar="KEY=VALUE",
        default=[p for p in (_env("SERVER_PROPERTIES", "") or "").split(";") if p],
        help="a Connection.Start server property to announce instead of the default "
        "(product, version, platform, copyright, information, cluster_name, or a new key); "
        "repeatable [AMQPD_SERVER_PROPERTIES: KEY=VALUE;KEY=VALUE]",
    )
    group = parser.add_argument_group("limits and alarms")
    group.add_argument(
        "--connection-max",
        type=int,
        default=int(_env("CONNECTION_MAX", "0") or 0),
        help="open connections allowed on the broker; 0 for no limit [AMQPD_CONNECTION_MAX]",
    )
    group.add_argument(
        "--vm-memory-high-watermark",
        default=_env("VM_MEMORY_HIGH_WATERMARK", str(resources.DEFAULT_MEMORY_FRACTION)),
        help="memory above which publishers are blocked: a fraction of the machine's memory "
        "(0.4) or a size (512MB, 1GiB, bytes) [AMQPD_VM_MEMORY_HIGH_WATERMARK, default 0.4]",
    )
    group.add_argument(
        "--disk-free-limit",
        default=_env("DISK_FREE_LIMIT", "50MB"),
        help="free space on the data directory's disk below which publishers are blocked "
        "(a size; 0 disables) [AMQPD_DISK_FREE_LIMIT, default 50MB]",
    )


@dataclass(slots=True)
class Applied:
    """Keyword arguments for BrokerConfig and ServerConfig."""

    broker: dict[str, Any] = field(default_factory=dict)
    server: dict[str, Any] = field(default_factory=dict)


def apply_options(args: argparse.Namespace) -> Applied:
    """Turn the parsed options into config fields.

    Raises:
        ValueError: an invalid combination or value (reported by the CLI).
    """
    applied = Applied()
    applied.broker["loopback_users"] = tuple(
        user.strip() for user in args.loopback_users.split(",") if user.strip()
    )
    applied.broker["connection_max"] = args.connection_max or None
    applied.broker["memory_high_watermark"] = resources.parse_size(
        args.vm_memory_high_watermark, resources.total_memory()
    )
    applied.broker["disk_free_limit"] = resources.parse_size(args.disk_free_limit) or None
    applied.server["definitions"] = args.definitions
    applied.broker["auth_mechanisms"] = _mechanisms(args.auth_mechanisms)
    applied.broker["server_properties"] = _server_properties(args.server_property)
    if args.tls_cert is not None:
        if args.tls_key is None:
            raise ValueError("--tls-cert needs --tls-key")
        applied.server["tls_port"] = args.tls_port
        applied.server["tls"] = options = TLSOptions(
            args.tls_cert,
            args.tls_key,
            args.tls_ca,
            args.tls_verify_peer,
            args.tls_fail_if_no_peer_cert,
            args.tls_cert_login_from,
        )
        server_context(options)  # refuse a bad certificate, key or CA now, with its reason
    return applied


def _mechanisms(value: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip().upper() for n in value.split(",") if n.strip()))
    unknown = [n for n in names if n not in handshake.MECHANISMS]
    if unknown or not names:
        raise ValueError(
            f"--auth-mechanisms: {', '.join(unknown) or 'none given'}: expected some of "
            f"{', '.join(handshake.MECHANISMS)}"
        )
    return names


def _server_properties(pairs: list[str]) -> tuple[tuple[str, str], ...]:
    properties: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--server-property {pair!r}: expected KEY=VALUE")
        if key == "capabilities":
            raise ValueError("--server-property: the capabilities table cannot be configured")
        if len(key.encode()) > 255:
            raise ValueError(f"--server-property {key[:20]!r}...: keys are at most 255 bytes")
        properties[key] = value
    return tuple(properties.items())
