"""The active node's guard (amqpd/shell/store_role.py): it proves the lock every interval
and, the first time it cannot, drops the store's connection and stops serving."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from amqpd.shell import store_role
from amqpd.shell.store_role import StoreRole
from persistence.errors import StoreError


class FakeLockedStore:
    description = "postgresql://db.example/amqpd"

    def __init__(self, answers: list[bool]) -> None:
        self.answers = answers
        self.checks = 0
        self.aborted = False

    async def holds_lock(self, timeout: float) -> bool:
        assert timeout == store_role.CHECK_TIMEOUT
        self.checks += 1
        return self.answers.pop(0)

    def abort(self) -> None:
        self.aborted = True


def test_guard_stops_serving_the_first_time_the_lock_cannot_be_proven(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(store_role, "CHECK_INTERVAL", 0.001)
    role = StoreRole("postgresql://db.example/amqpd", tmp_path, "FULL")
    assert role.shared and role.role == "standby"
    role.role = "active"
    store = FakeLockedStore([True, True, False, True])
    reasons: list[tuple[str, bool]] = []

    async def on_lost(reason: str) -> None:
        reasons.append((reason, store.aborted))

    async def main() -> None:
        with anyio.fail_after(30):
            await role.guard(store, on_lost)  # type: ignore[arg-type]

    anyio.run(main)
    assert store.checks == 3 and store.answers == [True]
    assert role.role == "lost"
    assert reasons == [
        ("lost the lock of postgresql://db.example/amqpd: this node is no longer active", True)
    ]  # the connection was dropped before the server was told to stop serving


def test_sqlite_is_standalone_and_a_bad_url_is_refused(tmp_path: Path) -> None:
    role = StoreRole(None, tmp_path, "FULL")
    assert not role.shared and role.role == "standalone"
    with pytest.raises(StoreError, match="expected postgresql://"):
        StoreRole("mysql://db/amqpd", tmp_path, "FULL")
