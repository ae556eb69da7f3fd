"""amqpd/cli/ctl_limits.py: rabbitmqctl's arguments of set_vm_memory_high_watermark and
set_disk_free_limit, checked before anything is asked of the broker, and its banners."""

from __future__ import annotations

import pytest

from amqpd.cli.ctl import build_parser
from amqpd.cli.ctl_limits import banner, request


def _request(*argv: str) -> dict[str, object]:
    return request(build_parser().parse_args(list(argv)))


def test_fractions_sizes_and_memory_multiples() -> None:
    memory = "set-vm-memory-high-watermark"
    disk = "set-disk-free-limit"
    assert _request(memory, "0.4") == {"command": memory, "fraction": 0.4}
    assert _request(memory, "0") == {"command": memory, "fraction": 0.0}
    assert _request(memory, "absolute", "2GiB") == {"command": memory, "bytes": 2 * 1024**3}
    assert _request(memory, "absolute", "1000000") == {"command": memory, "bytes": 1_000_000}
    assert _request(disk, "50MB") == {"command": disk, "bytes": 50_000_000}
    assert _request(disk, "mem_relative", "1.5") == {"command": disk, "fraction": 1.5}


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["set-vm-memory-high-watermark", "1.5"], "between 0.0 and 1.0"),
        (["set-vm-memory-high-watermark", "-0.1"], "between 0.0 and 1.0"),
        (["set-vm-memory-high-watermark", "lots"], "not a number"),
        (["set-vm-memory-high-watermark", "absolute"], "not enough arguments"),
        (["set-vm-memory-high-watermark", "absolute", "2 bananas"], "not a size"),
        (["set-vm-memory-high-watermark", "0.4", "0.5"], "too many arguments"),
        (["set-disk-free-limit", "absolute", "5"], "too many arguments"),
        (["set-disk-free-limit", "mem_relative", "-1"], "cannot be negative"),
        (["set-disk-free-limit", "half"], "not a size"),
    ],
)
def test_what_rabbitmqctl_refuses_is_refused_with_the_reason(argv: list[str], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        _request(*argv)


def test_banners_are_rabbitmqctls() -> None:
    parse = build_parser().parse_args
    node = "amqpd@host"
    assert banner(parse(["set-vm-memory-high-watermark", "0.6"]), node) == (
        "Setting memory threshold on amqpd@host to 0.6 ..."
    )
    assert banner(parse(["set-vm-memory-high-watermark", "absolute", "2GB"]), node) == (
        "Setting memory threshold on amqpd@host to 2GB bytes ..."
    )
    assert banner(parse(["set-disk-free-limit", "1GB"]), node) == (
        "Setting disk free limit on amqpd@host to 1GB bytes ..."
    )
    assert banner(parse(["set-disk-free-limit", "mem_relative", "1.5"]), node) == (
        "Setting disk free limit on amqpd@host to 1.5 times the total RAM ..."
    )
