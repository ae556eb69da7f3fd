"""Users, password hashes, virtual-host permissions and the checks RabbitMQ makes with them.

Theory of operation
-------------------
`AccessControl` is the broker's in-memory copy of the access definitions (users, vhost
definitions, permissions). It is loaded from the store (or seeded with RabbitMQ's defaults
for a memory-only broker) and never does I/O itself.

Passwords are stored the way RabbitMQ stores them (``rabbit_password_hashing_sha256``): a
random 4-byte salt, then ``base64(salt + sha256(salt + utf8(password)))``. That is never plain
text, and a definitions file exported by RabbitMQ can be imported here and the other way
round. ``rabbit_password_hashing_sha512`` and the legacy ``rabbit_password_hashing_md5`` are
verified too (an imported user keeps its hash). An empty hash means the user cannot log in
with a password (only with EXTERNAL, as in RabbitMQ). An unknown user costs the same hash
computation as a known one and gets the same refusal.

At connection.open the connection gets an `Authz`: the user's three compiled regular
expressions for that vhost. Its ``configure``/``write``/``read`` checks are the ones
``rabbit_channel`` makes (``check_configure_permitted`` …): a refusal is 403 ACCESS_REFUSED
"access to queue 'q' in vhost '/' refused for user 'u'", a channel error. As in
``rabbit_auth_backend_internal`` a regex is searched for (not anchored), an empty one means
``^$``, and the default exchange is checked under the name ``amq.default``. A user with
``.*`` everywhere skips the regex work.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import re
import secrets
from typing import Final

from pamqp.header import ContentHeader

from amqpd.wire.errors import ACCESS_REFUSED, PRECONDITION_FAILED, AMQPError
from persistence.access import FULL_ACCESS, AccessState, Permission, User, VhostInfo

__all__ = [
    "DEFAULT_HASHING",
    "FULL_ACCESS",
    "HASHING_ALGORITHMS",
    "INTERNAL_USER",
    "AccessControl",
    "AccessState",
    "Authz",
    "Permission",
    "User",
    "VhostInfo",
    "check_password",
    "default_access",
    "hash_password",
    "is_loopback_peer",
    "validate_hash",
    "validate_regex",
]

HASH_SHA256: Final = "rabbit_password_hashing_sha256"
HASH_SHA512: Final = "rabbit_password_hashing_sha512"
HASH_MD5: Final = "rabbit_password_hashing_md5"
HASHING_ALGORITHMS: Final = {
    HASH_SHA256: hashlib.sha256,
    HASH_SHA512: hashlib.sha512,
    HASH_MD5: hashlib.md5,
}
DEFAULT_HASHING: Final = HASH_SHA256  # persistence.access.User defaults to the same name
SALT_BYTES: Final = 4  # RabbitMQ's salt size; the hash format depends on it
FLAG_USER_ID: Final = 0x0010  # basic properties flag bit of user_id


def hash_password(
    password: str, algorithm: str = DEFAULT_HASHING, salt: bytes | None = None
) -> str:
    """RabbitMQ's salted password hash: ``base64(salt + H(salt + utf8(password)))``.

    Raises:
        ValueError: unknown algorithm.
    """
    digest = HASHING_ALGORITHMS.get(algorithm)
    if digest is None:
        raise ValueError(f"unknown hashing algorithm {algorithm!r}")
    if salt is None:
        salt = secrets.token_bytes(SALT_BYTES)
    return base64.b64encode(salt + digest(salt + password.encode()).digest()).decode("ascii")


def check_password(password: str, password_hash: str, algorithm: str) -> bool:
    """Whether ``password`` matches a hash made by `hash_password` (constant time)."""
    digest = HASHING_ALGORITHMS.get(algorithm, hashlib.sha256)
    try:
        raw = base64.b64decode(password_hash, validate=True)
    except ValueError:
        raw = b""
    salt, expected = raw[:SALT_BYTES], raw[SALT_BYTES:]
    actual = digest(salt + password.encode()).digest()
    return bool(expected) and hmac.compare_digest(actual, expected)


def validate_hash(password_hash: str, algorithm: str) -> None:
    """Refuse a hash that `check_password` could never match (for imports).

    Raises:
        ValueError: unknown algorithm or malformed hash.
    """
    digest = HASHING_ALGORITHMS.get(algorithm)
    if digest is None:
        raise ValueError(f"unknown hashing_algorithm {algorithm!r}")
    if not password_hash:
        return  # no password: EXTERNAL only
    try:
        raw = base64.b64decode(password_hash, validate=True)
    except ValueError as exc:
        raise ValueError("password_hash is not base64") from exc
    if len(raw) != SALT_BYTES + digest().digest_size:
        raise ValueError(f"password_hash has the wrong length for {algorithm}")


def validate_regex(pattern: str) -> None:
    """Refuse a permission that is not a valid regular expression.

    Raises:
        ValueError: not a valid regular expression.
    """
    try:
        re.compile(pattern or "^$")
    except re.error as exc:
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from exc


def is_loopback_peer(peer: str) -> bool:
    """Whether a ``host:port`` peer string names a loopback address (127/8, ::1)."""
    host = peer.rsplit(":", 1)[0].strip("[]")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def default_access(vhosts: tuple[str, ...] = ("/",)) -> AccessState:
    """RabbitMQ's first-boot state: user guest/guest (administrator) with full access."""
    state = AccessState()
    state.users["guest"] = User(
        "guest", hash_password("guest"), DEFAULT_HASHING, ("administrator",)
    )
    for name in vhosts:
        state.vhosts[name] = VhostInfo(name)
        state.permissions[("guest", name)] = Permission()
    return state


