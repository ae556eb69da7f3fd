"""Summaries of sampling profiles: py-spy's collapsed ("raw") stack format as a text table.

Each line of ``py-spy record --format raw [--threads]`` is ``frame;frame;...;leaf count``, a
frame being ``function (file:line)`` and, with ``--threads``, the first one
``thread (TID): NAME``. A function's own time is the samples where it is the leaf; its
total time the samples where it is anywhere on the stack (counted once per stack).

py-spy counts a thread blocked in some waits as active (aiosqlite's worker thread waiting
in ``queue.get()`` is one), so leaves matching ``idle_leaves`` are set apart as idle.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_LINE_NUMBER = re.compile(r":\d+\)$")
_THREAD = re.compile(r"^thread \(\d+\): (.*)$")
AIOSQLITE_IDLE = ("_connection_worker_thread (aiosqlite/core.py:59)",)


@dataclass(frozen=True, slots=True)
class FunctionTime:
    """Samples of one function."""

    name: str
    own: int
    total: int


@dataclass(slots=True)
class Profile:
    """A profile reduced to its busiest functions."""

    samples: int = 0  # busy samples (idle ones excluded)
    idle: int = 0
    threads: dict[str, int] = field(default_factory=dict)  # busy samples per thread name
    functions: list[FunctionTime] = field(default_factory=list)


def _function(frame: str) -> str:
    """``function (file:line)`` without the line number, with the path shortened."""
    frame = _LINE_NUMBER.sub(")", frame.strip())
    name, _, where = frame.partition(" (")
    if not where:
        return name
    path = where.rstrip(")")
    for marker in ("site-packages/", "lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    else:
        path = "/".join(path.split("/")[-2:])
    return f"{name} ({path})"


def top_functions(
    collapsed: str, limit: int = 15, idle_leaves: tuple[str, ...] = AIOSQLITE_IDLE
) -> Profile:
    """The ``limit`` functions with the most own time, and per-thread sample counts."""
    own: dict[str, int] = {}
    total: dict[str, int] = {}
    profile = Profile()
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        raw = [f for f in stack.split(";") if f]
        thread = "all threads"
        if raw and (match := _THREAD.match(raw[0])):
            thread = re.sub(r"-\d+ ", " ", match.group(1))  # Thread-1 (x) and Thread-2 (x) add up
            raw = raw[1:]
        if not raw:
            continue
        if any(raw[-1].strip().endswith(idle) for idle in idle_leaves):
            profile.idle += count
            continue
        profile.samples += count
        profile.threads[thread] = profile.threads.get(thread, 0) + count
        frames = [_function(f) for f in raw]
        own[frames[-1]] = own.get(frames[-1], 0) + count
        for name in set(frames):
            total[name] = total.get(name, 0) + count
    ranked = sorted(own, key=lambda name: own[name], reverse=True)[:limit]
    profile.functions = [FunctionTime(name, own[name], total[name]) for name in ranked]
    return profile


def format_table(profile: Profile) -> str:
    """Per-thread shares, then a markdown table of own and total time (% of busy samples)."""
    busy = profile.samples or 1
    shares = ", ".join(
        f"{name} {100 * n / busy:.0f} %"
        for name, n in sorted(profile.threads.items(), key=lambda item: -item[1])
    )
    lines = [
        f"{profile.samples:,} busy samples ({shares}); {profile.idle:,} idle samples left out.",
        "",
        "| own % | total % | function |",
        "| ---: | ---: | --- |",
    ]
    for f in profile.functions:
        lines.append(f"| {100 * f.own / busy:.1f} | {100 * f.total / busy:.1f} | `{f.name}` |")
    return "\n".join(lines)
