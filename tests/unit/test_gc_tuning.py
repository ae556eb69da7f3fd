"""The broker process tunes CPython's cyclic garbage collector before it serves
(amqpd/cli/main.py `tune_garbage_collector`)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from amqpd.cli.main import GC_YOUNG_THRESHOLD, tune_garbage_collector


@pytest.fixture
def restored_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


@pytest.mark.usefixtures("restored_gc")
def test_startup_objects_are_frozen_and_young_collections_rarer() -> None:
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    tune_garbage_collector()
    assert gc.get_freeze_count() > 1000  # the imported modules' objects, at least
    assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, 10, 10)
    assert GC_YOUNG_THRESHOLD > 700


@pytest.mark.usefixtures("restored_gc")
def test_cyclic_garbage_made_while_serving_is_still_collected() -> None:
    tune_garbage_collector()

    class Node:
        def __init__(self) -> None:
            self.other: Node | None = None

    collected: list[str] = []
    first, second = Node(), Node()
    first.other, second.other = second, first
    weakref.finalize(first, collected.append, "first")
    del first, second
    gc.collect()
    assert collected == ["first"]
