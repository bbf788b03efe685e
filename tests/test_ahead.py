"""``records.ahead.one_ahead``: a walk's batches made in a thread, one ahead of the checks."""
from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings, strategies as st

from rmqtool.records.ahead import one_ahead


def _workers() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "rmqtool-ahead")


@given(st.lists(st.integers()), st.integers(min_value=1, max_value=4))
@settings(max_examples=50, deadline=None)
def test_items_come_in_order_and_all_of_them(items, depth):
    assert list(one_ahead(items, depth)) == items
    assert _workers() == 0


def test_an_error_comes_where_its_item_would_have():
    def items():
        yield 1
        yield 2
        raise OSError("read failed")

    got = []
    with pytest.raises(OSError, match="read failed"):
        for item in one_ahead(items()):
            got.append(item)
    assert got == [1, 2] and _workers() == 0


def test_leaving_early_stops_the_worker_and_closes_the_source():
    made, closed = [], threading.Event()

    def items():
        try:
            for i in range(1000):
                made.append(i)
                yield i
        finally:
            closed.set()

    for item in one_ahead(items()):
        if item == 3:
            break
    assert closed.wait(5) and _workers() == 0
    assert len(made) <= 3 + 1 + 2          # the one taken, at most one waiting, one being made


def test_the_next_item_is_made_while_the_caller_holds_the_last():
    making_second = threading.Event()

    def items():
        yield 0
        making_second.set()           # reached only when the worker goes on past the first item
        yield 1

    for item in one_ahead(items()):
        if item == 0:
            assert making_second.wait(10), "the worker waited for the caller"
