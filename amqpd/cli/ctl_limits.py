"""``amqpd ctl set-vm-memory-high-watermark`` and ``set-disk-free-limit``: the resource
alarms' limits of a running broker, with rabbitmqctl's arguments and banners
(set_vm_memory_high_watermark, set_disk_free_limit). The broker side is
amqpd/shell/alarm_limits.py.

    set-vm-memory-high-watermark FRACTION        of the machine's memory, 0.0 to 1.0
                                                 (0: every publisher is blocked)
    set-vm-memory-high-watermark absolute SIZE   bytes, or with a unit: 512MB, 1GiB
    set-disk-free-limit SIZE                     free space below which publishers wait
    set-disk-free-limit mem_relative FACTOR      a multiple of the machine's memory (1.5)
"""

from __future__ import annotations

import argparse
from typing import Any, Final

from amqpd.shell import resources
from amqpd.shell.alarm_limits import DISK_COMMAND, MEMORY_COMMAND

COMMANDS: Final = (MEMORY_COMMAND, DISK_COMMAND)
USAGE: Final = {
    MEMORY_COMMAND: "FRACTION | absolute SIZE",
    DISK_COMMAND: "SIZE | mem_relative FACTOR",
}


def add_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    """The two commands' parsers."""
    sub = commands.add_parser(
        MEMORY_COMMAND,
        parents=[common],
        help="the memory high watermark, until the node restarts "
        "(rabbitmqctl set_vm_memory_high_watermark)",
    )
    sub.add_argument("limit", nargs="+", metavar=USAGE[MEMORY_COMMAND])
    sub = commands.add_parser(
        DISK_COMMAND,
        parents=[common],
        help="the free disk space limit, until the node restarts (rabbitmqctl set_disk_free_limit)",
    )
    sub.add_argument("limit", nargs="+", metavar=USAGE[DISK_COMMAND])


def request(args: argparse.Namespace) -> dict[str, Any]:
    """The admin request for ``args``.

    Raises:
        ValueError: arguments rabbitmqctl would refuse (the text says why).
    """
    words: list[str] = args.limit
    keyword = "absolute" if args.command == MEMORY_COMMAND else "mem_relative"
    if len(words) > 2 or (len(words) == 2 and words[0] != keyword):
        raise ValueError(f"too many arguments (expected {USAGE[args.command]})")
    if len(words) == 1 and words[0] == keyword:
        raise ValueError(f"not enough arguments (expected {keyword} and a value)")
    relative = (len(words) == 1) == (args.command == MEMORY_COMMAND)
    text = words[-1]
    if relative:
        try:
            fraction = float(text)
        except ValueError:
            raise ValueError(f"not a number: {text!r}") from None
        if args.command == MEMORY_COMMAND and not 0.0 <= fraction <= 1.0:
            raise ValueError("the threshold should be a fraction between 0.0 and 1.0")
        if fraction < 0:
            raise ValueError("the factor cannot be negative")
        return {"command": args.command, "fraction": fraction}
    try:
        size = resources.parse_size(text)
    except ValueError:
        raise ValueError(
            f"not a size: {text!r} (bytes, or a number with kB, MB, GB, KiB, MiB, GiB)"
        ) from None
    return {"command": args.command, "bytes": size}


def banner(args: argparse.Namespace, node: str) -> str:
    """rabbitmqctl's line for the change."""
    if args.command == MEMORY_COMMAND:
        value = f"{args.limit[-1]} bytes" if len(args.limit) == 2 else args.limit[0]
        return f"Setting memory threshold on {node} to {value} ..."
    if len(args.limit) == 2:
        return f"Setting disk free limit on {node} to {args.limit[-1]} times the total RAM ..."
    return f"Setting disk free limit on {node} to {args.limit[0]} bytes ..."
