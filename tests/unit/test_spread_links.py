"""A worker's forwarding of publishes for other workers' queues (amqpd/shell/workers/
spread.py `SpreadLinks.forward`): the records written to each link, read back with the
link's own reader."""

from __future__ import annotations

from pathlib import Path

from amqpd.model.broker import Broker
from amqpd.model.message import Message
from amqpd.model.outbound import PLANS_KEPT
from amqpd.model.queue import Queue
from amqpd.model.replica import RemoteQueue
from amqpd.shell.workers.role import WorkerRole
from amqpd.shell.workers.spread import SpreadLinks
from amqpd.wire.forwarding import Forwarded, RecordReader, TopologyChange


def _links(tmp_path: Path) -> SpreadLinks:
    return SpreadLinks(WorkerRole(0, 3, tmp_path), Broker(), lambda _vhost: True, lambda: None)


def _stub(name: str, worker: int) -> RemoteQueue:
    return RemoteQueue(name, "/", worker, False, False, False, {})


def _message() -> Message:
    return Message("fan", "", b"\x03fan", b"\x00", b"\x00" * 14, b"body", False)


def _sent(links: SpreadLinks, peer: int) -> list[list[str]]:
    """The target queue names of every FORWARD record written for ``peer`` so far."""
    reader = RecordReader()
    reader.feed(bytes(links.forwarder.outboxes[peer].buffer))
    names = []
    while (record := reader.next_record()) is not None:
        if isinstance(record, Forwarded):
            names.append(list(record.queues))
    return names


def _forward(links: SpreadLinks, targets: list[Queue]) -> None:
    links.forward("/", _message(), None, False, targets, None, False)


def test_each_owner_gets_one_copy_naming_its_queues_each_time(tmp_path: Path) -> None:
    local = Queue("here", "/", False, None, False, {})
    targets: list[Queue] = [local, _stub("a", 1), _stub("b", 2), _stub("c", 1)]
    links = _links(tmp_path)
    for _ in range(3):  # the second and third use the plan worked out for the first
        _forward(links, list(targets))
    assert _sent(links, 1) == [["a", "c"]] * 3
    assert _sent(links, 2) == [["b"]] * 3


def test_a_queue_redeclared_on_another_worker_is_forwarded_there(tmp_path: Path) -> None:
    links = _links(tmp_path)
    first = _stub("q", 1)
    _forward(links, [first])
    moved = _stub("q", 2)  # deleted on worker 1, declared again on worker 2: a new stub
    _forward(links, [moved])
    assert _sent(links, 1) == [["q"]]
    assert _sent(links, 2) == [["q"]]


def test_many_routing_results_keep_a_bounded_number_of_plans(tmp_path: Path) -> None:
    links = _links(tmp_path)
    for index in range(PLANS_KEPT * 2 + 1):
        _forward(links, [_stub(f"q{index}", 1)])
    assert len(_sent(links, 1)) == PLANS_KEPT * 2 + 1
    assert len(links.forwarder.copies._plans) <= PLANS_KEPT


def test_a_change_is_written_before_the_next_publish_and_only_once(tmp_path: Path) -> None:
    """The engine calls the compiled copier directly (`SpreadLinks.forward` is
    `Forwarding.forward`); a declare or bind made here still reaches each peer before the
    publishes routed with it."""
    links = _links(tmp_path)
    _forward(links, [_stub("before", 1)])
    change = ("test-change", "q")
    links.changed("/", change)  # type: ignore[arg-type]
    _forward(links, [_stub("after", 1)])
    _forward(links, [_stub("again", 1)])
    reader = RecordReader()
    reader.feed(bytes(links.forwarder.outboxes[1].buffer))
    kinds = []
    while (record := reader.next_record()) is not None:
        if isinstance(record, Forwarded):
            kinds.append(record.queues[0])
        elif isinstance(record, TopologyChange):
            kinds.append("change")
    assert kinds == ["before", "change", "after", "again"]


class _Decision:
    def __init__(self, log: list[tuple[str, bool]], name: str) -> None:
        self._log, self._name = log, name

    def decided(self, ok: bool) -> None:
        self._log.append((self._name, ok))


def test_a_held_reply_is_refused_only_for_its_own_refused_change(tmp_path: Path) -> None:
    links = _links(tmp_path)
    log: list[tuple[str, bool]] = []
    links.changed("/", ("queue", "tasks", 0, False, False, False, {}))
    links.hold(_Decision(log, "declare"))  # wrote the change: the refusal of it is its own
    links.hold(_Decision(log, "passive"))  # waits for the same record, changed nothing
    change_id = links.forwarder.outboxes[1].last_change_id
    assert change_id == links.forwarder.outboxes[2].last_change_id
    links._settled(1, change_id, [change_id])  # worker 1 refused the declaration
    assert log == []  # worker 2 has not applied it yet
    links._settled(2, change_id, [])
    assert log == [("declare", False), ("passive", True)]
    links.changed("/", ("queue", "other", 0, False, False, False, {}))
    links.hold(_Decision(log, "next"))
    links._settled(1, None, [])  # a lost link counts as through, refusing nothing
    links._settled(2, change_id + 1, [])
    assert log[-1] == ("next", True)
