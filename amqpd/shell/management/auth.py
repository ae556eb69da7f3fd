"""HTTP basic authentication against the broker's users, and RabbitMQ's management tags.

RabbitMQ's rules (rabbit_mgmt_util, checked side by side with 3.10):

* a request without credentials, or with wrong ones, is 401 with
  ``WWW-Authenticate: Basic realm="RabbitMQ Management"``; a user in ``loopback_users``
  (guest) is refused unless the request comes from a loopback address;
* a user without one of the tags below is 401 "Not management user";
* ``management``: its own vhosts' objects (the vhosts it has permissions in), its own
  connections and channels; ``policymaker``: the same plus policies and parameters;
  ``monitoring``: every vhost, every connection and channel, node statistics;
  ``administrator``: everything, users, permissions and definitions included;
* inside a vhost the user's AMQP permissions (configure / write / read) still apply to
  what it changes, as RabbitMQ's management opens an AMQP connection as that user.
"""

from __future__ import annotations

import base64
import binascii
import logging
from dataclasses import dataclass
from typing import Final

from amqpd.model.auth import AccessControl, Authz, is_loopback_peer
from amqpd.shell.management.errors import (
    login_failed,
    no_credentials,
    not_authorised,
)

log = logging.getLogger(__name__)

ADMINISTRATOR: Final = "administrator"
MONITORING: Final = "monitoring"
POLICYMAKER: Final = "policymaker"
MANAGEMENT: Final = "management"
MANAGEMENT_TAGS: Final = frozenset({ADMINISTRATOR, MONITORING, POLICYMAKER, MANAGEMENT})


@dataclass(slots=True, frozen=True)
class Principal:
    """The authenticated user of one request."""

    name: str
    tags: tuple[str, ...]

    @property
    def is_admin(self) -> bool:
        """administrator: everything."""
        return ADMINISTRATOR in self.tags

    @property
    def is_monitor(self) -> bool:
        """monitoring (or administrator): every vhost, connection, channel; node stats."""
        return self.is_admin or MONITORING in self.tags

    @property
    def is_policymaker(self) -> bool:
        """policymaker (or administrator): policies and parameters."""
        return self.is_admin or POLICYMAKER in self.tags

    def require_admin(self) -> None:
        """401 "Not administrator user" unless administrator."""
        if not self.is_admin:
            raise not_authorised("Not administrator user")

    def require_monitor(self) -> None:
        """401 "Not monitor user" unless monitoring or administrator."""
        if not self.is_monitor:
            raise not_authorised("Not monitor user")

    def require_policymaker(self) -> None:
        """401 "Not policymaker user" unless policymaker or administrator."""
        if not self.is_policymaker:
            raise not_authorised("Not policymaker user")


def parse_basic(header: str | None) -> tuple[str, str] | None:
    """(user, password) from an ``Authorization: Basic`` header; None if absent or not
    basic; raises the login failure for a malformed one."""
    if not header:
        return None
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        raise login_failed()
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise login_failed() from exc
    user, sep, password = decoded.partition(":")
    if not sep:
        raise login_failed()
    return user, password


def authenticate(access: AccessControl, header: str | None, peer: str | None) -> Principal:
    """The request's user, or the 401 RabbitMQ answers (see the module docstring).
    ``peer``: the client's address (``host:port``), for the loopback rule."""
    credentials = parse_basic(header)
    if credentials is None:
        raise no_credentials()
    name, password = credentials
    user = access.authenticate(name, password)
    if user is None:
        log.warning("HTTP access denied: user '%s' - invalid credentials (from %s)", name, peer)
        raise login_failed()
    if access.loopback_only(name) and not (peer is not None and is_loopback_peer(peer)):
        log.warning(
            "HTTP access denied: user '%s' - user can only log in via localhost (from %s)",
            name,
            peer,
        )
        raise login_failed()
    if not MANAGEMENT_TAGS.intersection(user.tags):
        raise not_authorised("Not management user")
    return Principal(user.name, tuple(user.tags))


def vhost_authz(access: AccessControl, principal: Principal, vhost: str) -> Authz:
    """The user's permissions in ``vhost`` (what its changes there are checked against);
    401 "User not authorised to access virtual host" without any (administrators too, as
    RabbitMQ: the internal connection needs the vhost access)."""
    authz = access.authz(principal.name, vhost)
    if authz is None:
        raise not_authorised("User not authorised to access virtual host")
    return authz


def can_see_vhost(access: AccessControl, principal: Principal, vhost: str) -> bool:
    """Whether the vhost's objects are listed for this user: administrators see every
    vhost, everyone else (monitoring included, as RabbitMQ 3.10 does) those it has
    permissions in."""
    return principal.is_admin or (principal.name, vhost) in access.state.permissions


def require_vhost_visible(access: AccessControl, principal: Principal, vhost: str) -> None:
    """401 "User not authorised to access virtual host" unless `can_see_vhost`."""
    if not can_see_vhost(access, principal, vhost):
        raise not_authorised("User not authorised to access virtual host")
