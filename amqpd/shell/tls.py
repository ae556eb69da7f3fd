"""TLS for the AMQPS listener: the server's SSLContext and the client-certificate identity.

Part of the I/O shell (it reads certificate files). Options follow RabbitMQ's
``ssl_options``: ``certfile``, ``keyfile``, ``cacertfile``, ``verify`` (verify_none or
verify_peer) and ``fail_if_no_peer_cert``. With verify_peer, a client certificate signed by
the CA is checked during the handshake, and the EXTERNAL mechanism is offered: the user name
is the certificate's subject distinguished name (RabbitMQ's default
``ssl_cert_login_from = distinguished_name``, RFC 4514 string, e.g. ``CN=app,O=Example``) or
its common name (``common_name``).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

# Short names of the attribute types ssl.getpeercert() spells out (RFC 4514 section 3).
_SHORT_NAMES: Final = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
LOGIN_FROM: Final = ("distinguished_name", "common_name")


@dataclass(slots=True)
class TLSOptions:
    """Server-side TLS settings (RabbitMQ's ssl_options)."""

    certfile: Path
    keyfile: Path
    cafile: Path | None = None
    verify_peer: bool = False
    fail_if_no_peer_cert: bool = False
    cert_login_from: str = "distinguished_name"


def server_context(options: TLSOptions) -> ssl.SSLContext:
    """An SSLContext for the AMQPS listener (TLS 1.2 or newer).

    Raises:
        OSError, ssl.SSLError: a file is missing or not a valid certificate / key.
        ValueError: an inconsistent combination of options.
    """
    if options.cert_login_from not in LOGIN_FROM:
        raise ValueError(f"cert_login_from must be one of {', '.join(LOGIN_FROM)}")
    if options.verify_peer and options.cafile is None:
        raise ValueError("verifying client certificates (verify_peer) needs a CA file")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(options.certfile), str(options.keyfile))
    if options.cafile is not None:
        context.load_verify_locations(cafile=str(options.cafile))
    if options.verify_peer:
        context.verify_mode = (
            ssl.CERT_REQUIRED if options.fail_if_no_peer_cert else ssl.CERT_OPTIONAL
        )
    else:
        context.verify_mode = ssl.CERT_NONE
    return context


def _escape(value: str) -> str:
    out = []
    for i, char in enumerate(value):
        if (
            char in ',+"\\<>;='
            or (char in " #" and i == 0)
            or (char == " " and i == len(value) - 1)
        ):
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


def certificate_identity(cert: dict[str, Any] | None, login_from: str) -> str | None:
    """The user name a verified client certificate authenticates as (None: no usable one).

    ``cert`` is what ``SSLSocket.getpeercert()`` returns for a verified peer.
    """
    if not cert:
        return None
    subject = cert.get("subject") or ()
    if login_from == "common_name":
        for rdn in subject:
            for name, value in rdn:
                if name == "commonName":
                    return str(value)
        return None
    # RFC 4514: the last RDN first; multi-valued RDNs joined with '+'.
    parts = [
        "+".join(f"{_SHORT_NAMES.get(name, name)}={_escape(str(value))}" for name, value in rdn)
        for rdn in reversed(subject)
    ]
    return ",".join(parts) or None


def tls_failure_reason(exc: BaseException) -> str:
    """Why a TLS server handshake failed, for the log: the SSL error anyio wraps (a
    certificate verification message such as "certificate verify failed: unable to get
    local issuer certificate", or OpenSSL's reason such as "WRONG_VERSION_NUMBER"), a
    timeout, or the peer going away; never an empty string."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return f"certificate verify failed: {seen.verify_message}"
        if isinstance(seen, ssl.SSLError):
            return str(seen.reason or seen)
        if isinstance(seen, TimeoutError):
            return "no TLS handshake within the handshake timeout"
        seen = seen.__cause__ or seen.__context__
    if type(exc).__name__ == "EndOfStream":
        return "the peer closed the connection during the handshake"
    return str(exc) or type(exc).__name__
