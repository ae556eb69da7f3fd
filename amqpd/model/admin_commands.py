"""The ``amqpd users|vhosts|definitions`` commands, carried out on a `Broker` (sans-IO).

One implementation serves both places a command can run:

* on a running broker, through its admin socket (amqpd/admin_socket.py): the broker's live
  state changes at once (`Broker.replace_access`: a deleted user's or vhost's connections
  are closed, permissions change on open channels) and the shell persists it;
* on a stopped broker's data directory (amqpd/admin.py): the CLI loads the stored
  definitions into a message-less `Broker`, runs the command and writes the result back.

A request is a JSON-able mapping: ``group``, ``command`` and the command's arguments (the
CLI's option names). Passwords never travel: the CLI sends ``password_hash``. `execute`
works on a copy of the access state and hands the result to ``broker.replace_access``
only when the command succeeds, so a refused command (`AdminError`) changes nothing.
Durable queues and exchanges of a deleted vhost are journaled by the broker core as usual.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from amqpd.model import global_parameters, user_limits
from amqpd.model.auth import (
    DEFAULT_HASHING,
    AccessState,
    Permission,
    User,
    VhostInfo,
    validate_hash,
    validate_regex,
)
from amqpd.model.broker import Broker
from amqpd.model.definitions import (
    DefinitionsError,
    export_definitions,
    import_definitions,
    topology,
)
from amqpd.model.parameters import (
    ParameterError,
    ParameterNotFound,
    clear_parameter,
    list_parameters,
    set_parameter,
)
from amqpd.model.policy_admin import (
    PolicyError,
    PolicyNotFound,
    clear_policy,
    list_policies,
    set_policy,
)

__all__ = ["AdminError", "Outcome", "execute"]


class AdminError(Exception):
    """A command that cannot be carried out (the CLI prints it and exits with status 1)."""


@dataclass(slots=True)
class Outcome:
    """What a command printed and whether it changed the definitions (to be persisted)."""

    output: str
    changed: bool = False
    problems: tuple[str, ...] = ()  # what could not be applied (the command fails)
    created: bool = False  # a PUT made something new (HTTP 201 rather than 204)


def problems_text(outcome: Outcome) -> str:
    """The output of a command that was partly applied, with what was not."""
    lines = [outcome.output, f"{len(outcome.problems)} definition(s) could not be applied:"]
    lines += [f"  {problem}" for problem in outcome.problems]
    return "\n".join(lines)


def execute(broker: Broker, request: Mapping[str, Any]) -> Outcome:
    """Carry out one admin request on ``broker``.

    Raises:
        AdminError: unknown command, bad arguments or a refused change (nothing changed).
    """
    key = (request.get("group"), request.get("command"))
    command = _COMMANDS.get(key)  # type: ignore[arg-type]
    if command is None:
        raise AdminError(f"unknown command: {' '.join(str(part) for part in key)}")
    try:
        return command(broker, _Args(request))
    except KeyError as exc:
        raise AdminError(f"request without {exc}") from exc


class _Args:
    """Typed access to a request's arguments (a wrong type is an `AdminError`)."""

    def __init__(self, request: Mapping[str, Any]) -> None:
        self._request = request

    def text(self, name: str, default: str | None = None) -> str:
        value = self._request[name] if default is None else self._request.get(name, default)
        if not isinstance(value, str):
            raise AdminError(f"{name} must be a string")
        return value

    def optional_text(self, name: str) -> str | None:
        if self._request.get(name) is None:
            return None
        return self.text(name)

    def __contains__(self, name: str) -> bool:
        return name in self._request

    def texts(self, name: str) -> tuple[str, ...]:
        value = self._request.get(name, [])
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise AdminError(f"{name} must be a list of strings")
        return tuple(item for item in value if item)

    def limit(self, name: str) -> int | None:
        value = self._request.get(name)
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool):
            raise AdminError(f"{name} must be an integer")
        return None if value < 0 else value

    def document(self, name: str) -> Any:
        return self._request[name]


