"""Which worker owns which vhost, and the record of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from amqpd.shell.workers import placement
from amqpd.shell.workers.placement import Placement, PlacementError


def test_new_vhosts_go_to_the_least_loaded_worker_and_stay_there() -> None:
    spread = Placement(3, {"/": 0})
    assert [spread.place(name) for name in ("a", "b", "c", "d")] == [1, 2, 0, 1]
    assert spread.place("a") == 1 and spread.owner("a") == 1
    assert spread.owner("unknown") == 0


def test_vhosts_seen_while_fresh_stay_on_worker_0_and_deleted_ones_are_forgotten() -> None:
    fresh = Placement(2, fresh=True)
    assert fresh.place("old") == 0
    fresh.fresh = False
    assert fresh.place("new") == 1
    assert fresh.keep_only({"new": None}) is True
    assert fresh.vhosts == {"new": 1}
    assert fresh.keep_only({"new": None}) is False


def test_the_record_round_trips_and_refuses_too_few_workers(tmp_path: Path) -> None:
    assert placement.load(tmp_path, 2).fresh
    placement.save(tmp_path, Placement(4, {"/": 0, "v": 3}))
    assert placement.load(tmp_path, 4).vhosts == {"/": 0, "v": 3}
    with pytest.raises(PlacementError, match=r"vhost 'v' lives on worker 3 .* --workers 4 or more"):
        placement.load(tmp_path, 2)
    (tmp_path / placement.FILENAME).write_text("{")
    with pytest.raises(PlacementError, match="is not JSON"):
        placement.load(tmp_path, 4)
    (tmp_path / placement.FILENAME).write_text('{"vhosts": {"v": "x"}}')
    with pytest.raises(PlacementError, match="not a placement record"):
        placement.load(tmp_path, 4)
