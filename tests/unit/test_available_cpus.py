"""``--workers auto``: the CPUs the process may use, capped by a container's CPU quota."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from amqpd.shell.resources import available_cpus

AFFINITY = len(os.sched_getaffinity(0))


def test_no_cgroup_files_means_the_affinity(tmp_path: Path) -> None:
    assert available_cpus(tmp_path) == AFFINITY


@pytest.mark.parametrize(
    ("cpu_max", "expected"),
    [
        ("max 100000\n", AFFINITY),  # no quota
        ("100000 100000\n", 1),  # --cpus=1
        ("150000 100000\n", min(AFFINITY, 2)),  # --cpus=1.5: rounded up
        ("5000 100000\n", 1),  # a twentieth of a CPU: still one worker
        (f"{(AFFINITY + 8) * 100000} 100000\n", AFFINITY),  # more than the affinity
        ("garbage\n", AFFINITY),
    ],
)
def test_cgroup_v2_quota_caps_the_count(tmp_path: Path, cpu_max: str, expected: int) -> None:
    (tmp_path / "cpu.max").write_text(cpu_max)
    assert available_cpus(tmp_path) == expected


@pytest.mark.parametrize(("quota", "expected"), [("-1", AFFINITY), ("100000", 1)])
def test_cgroup_v1_quota_caps_the_count(tmp_path: Path, quota: str, expected: int) -> None:
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text(quota + "\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert available_cpus(tmp_path) == expected