def _copy(broker: Broker) -> AccessState:
    return copy.deepcopy(broker.access.state)


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


def _drop_permissions(
    state: AccessState, user: str | None = None, vhost: str | None = None
) -> None:
    """Forget a deleted user's (or a deleted vhost's) permissions."""
    for key in list(state.permissions):
        if key[0] == user or key[1] == vhost:
            del state.permissions[key]


def _password_hash(args: _Args) -> str:
    password_hash = args.text("password_hash")
    try:
        validate_hash(password_hash, DEFAULT_HASHING)
    except ValueError as exc:
        raise AdminError(str(exc)) from exc
    return password_hash


def _changed(broker: Broker, state: AccessState, message: str) -> Outcome:
    broker.replace_access(state)
    return Outcome(message, changed=True)


def _users_add(broker: Broker, args: _Args) -> Outcome:
    state = _copy(broker)
    name = args.text("name")
    if name in state.users:
        raise AdminError(f"user '{name}' already exists")
    state.users[name] = User(name, _password_hash(args), DEFAULT_HASHING, args.texts("tags"))
    return _changed(broker, state, f"Added user '{name}'.")


def _users_put(broker: Broker, args: _Args) -> Outcome:
    """Create or update a user (the management API's PUT /api/users/{name}): a given
    ``password_hash`` (``hashing_algorithm``, default sha256) replaces the password, the
    tags are set. A new user without a hash cannot log in with a password."""
    state = _copy(broker)
    name = args.text("name")
    algorithm = args.text("hashing_algorithm", default=DEFAULT_HASHING)
    password_hash = args.optional_text("password_hash")
    if password_hash is not None:
        try:
            validate_hash(password_hash, algorithm)
        except ValueError as exc:
            raise AdminError(str(exc)) from exc
    user = state.users.get(name)
    if user is None:
        state.users[name] = User(name, password_hash or "", algorithm, args.texts("tags"))
        return _changed(broker, state, f"Added user '{name}'.")
    if password_hash is not None:
        user.password_hash = password_hash
        user.hashing_algorithm = algorithm
    user.tags = args.texts("tags")
    return _changed(broker, state, f"Updated user '{name}'.")


def _users_delete(broker: Broker, args: _Args) -> Outcome:
    state = _copy(broker)
    name = args.text("name")
    _user(state, name)
    del state.users[name]
    state.user_limits.pop(name, None)
    _drop_permissions(state, user=name)
    return _changed(broker, state, f"Deleted user '{name}'.")


def _users_password(broker: Broker, args: _Args) -> Outcome:
    state = _copy(broker)
    name = args.text("name")
    user = _user(state, name)
    user.password_hash = _password_hash(args)
    user.hashing_algorithm = DEFAULT_HASHING
    return _changed(broker, state, f"Changed the password of user '{name}'.")


def _users_tags(broker: Broker, args: _Args) -> Outcome:
    state = _copy(broker)
    name = args.text("name")
    tags = args.texts("tags")
    _user(state, name).tags = tags
    return _changed(broker, state, f"Set the tags of user '{name}' to {list(tags)}.")


def _users_list(broker: Broker, _args: _Args) -> Outcome:
    lines = ["user\ttags"]
    for user in broker.access.state.users.values():
        lines.append(f"{user.name}\t[{', '.join(user.tags)}]")
    return Outcome("\n".join(lines))


def _set_permissions(broker: Broker, args: _Args) -> Outcome:
    state = _copy(broker)
    name, vhost = args.text("name"), args.text("vhost")
    _user(state, name)
    _vhost(state, vhost)
    regexes = (args.text("configure"), args.text("write"), args.text("read"))
    for regex in regexes:
        try:
            validate_regex(regex)
        except ValueError as exc:
            raise AdminError(str(exc)) from exc
    state.permissions[(name, vhost)] = Permission(*regexes)
    return _changed(broker, state, f"Set permissions for user '{name}' in vhost '{vhost}'.")


