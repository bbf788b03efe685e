"""verify with an engine joins each chunk of records as an engine task (``ops.verify.engine_joins``) and
merges the tasks' states on the driver: the report is the sequential one, byte for byte, for
any chunk size (many chunk edges), finding cap and selection, and staging is left empty."""
from __future__ import annotations

import json
import os
import random
import struct

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import STORE_NAMES, load_answers, reference_store
from corruptions import CASES, DLEDGER_CASES, corrupt
from formats import commitlog as cl
from rmqtool.engines import Engine, get_engine
from rmqtool.errors import UnreadableError
from rmqtool.io.store import Store
from rmqtool.ops.verify import VerifyOptions, verify
from rmqtool.ops.verify import joins as verify_joins
from rmqtool.ops.verify import runner as verify_runner
from rmqtool.ops.verify.findings import FindingSink, sort_key
from rmqtool.ops.verify.forecast import Pending
from test_verify_chunks import corrupted_copy, _mutate_queues_and_index

pytest.importorskip("pyarrow")


#: chunks joined on the driver (counted by the ``chunk_tasks`` fixture)
DRIVER_JOINS: list = []


def report(root, engine=None, chunk_records=None, **kw) -> str:
    opts = VerifyOptions(level=kw.pop("level", "deep"), limit_per_check=kw.pop("limit", None),
                         chunk_records=chunk_records, **kw)
    before = len(DRIVER_JOINS)
    rep = verify(Store(root), opts, engine=engine, split_size=20000).as_dict()
    if engine is not None:
        assert len(DRIVER_JOINS) == before, "a chunk was joined on the driver"
    rep["summary"].pop("reread_after_replace")
    return json.dumps(rep, sort_keys=True)


@pytest.fixture(scope="module")
def pool():
    with get_engine("local", jobs=2) as eng:
        yield eng


@pytest.fixture
def chunk_tasks(monkeypatch):
    """Counts the chunk-join tasks run through ``Engine.map``; the driver may not join a chunk."""
    seen = []
    real = Engine.map

    def counting(self, items, fn, schema):
        seen.append(len(items))
        return real(self, items, fn, schema)
    monkeypatch.setattr(Engine, "map", counting)

    real_join = verify_runner.join_chunks

    def driver_join(*a, **kw):
        DRIVER_JOINS.append(1)
        return real_join(*a, **kw)
    monkeypatch.setattr(verify_runner, "join_chunks", driver_join)
    return seen


def _shift_queue_offsets(root, seed: int) -> None:
    """Overwrite QUEUEOFFSET of a few records (not covered by the body CRC): continuity breaks."""
    rng = random.Random(seed)
    at = cl.MESSAGE_HEAD_OFFSETS["queue_offset"]
    for m in rng.sample(load_answers("basic")["messages"], 5):
        base = m["phyOffset"] // FILE_SIZE * FILE_SIZE
        with open(root / "commitlog" / f"{base:020d}", "r+b") as fh:
            fh.seek(m["phyOffset"] - base + at)
            fh.write(struct.pack(">q", rng.choice([0, m["queueOffset"] + 2, m["queueOffset"] - 1])))


FILE_SIZE = Store(reference_store("basic")).commitlog.file_size


@pytest.mark.parametrize("level", ["shallow", "deep"])
def test_reference_stores_joined_as_tasks_equal_the_sequential_report(level, pool, chunk_tasks):
    for name in STORE_NAMES:
        root = reference_store(name)
        whole = report(root, level=level)
        before = len(chunk_tasks)
        assert report(root, pool, chunk_records=13, level=level) == whole, name
        assert len(chunk_tasks) == before + 1 and chunk_tasks[-1] > 1, name      # one run, many chunks
        assert report(root, pool, level=level) == whole, name


@pytest.mark.parametrize("case", CASES + DLEDGER_CASES)
def test_corrupt_commitlogs_joined_as_tasks(case, store_copy, tmp_path, pool, chunk_tasks):
    root = corrupted_copy(store_copy, tmp_path, case)
    whole = report(root)
    assert report(root, pool, chunk_records=7) == whole
    assert report(root, pool, chunk_records=1, limit=2) == report(root, limit=2)
    assert report(root, pool, chunk_records=7, level="shallow") == report(root, level="shallow")
    assert chunk_tasks and min(chunk_tasks) > 1


