"""`amqpd.cli.worker_count.resolve`: ``--workers auto`` is the CPUs but at least what the
data directory's placement needs; an explicit count too small for it is refused. (A spread
vhost's queue in ``shard-K/``: tests/integration/test_spread_vhosts.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from amqpd.cli import worker_count
from amqpd.cli.options import MAX_WORKERS
from amqpd.shell import resources
from amqpd.shell.workers.placement import FILENAME


@pytest.fixture(autouse=True)
def _one_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resources, "available_cpus", lambda: 1)


def _placed(data: Path, vhosts: dict[str, int]) -> Path:
    data.mkdir(exist_ok=True)
    (data / FILENAME).write_text(json.dumps({"workers": 4, "vhosts": vhosts}))
    return data


def test_auto_is_the_cpus_without_data(tmp_path: Path) -> None:
    assert worker_count.resolve(worker_count.AUTO, None, MAX_WORKERS) == 1
    assert worker_count.resolve(worker_count.AUTO, tmp_path / "new", MAX_WORKERS) == 1
    assert worker_count.resolve(3, tmp_path / "new", MAX_WORKERS) == 3


def test_auto_takes_the_workers_the_placement_needs(tmp_path: Path) -> None:
    data = _placed(tmp_path / "data", {"/": 0, "v": 2, "w": 1})
    assert worker_count.resolve(worker_count.AUTO, data, MAX_WORKERS) == 3
    assert worker_count.resolve(4, data, MAX_WORKERS) == 4


def test_an_explicit_count_too_small_for_the_placement_is_refused(tmp_path: Path) -> None:
    data = _placed(tmp_path / "data", {"/": 0, "v": 2, "w": 1})
    with pytest.raises(ValueError) as info:
        worker_count.resolve(2, data, MAX_WORKERS)
    assert str(info.value) == (
        "vhost 'v' lives on worker 2 (its data is in shard-2/): start with --workers 3 or more"
    )


def test_an_unreadable_placement_is_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / FILENAME).write_text("{not json")
    with pytest.raises(ValueError, match="is not JSON"):
        worker_count.resolve(worker_count.AUTO, data, MAX_WORKERS)
