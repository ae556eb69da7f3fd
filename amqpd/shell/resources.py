"""Shell-side probes of the machine: memory, CPUs, free disk, the open-file limit.

Part of the I/O shell (only amqpd/server.py and amqpd/__main__.py use it); the core gets the
numbers these return, never calls them. Each probe is cheap enough to run several times a
second: the resident set size is one read of ``/proc/self/statm``.
"""

from __future__ import annotations

import ctypes
import logging
import math
import os
import re
import resource
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Final

log = logging.getLogger(__name__)

DEFAULT_MEMORY_FRACTION: Final = 0.4  # RabbitMQ's vm_memory_high_watermark.relative
_PAGE_SIZE: Final = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_UNITS: Final = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "k": 1024,
    "m": 1024**2,
    "g": 1024**3,
}


def rss_bytes() -> int:
    """The broker process's resident set size."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE_SIZE
    except (OSError, ValueError, IndexError):
        usage = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # peak, KiB on Linux
        return usage * (1 if sys.platform == "darwin" else 1024)


def total_memory() -> int:
    """Physical memory, or the cgroup (container) limit when that is lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < total:
            total = int(text)
    return total


def available_cpus(cgroup: Path = Path("/sys/fs/cgroup")) -> int:
    """The CPUs this process may use: those it may run on (its affinity), or fewer when
    the cgroup (a container's ``--cpus``) grants less CPU time, rounded up (``--workers
    auto``; RabbitMQ starts a scheduler per core the same way)."""
    cpus = len(os.sched_getaffinity(0))
    quota = _cpu_quota(cgroup)
    return max(1, min(cpus, math.ceil(quota))) if quota is not None else cpus


def _cpu_quota(cgroup: Path) -> float | None:
    """CPU time granted per unit of wall time by cgroup v2's cpu.max or v1's CFS quota
    (None: no quota)."""
    try:
        quota, period = (cgroup / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        try:
            quota = (cgroup / "cpu" / "cpu.cfs_quota_us").read_text().strip()
            period = (cgroup / "cpu" / "cpu.cfs_period_us").read_text().strip()
        except OSError:
            return None
    if not quota.isdigit() or not period.isdigit() or int(period) == 0:
        return None  # "max" (v2) or -1 (v1): no quota
    return int(quota) / int(period)


def disk_free(path: Path) -> int:
    """Bytes available to the broker on the file system holding ``path``."""
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


def parse_size(text: str, total: int | None = None) -> int:
    """``"0.4"`` (a fraction of ``total``), ``"512MB"``, ``"1GiB"`` or ``"1000000"`` in bytes.

    Raises:
        ValueError: not a size (or a fraction without ``total``).
    """
    text = text.strip().lower()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([a-z]*)", text)
    if match is None or match.group(2) not in _UNITS:
        raise ValueError(f"not a size: {text!r} (use bytes, 512MB, 1GiB or a fraction like 0.4)")
    number, unit = match.groups()
    if "." in number and not unit:
        if total is None:
            raise ValueError(f"a fraction ({text}) is not allowed here")
        fraction = float(number)
        if not 0 < fraction <= 1:
            raise ValueError(f"a fraction must be in (0, 1], not {text}")
        return int(total * fraction)
    return int(float(number) * _UNITS[unit])


def raise_open_file_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (logged); return the new soft limit."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return -1
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if sys.platform == "darwin":
        target = min(target, 10240)  # OPEN_MAX
    if soft == resource.RLIM_INFINITY or soft >= target:
        log.info("open file limit is %s", "unlimited" if soft == resource.RLIM_INFINITY else soft)
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (OSError, ValueError) as exc:
        log.warning("cannot raise the open file limit from %d to %d: %s", soft, target, exc)
        return soft
    log.info("raised the open file limit from %d to %d", soft, target)
    return target


_trim: Callable[[int], int] | None = None
_trim_loaded = False


def release_free_memory() -> None:
    """glibc's ``malloc_trim(0)``: hand freed heap pages back to the system, so the RSS falls
    once the memory a memory alarm is about has been released (a no-op without glibc)."""
    global _trim, _trim_loaded
    if not _trim_loaded:
        _trim_loaded = True
        if sys.platform.startswith("linux"):
            try:
                function = ctypes.CDLL(None).malloc_trim
                function.argtypes = [ctypes.c_size_t]
                function.restype = ctypes.c_int
                _trim = function
            except (OSError, AttributeError):
                _trim = None
    if _trim is not None:
        _trim(0)
