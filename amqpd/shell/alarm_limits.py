"""The resource alarms' limits changed on a running broker: ``amqpd ctl
set-vm-memory-high-watermark`` and ``set-disk-free-limit`` (rabbitmqctl's
set_vm_memory_high_watermark and set_disk_free_limit).

A request names its command and either ``bytes`` or ``fraction``: of the machine's memory
(`resources.total_memory`; for the disk limit, RabbitMQ's ``mem_relative``). The new limit
counts from the next measurement: the memory alarm goes on at once when the node uses more
(0 blocks every publisher, as in RabbitMQ) and clears as usual (amqpd/model/alarms.py); the
disk limit is checked within a second. As with RabbitMQ the change lasts until the node
restarts, which brings back the configured values. A node of several workers changes every
worker's (worker 0 asks the others: amqpd/shell/workers/node.py) and keeps the requests in
its runtime directory, so a worker the supervisor restarts after a crash takes them too
(`restore`) and the alarms stay the node's.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Final

from amqpd.model.admin_commands import AdminError
from amqpd.model.alarms import ResourceAlarms
from amqpd.shell import resources

MEMORY_COMMAND: Final = "set-vm-memory-high-watermark"
DISK_COMMAND: Final = "set-disk-free-limit"
COMMANDS: Final = frozenset({MEMORY_COMMAND, DISK_COMMAND})
FILENAME: Final = "alarm-limits.json"  # in a node's runtime directory

log = logging.getLogger(__name__)


def apply(alarms: ResourceAlarms, request: dict[str, Any], quiet: bool = False) -> int:
    """Set the limit ``request`` asks for; the new limit in bytes. ``quiet``: not logged (a
    worker other than 0, which logs it for the node).

    Raises:
        AdminError: not a limit (the CLI checks before it asks).
    """
    try:
        if "fraction" in request:
            limit = int(float(request["fraction"]) * resources.total_memory())
        else:
            limit = int(request["bytes"])
    except (KeyError, TypeError, ValueError):
        raise AdminError(f"not a limit: {request!r}") from None
    if limit < 0:
        raise AdminError(f"a limit cannot be negative: {limit}")
    memory = request.get("command") == MEMORY_COMMAND
    if memory:
        alarms.memory_limit = limit
    else:
        alarms.disk_free_limit = limit
    if not quiet:
        what = "memory high watermark" if memory else "disk free limit"
        log.info("%s set to %d bytes (amqpd ctl)", what, limit)
    return limit


def remember(runtime: Path, request: dict[str, Any]) -> None:
    """Keep ``request`` for workers that start later (a restarted one)."""
    path = runtime / FILENAME
    kept = _kept(path)
    kept[str(request["command"])] = request
    scratch = path.with_suffix(".tmp")
    scratch.write_text(json.dumps(kept))
    scratch.replace(path)


def restore(runtime: Path, alarms: ResourceAlarms) -> None:
    """Apply the changes made while this worker was not running (none at a node's start)."""
    for request in _kept(runtime / FILENAME).values():
        try:
            apply(alarms, request, quiet=True)
        except AdminError as exc:
            log.warning("kept alarm limit not applied: %s", exc)


def _kept(path: Path) -> dict[str, dict[str, Any]]:
    try:
        kept = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("cannot read %s: %s", path, exc)
        return {}
    return kept if isinstance(kept, dict) else {}