def _clear_permissions(broker: Broker, args: _Args) -> Outcome:
    state = _copy(broker)
    name, vhost = args.text("name"), args.text("vhost")
    _user(state, name)
    if state.permissions.pop((name, vhost), None) is None:
        raise AdminError(f"user '{name}' has no permissions in vhost '{vhost}'")
    return _changed(broker, state, f"Cleared permissions for user '{name}' in vhost '{vhost}'.")


def _list_permissions(broker: Broker, args: _Args) -> Outcome:
    state = broker.access.state
    vhost = args.text("vhost")
    _vhost(state, vhost)
    lines = ["user\tconfigure\twrite\tread"]
    for (user, where), p in state.permissions.items():
        if where == vhost:
            lines.append(f"{user}\t{p.configure}\t{p.write}\t{p.read}")
    return Outcome("\n".join(lines))


def _vhosts_add(broker: Broker, args: _Args) -> Outcome:
    state = _copy(broker)
    name = args.text("name")
    if name in state.vhosts:
        raise AdminError(f"vhost '{name}' already exists")
    description = args.text("description", default="")
    state.vhosts[name] = VhostInfo(name, description, (), args.limit("max_connections"))
    return _changed(broker, state, f"Added vhost '{name}'.")


def _vhosts_put(broker: Broker, args: _Args) -> Outcome:
    """Create a vhost or update its description and tags (PUT /api/vhosts/{name})."""
    state = _copy(broker)
    name = args.text("name")
    info = state.vhosts.get(name)
    if info is None:
        state.vhosts[name] = VhostInfo(
            name, args.text("description", default=""), args.texts("tags")
        )
        return _changed(broker, state, f"Added vhost '{name}'.")
    info.description = args.text("description", default=info.description)
    if "tags" in args:
        info.tags = args.texts("tags")
    return _changed(broker, state, f"Updated vhost '{name}'.")


def _vhosts_limit(broker: Broker, args: _Args) -> Outcome:
    state = _copy(broker)
    name = args.text("name")
    key = "max_queues" if args.text("command") == "set-max-queues" else "max_connections"
    limit = args.limit(key)
    setattr(_vhost(state, name), key, limit)
    shown = -1 if limit is None else limit
    what = key.replace("_", "-")
    return _changed(broker, state, f"Set {what} of vhost '{name}' to {shown}.")


def _vhosts_delete(broker: Broker, args: _Args) -> Outcome:
    state = _copy(broker)
    name = args.text("name")
    _vhost(state, name)
    del state.vhosts[name]
    _drop_permissions(state, vhost=name)
    for table in (state.policies, state.operator_policies):
        for key in [key for key in table if key[0] == name]:
            del table[key]
    for parameter in [key for key in state.parameters if key[1] == name]:
        del state.parameters[parameter]
    return _changed(broker, state, f"Deleted vhost '{name}' and everything in it.")


def _vhosts_list(broker: Broker, _args: _Args) -> Outcome:
    lines = ["name\tmax-connections\tdescription"]
    for info in broker.access.state.vhosts.values():
        limit = "" if info.max_connections is None else str(info.max_connections)
        lines.append(f"{info.name}\t{limit}\t{info.description}")
    return Outcome("\n".join(lines))


def _export(broker: Broker, _args: _Args) -> Outcome:
    document = export_definitions(broker.access.state, *topology(broker))
    return Outcome(json.dumps(document, indent=2))


def _import(broker: Broker, args: _Args) -> Outcome:
    document = args.document("definitions")
    if not isinstance(document, dict):
        raise AdminError("a definitions document is a JSON object")
    problems: list[str] = []
    try:
        counts = import_definitions(broker, document, problems)
    except DefinitionsError as exc:
        raise AdminError(str(exc)) from exc
    summary = ", ".join(f"{count} {section}" for section, count in counts.items())
    return Outcome(f"Imported {summary}.", changed=True, problems=tuple(problems))


def _policy_kind(args: _Args) -> tuple[bool, str]:
    operator = args.text("command").endswith("operator-policy") or args.text("command").endswith(
        "operator-policies"
    )
    return operator, "operator policy" if operator else "policy"