@pytest.mark.parametrize("seed", range(6))
def test_mutated_queues_index_and_queue_offsets_joined_as_tasks(seed, store_copy, pool, chunk_tasks):
    root = store_copy(["basic", "mixed", "crashed"][seed % 3])
    _mutate_queues_and_index(root, seed)
    if seed % 3 == 0:
        _shift_queue_offsets(root, seed)
    whole = json.loads(report(root))
    if seed % 3 == 0:                        # breaks of continuity, many of them across chunk edges
        assert whole["summary"]["checks"].get("commitlog.queue-offset:error", 0) >= 3
    assert report(root, pool, chunk_records=1) == json.dumps(whole, sort_keys=True)
    assert report(root, pool, chunk_records=5, limit=1) == report(root, limit=1)
    assert report(root, pool, chunk_records=3, limit=0) == report(root, limit=0)
    pick = whole["forecast"]["not_dispatched"][:1] or [{"topic": "TopicTest", "queue_id": 1}]
    for args in ({"topic": pick[0]["topic"]}, {"topic": pick[0]["topic"], "queue_id": pick[0]["queue_id"]},
                 {"only": ("consumequeue", "index")}):
        assert report(root, pool, chunk_records=4, **args) == report(root, **args), args


def test_staging_location_is_left_empty(store_copy, tmp_path, chunk_tasks):
    root = store_copy("basic")
    corrupt(root, "bad-magic")
    where = tmp_path / "staging"
    where.mkdir()
    with get_engine("local", jobs=2, staging=str(where)) as eng:
        assert report(root, eng, chunk_records=50) == report(root)
    assert chunk_tasks and os.listdir(where) == []


def test_a_failed_join_task_leaves_staging_empty(tmp_path, monkeypatch):
    from rmqtool.ops.verify import joins

    def broken(*a, **kw):
        raise UnreadableError("disk gone", "somewhere")
    monkeypatch.setattr(joins, "join_chunk", broken)
    with get_engine("local", jobs=1, staging=str(tmp_path)) as eng:        # tasks in this process
        with pytest.raises(UnreadableError, match="disk gone"):
            report(reference_store("basic"), eng, chunk_records=100)
    assert os.listdir(tmp_path) == []


def test_without_staging_the_driver_joins(store_copy, pool, monkeypatch):
    """A cluster without --staging: the chunks cannot reach the executors, the driver joins them."""
    root = store_copy("basic")
    corrupt(root, "zeroed-middle")
    whole = report(root)
    monkeypatch.setattr(type(pool), "open_staging", lambda self: None)
    monkeypatch.setattr(Engine, "map", lambda *a, **kw: pytest.fail("chunk tasks without staging"))
    real_join, joined = verify_joins.join_chunk, []
    monkeypatch.setattr(verify_joins, "join_chunk", lambda *a: joined.append(1) or real_join(*a))
    assert report(root, pool, chunk_records=9) == whole
    assert len(joined) > 1


_FINDINGS = st.lists(st.tuples(st.sampled_from(["a", "b", None]), st.one_of(st.none(), st.integers(0, 12)),
                               st.sampled_from(["cq.gap", "index.chain"]), st.integers(0, 2)), max_size=50)


@settings(max_examples=150, deadline=None)
@given(_FINDINGS, st.lists(st.integers(0, 50), max_size=6), st.one_of(st.none(), st.integers(0, 4)))
def test_merged_sinks_keep_and_count_what_one_sink_does(items, cuts, limit):
    """Sinks of consecutive parts merged in order = one sink fed everything (ties included)."""
    def feed(sink, part):
        for file, offset, check, msg in part:
            sink.add(check, file, offset, f"m{msg}", excerpt=False)
        return sink
    one = feed(FindingSink(limit), items)
    bounds = [0] + sorted(min(c, len(items)) for c in cuts) + [len(items)]
    merged = feed(FindingSink(limit), items[:bounds[1]])
    for lo, hi in zip(bounds[1:], bounds[2:]):
        merged.merge(feed(FindingSink(limit), items[lo:hi]))
    view = lambda s: [(sort_key(f), f.message) for f in s.sorted()]      # noqa: E731
    assert view(merged) == view(one)
    assert merged.counts == one.counts and merged.by_kind == one.by_kind
    assert merged.suppressed() == one.suppressed()


def test_merged_pending_lists_the_first_ones(monkeypatch):
    from rmqtool.ops.verify import forecast
    monkeypatch.setattr(forecast, "LIST_LIMIT", 4)

    class Topics:
        names = ["a", "b"]

    class Table:
        cols = {"phy": np.arange(100, 200), "topic_id": np.arange(100) % 2, "queue_id": np.arange(100) % 2,
                "store_ts": 1_000 + np.arange(100)[::-1]}
        topics = Topics()

        def where(self, i):
            return "f", i

        def describe(self, i):
            return {"phy_offset": 100 + i}
    parts = [[0, 1, 2], [], [3, 4], [5]]
    one, merged = Pending(), Pending()
    for rows in parts:
        one.add(Table(), rows)
        part = Pending()
        part.add(Table(), rows)
        merged.merge(part)
    assert (merged.count, merged.first, merged.listing) == (one.count, one.first, one.listing)
    assert merged.count == 6 and len(merged.listing) == 4
    # every record counted per queue, listed or not, with its oldest and newest store time
    assert merged.by_queue == one.by_queue == {("a", 0): [3, 1095, 1099], ("b", 1): [3, 1094, 1098]}