_DUMMY_HASH: Final = hash_password("", salt=b"\0" * SALT_BYTES)
INTERNAL_USER: Final = "amqpd-links"
"""The user the broker's own links (shovels) log in as when a URI names the local broker
(``amqp://`` with no host, RabbitMQ's direct connection as user ``none``): its password is
a random secret the shell sets at start (`AccessControl.internal_secret`), it has every
permission in every vhost and cannot log in with a stored password."""


class AccessControl:
    """Authentication and authorisation decisions (sans-IO)."""

    def __init__(self, state: AccessState, loopback_users: tuple[str, ...] = ("guest",)) -> None:
        self.state = state
        self.loopback_users = loopback_users
        self.internal_secret: str | None = None  # set by the shell (INTERNAL_USER)

    def is_user(self, name: str) -> bool:
        """Whether ``name`` is a user who may stay connected (stored, or the internal one)."""
        return name in self.state.users or (
            name == INTERNAL_USER and self.internal_secret is not None
        )

    def authenticate(self, name: str, password: str) -> User | None:
        """The user if the password matches; None otherwise (unknown users cost the same)."""
        if name == INTERNAL_USER:
            secret = self.internal_secret
            if secret is not None and hmac.compare_digest(password.encode(), secret.encode()):
                return User(INTERNAL_USER, "")
            return None
        user = self.state.users.get(name)
        if user is None:
            check_password(password, _DUMMY_HASH, DEFAULT_HASHING)
            return None
        if not check_password(password, user.password_hash, user.hashing_algorithm):
            return None
        return user

    def loopback_only(self, name: str) -> bool:
        """Whether this user may only connect from a loopback address (loopback_users)."""
        return name in self.loopback_users

    def authz(self, user: str, vhost: str) -> Authz | None:
        """The user's permissions in ``vhost``; None if it has none there."""
        if user == INTERNAL_USER and self.internal_secret is not None:
            # the links' user may set any user_id (federation's trust-user-id), as
            # RabbitMQ's internal direct connections may
            known = vhost in self.state.vhosts
            return Authz(user, vhost, Permission(), impersonator=True) if known else None
        permission = self.state.permissions.get((user, vhost))
        if permission is None:
            return None
        found = self.state.users.get(user)
        impersonator = found is not None and "impersonator" in found.tags
        return Authz(user, vhost, permission, impersonator)


class Authz:
    """One connection's permissions in its vhost (see the module docstring)."""

    __slots__ = ("_configure", "_read", "_write", "full", "impersonator", "user", "vhost")

    def __init__(
        self, user: str, vhost: str, permission: Permission, impersonator: bool = False
    ) -> None:
        self.user = user
        self.vhost = vhost
        self.impersonator = impersonator
        self._configure = _compile(permission.configure)
        self._write = _compile(permission.write)
        self._read = _compile(permission.read)
        self.full = self._configure is None and self._write is None and self._read is None

    def configure(self, kind: str, name: str) -> None:
        """rabbit_channel:check_configure_permitted (declare, delete)."""
        if self._configure is not None:
            self._check(self._configure, kind, name)

    def write(self, kind: str, name: str) -> None:
        """rabbit_channel:check_write_permitted (publish, bind destination)."""
        if self._write is not None:
            self._check(self._write, kind, name)

    def read(self, kind: str, name: str) -> None:
        """rabbit_channel:check_read_permitted (consume, get, purge, bind source)."""
        if self._read is not None:
            self._check(self._read, kind, name)

    def _check(self, pattern: re.Pattern[str], kind: str, name: str) -> None:
        if kind == "exchange" and not name:
            name = "amq.default"
        if pattern.search(name) is None:
            raise AMQPError(
                ACCESS_REFUSED,
                f"access to {kind} '{name}' in vhost '{self.vhost}' refused for user '{self.user}'",
            )

    def check_user_id(self, header: bytes) -> AMQPError | None:
        """The 406 RabbitMQ gives when a message's user_id is not the publisher's user."""
        if self.impersonator or len(header) < 14:
            return None
        if not (header[12] << 8 | header[13]) & FLAG_USER_ID:
            return None
        content = ContentHeader()
        try:
            content.unmarshal(header)
        except Exception:  # malformed properties: left to the normal header checks
            return None
        claimed = content.properties.user_id
        if claimed is None or claimed == self.user:
            return None
        return AMQPError(
            PRECONDITION_FAILED,
            f"user_id property set to '{claimed}' but authenticated user was '{self.user}'",
            60,
            40,
        )


def _compile(pattern: str) -> re.Pattern[str] | None:
    if pattern == FULL_ACCESS:
        return None
    return re.compile(pattern or "^$")
