"""Which worker owns which vhost (``--workers N``, docs/multicore.md "Stage 1").

A vhost lives wholly on one worker: its exchanges, queues, bindings, messages, consumers
and connections. AMQP never routes across vhosts, so every behaviour inside one holds
unchanged. Worker 0 decides and records the placement: vhosts that exist when a data
directory first runs with several workers stay on worker 0 (their data is in its store);
a new vhost goes to the worker owning the fewest (the lowest index on a tie). The record
survives restarts (``placement.json`` in worker 0's data directory, and a copy in each
worker's, so a restarted worker recovers its vhosts before worker 0 speaks to it): a
vhost's data stays where its store is; a worker count too small for it is refused (one
line, exit 2). Pure but for `load` and `save`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FILENAME = "placement.json"


class PlacementError(ValueError):
    """The recorded placement does not fit the worker count (or the file is unreadable)."""


@dataclass(slots=True)
class Placement:
    """vhost name -> worker index, for ``workers`` workers. ``fresh``: no record existed
    (vhosts seen now are old ones, already in worker 0's store)."""

    workers: int
    vhosts: dict[str, int] = field(default_factory=dict)
    fresh: bool = False

    def owner(self, vhost: str) -> int:
        """The worker serving ``vhost`` (0 for one not placed: worker 0 answers for it, e.g.
        with "vhost not found")."""
        return self.vhosts.get(vhost, 0)

    def place(self, vhost: str) -> int:
        """The worker of ``vhost``, choosing one if it has none yet."""
        found = self.vhosts.get(vhost)
        if found is None:
            found = self.vhosts[vhost] = 0 if self.fresh else self._least_loaded()
        return found

    def keep_only(self, names: set[str] | dict[str, Any]) -> bool:
        """Forget deleted vhosts; True if any was."""
        gone = [name for name in self.vhosts if name not in names]
        for name in gone:
            del self.vhosts[name]
        return bool(gone)

    def forget(self, vhost: str) -> bool:
        """Forget one deleted vhost; True if it was placed."""
        return self.vhosts.pop(vhost, None) is not None

    def _least_loaded(self) -> int:
        counts = [0] * self.workers
        for index in self.vhosts.values():
            if index < self.workers:
                counts[index] += 1
        return counts.index(min(counts))

    def to_json(self) -> dict[str, Any]:
        return {"workers": self.workers, "vhosts": dict(sorted(self.vhosts.items()))}

    @classmethod
    def from_json(cls, data: Any, workers: int, shared: bool = False) -> Placement:
        """The recorded placement, run with ``workers`` workers (``shared``: recorded in a
        PostgreSQL store, where worker K's data is the schema amqpd_shard_K).

        Raises:
            PlacementError: malformed, or a vhost lives on a worker index >= ``workers``.
        """
        vhosts = data.get("vhosts") if isinstance(data, dict) else None
        if not isinstance(vhosts, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and v >= 0 for k, v in vhosts.items()
        ):
            raise PlacementError(f"{FILENAME} is not a placement record")
        beyond = sorted((v, k) for k, v in vhosts.items() if v >= workers)
        if beyond:
            index, name = beyond[-1]
            where = f"the schema amqpd_shard_{index}" if shared else f"shard-{index}/"
            raise PlacementError(
                f"vhost '{name}' lives on worker {index} (its data is in {where}): "
                f"start with --workers {index + 1} or more"
            )
        return cls(workers, dict(vhosts))


def load(data_dir: Path | None, workers: int) -> Placement:
    """The placement recorded in ``data_dir`` (``fresh`` if there is none).

    Raises:
        PlacementError: see `Placement.from_json`; an unreadable file.
    """
    if data_dir is None:
        return Placement(workers, fresh=True)
    path = data_dir / FILENAME
    try:
        text = path.read_text()
    except FileNotFoundError:
        return Placement(workers, fresh=True)
    except OSError as exc:
        raise PlacementError(f"cannot read {path}: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except ValueError:
        raise PlacementError(f"{path} is not JSON") from None
    return Placement.from_json(data, workers)


def save(data_dir: Path | None, placement: Placement) -> None:
    """Record the placement (written aside and renamed: never half a file)."""
    if data_dir is None:
        return
    path = data_dir / FILENAME
    scratch = path.with_suffix(".tmp")
    scratch.write_text(json.dumps(placement.to_json(), indent=1) + "\n")
    scratch.replace(path)
