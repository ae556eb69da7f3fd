"""CPU time and memory of a local process, read from /proc (Linux)."""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from pathlib import Path


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads) so far.

    Raises:
        OSError: if the process does not exist or /proc is not available.
    """
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


def memory_kb(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of process ``pid`` in KiB (the current and the peak resident set).

    Raises:
        OSError: if the process does not exist or /proc is not available.
    """
    rss = hwm = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
        elif line.startswith("VmHWM:"):
            hwm = int(line.split()[1])
    return rss, hwm


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """One reading of a process's CPU seconds and memory."""

    cpu_s: float
    rss_kb: int
    hwm_kb: int

    @classmethod
    def take(cls, pid: int) -> ProcessSample:
        """Read process ``pid`` and its children now, summed (a broker of several worker
        processes, ``amqpd --workers N``, is its supervisor and their CPU and memory)."""
        cpu = 0.0
        rss = hwm = 0
        for each in [pid, *children(pid)]:
            try:
                each_rss, each_hwm = memory_kb(each)
                cpu += cpu_seconds(each)
            except OSError:
                if each == pid:
                    raise
                continue  # a child that just exited
            rss += each_rss
            hwm += each_hwm
        return cls(cpu, rss, hwm)


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def self_cpu_seconds() -> float:
    """User + system CPU seconds of the calling process (all threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