def _set_policy(broker: Broker, args: _Args) -> Outcome:
    operator, _kind = _policy_kind(args)
    vhost, name = args.text("vhost"), args.text("name")
    pattern, text = args.text("pattern"), args.text("definition")
    try:
        definition = json.loads(text)
    except ValueError as exc:
        raise AdminError(f"Validation failed\n\ndefinition is not valid JSON: {exc}\n") from exc
    priority = args.limit("priority") if args.limit("priority") is not None else 0
    body = {
        "pattern": pattern,
        "definition": definition,
        "priority": priority,
        "apply-to": args.text("apply_to", default="all"),
    }
    try:
        set_policy(broker, vhost, name, body, operator)
    except (PolicyError, PolicyNotFound) as exc:
        raise AdminError(str(exc).rstrip("\n")) from exc
    what = "operator policy override" if operator else "policy"
    return Outcome(
        f'Setting {what} "{name}" for pattern "{pattern}" to "{text}" with priority '
        f'"{priority}" for vhost "{vhost}" ...',
        changed=True,
    )


def _clear_policy(broker: Broker, args: _Args) -> Outcome:
    operator, kind = _policy_kind(args)
    vhost, name = args.text("vhost"), args.text("name")
    try:
        clear_policy(broker, vhost, name, operator)
    except PolicyNotFound as exc:
        raise AdminError(str(exc)) from exc
    return Outcome(f'Clearing {kind} "{name}" on vhost "{vhost}" ...', changed=True)


def _list_policies(broker: Broker, args: _Args) -> Outcome:
    operator, _kind = _policy_kind(args)
    vhost = args.text("vhost")
    try:
        items = list_policies(broker, vhost, operator)
    except PolicyNotFound as exc:
        raise AdminError(str(exc)) from exc
    what = "operator policy overrides" if operator else "policies"
    lines = [f'Listing {what} for vhost "{vhost}" ...']
    if items:
        lines.append("vhost\tname\tpattern\tapply-to\tdefinition\tpriority")
    for item in items:
        definition = json.dumps(item["definition"], separators=(",", ":"))
        lines.append(
            f"{item['vhost']}\t{item['name']}\t{item['pattern']}\t{item['apply-to']}\t"
            f"{definition}\t{item['priority']}"
        )
    return Outcome("\n".join(lines))


def _set_parameter(broker: Broker, args: _Args) -> Outcome:
    """``set-parameter COMPONENT NAME JSON`` (``value``: JSON text) or the management
    API's PUT (``document``: the decoded value)."""
    component, vhost, name = args.text("component"), args.text("vhost"), args.text("name")
    if "document" in args:
        value = args.document("document")
        text = json.dumps(value, separators=(",", ":"))
    else:
        text = args.text("value")
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise AdminError(f"Validation failed\n\nvalue is not valid JSON: {exc}") from exc
    try:
        created = set_parameter(broker, component, vhost, name, value)
    except (ParameterError, ParameterNotFound) as exc:
        raise AdminError(str(exc).rstrip("\n")) from exc
    return Outcome(
        f'Setting runtime parameter "{name}" for component "{component}" to "{text}" in vhost '
        f'"{vhost}" ...',
        changed=True,
        created=created,
    )


def _clear_parameter(broker: Broker, args: _Args) -> Outcome:
    component, vhost, name = args.text("component"), args.text("vhost"), args.text("name")
    try:
        clear_parameter(broker, component, vhost, name)
    except ParameterNotFound as exc:
        raise AdminError(str(exc)) from exc
    return Outcome(
        f'Clearing runtime parameter "{name}" for component "{component}" on vhost "{vhost}" ...',
        changed=True,
    )


def _list_parameters(broker: Broker, args: _Args) -> Outcome:
    vhost = args.text("vhost")
    try:
        items = list_parameters(broker, None, vhost)
    except ParameterNotFound as exc:
        raise AdminError(str(exc)) from exc
    lines = [f'Listing runtime parameters for vhost "{vhost}" ...']
    if items:
        lines.append("component\tname\tvalue")
    for item in items:
        value = json.dumps(item["value"], separators=(",", ":"))
        lines.append(f"{item['component']}\t{item['name']}\t{value}")
    return Outcome("\n".join(lines))


