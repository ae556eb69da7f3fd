"""The checked settings for TLS, access control, definitions, limits and alarms, turned
into `BrokerConfig` / `ServerConfig` fields (the options themselves are rows of the table
in amqpd/cli/options.py)."""

from __future__ import annotations

import argparse
import ssl
from dataclasses import dataclass, field
from typing import Any

from amqpd.shell import resources
from amqpd.shell.tls import TLSOptions, server_context


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
    applied.broker["loopback_users"] = args.loopback_users
    applied.broker["connection_max"] = args.connection_max or None
    applied.broker["memory_high_watermark"] = resources.parse_size(
        args.vm_memory_high_watermark, resources.total_memory()
    )
    applied.broker["disk_free_limit"] = args.disk_free_limit or None
    applied.server["definitions"] = args.definitions
    applied.broker["auth_mechanisms"] = args.auth_mechanisms
    applied.broker["server_properties"] = args.server_properties or ()
    if args.tls_cert is None and (args.tls_key is not None or args.tls_ca is not None):
        raise ValueError("invalid setting --tls-key/--tls-ca: they need --tls-cert")
    if args.tls_cert is not None:
        if args.tls_key is None:
            raise ValueError(f"invalid setting --tls-cert {args.tls_cert}: needs --tls-key")
        applied.server["tls_port"] = args.tls_port
        applied.server["tls"] = options = TLSOptions(
            args.tls_cert,
            args.tls_key,
            args.tls_ca,
            args.tls_verify_peer,
            args.tls_fail_if_no_peer_cert,
            args.tls_cert_login_from,
        )
        if args.tls_verify_peer and args.tls_ca is None:
            raise ValueError("invalid setting --tls-verify-peer: needs --tls-ca (the CA file)")
        try:
            server_context(options)  # refuse a bad certificate, key or CA now, with its reason
        except (ssl.SSLError, OSError) as exc:
            files = f"--tls-cert {args.tls_cert} --tls-key {args.tls_key}"
            if args.tls_ca is not None:
                files += f" --tls-ca {args.tls_ca}"
            reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc
            raise ValueError(
                f"invalid setting {files}: not a PEM certificate, its private key and CA "
                f"certificates ({reason})"
            ) from None
    return applied