def _set_cluster_name(broker: Broker, args: _Args) -> Outcome:
    """``set-cluster-name NAME`` (rabbitmqctl set_cluster_name, PUT /api/cluster-name): the
    global parameter ``cluster_name``, as RabbitMQ keeps it."""
    name = args.text("name")
    if not name:
        raise AdminError("the cluster name must not be empty")
    state = _copy(broker)
    state.global_parameters["cluster_name"] = name
    return _changed(broker, state, f"Setting cluster name to {name} ...")


def _set_user_limit(broker: Broker, args: _Args) -> Outcome:
    """``set-limit USER NAME VALUE`` (PUT /api/user-limits/{user}/{name})."""
    user, name = args.text("user"), args.text("name")
    try:
        user_limits.set_limit(broker, user, name, args.document("value"))
    except user_limits.NoSuchUser as exc:
        raise AdminError(f"no such user: '{exc}'") from exc
    except user_limits.UserLimitError as exc:
        raise AdminError(str(exc)) from exc
    return Outcome(f'Setting user limit "{name}" of user "{user}" ...', changed=True)


def _clear_user_limit(broker: Broker, args: _Args) -> Outcome:
    user, name = args.text("user"), args.text("name")
    try:
        user_limits.clear_limit(broker, user, name)
    except user_limits.NoSuchUser as exc:
        raise AdminError(f"no such user: '{exc}'") from exc
    return Outcome(f'Clearing user limit "{name}" of user "{user}" ...', changed=True)


def _set_global(broker: Broker, args: _Args) -> Outcome:
    name = args.text("name")
    created = global_parameters.set_global(broker, name, args.document("value"))
    return Outcome(f'Setting global runtime parameter "{name}" ...', changed=True, created=created)


def _clear_global(broker: Broker, args: _Args) -> Outcome:
    name = args.text("name")
    if not global_parameters.clear_global(broker, name):
        raise AdminError("Parameter does not exist")
    return Outcome(f'Clearing global runtime parameter "{name}" ...', changed=True)


_COMMANDS: dict[tuple[str, str], Callable[[Broker, _Args], Outcome]] = {
    ("users", "set-limit"): _set_user_limit,
    ("users", "clear-limit"): _clear_user_limit,
    ("parameters", "set-global"): _set_global,
    ("parameters", "clear-global"): _clear_global,
    ("parameters", "set-cluster-name"): _set_cluster_name,
    ("parameters", "set-parameter"): _set_parameter,
    ("parameters", "clear-parameter"): _clear_parameter,
    ("parameters", "list-parameters"): _list_parameters,
    ("policies", "set-policy"): _set_policy,
    ("policies", "clear-policy"): _clear_policy,
    ("policies", "list-policies"): _list_policies,
    ("policies", "set-operator-policy"): _set_policy,
    ("policies", "clear-operator-policy"): _clear_policy,
    ("policies", "list-operator-policies"): _list_policies,
    ("users", "add"): _users_add,
    ("users", "put"): _users_put,
    ("users", "delete"): _users_delete,
    ("users", "change-password"): _users_password,
    ("users", "set-tags"): _users_tags,
    ("users", "list"): _users_list,
    ("users", "set-permissions"): _set_permissions,
    ("users", "clear-permissions"): _clear_permissions,
    ("users", "list-permissions"): _list_permissions,
    ("vhosts", "add"): _vhosts_add,
    ("vhosts", "put"): _vhosts_put,
    ("vhosts", "set-max-connections"): _vhosts_limit,
    ("vhosts", "set-max-queues"): _vhosts_limit,
    ("vhosts", "delete"): _vhosts_delete,
    ("vhosts", "list"): _vhosts_list,
    ("definitions", "export"): _export,
    ("definitions", "import"): _import,
}
