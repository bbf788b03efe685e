"""Rebuild streams (issue 20.8): ConsumeQueue units and IndexFile entries are written as the
walk goes, in buffers whose size does not depend on the store. Every cut of those buffers
gives upstream's files byte for byte; the cuts only decide when bytes are written."""
from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import load_answers, reference_store
from rmqtool.broker.dispatch import (CqCollector, IndexBuilder, QueueLayout, QueueUnits, RecordColumns,
                              dispatch_batch, layout_cq)
from rmqtool.io.indexfile import IndexGeometry
from rmqtool.io.store import Store
from test_rebuild import index_contents, tree

GEOMETRY = IndexGeometry(61, 350)


def _random_rows(rnd: random.Random, n: int) -> list[dict]:
    rows, phy, ts, next_offset = [], 0, 1_700_000_000_000, {}
    pool = [f"k{i}" for i in range(rnd.randint(1, 30))]
    for _ in range(n):
        queue = (rnd.choice(["T", "U"]), rnd.randint(0, 2))
        next_offset[queue] = next_offset.get(queue, -1) + 1
        rows.append({"topic": queue[0], "queue_id": queue[1], "queue_offset": next_offset[queue],
                     "keys": " ".join(rnd.choice(pool) for _ in range(rnd.randint(0, 3))) or None,
                     "uniq_key": f"U{rnd.randint(0, 10**6)}", "phy_offset": phy, "store_timestamp": ts,
                     "size": 100})
        phy += rnd.randint(92, 3000)
        ts += rnd.choice([0, 1, 999, 1500])
    return rows


@pytest.mark.parametrize("seed", range(5))
def test_index_builder_folds_and_streams_like_one_build(seed):
    """Keys appended every 1..n keys, to memory or to a streamed file: the same images."""
    rnd = random.Random(seed)
    rows = _random_rows(rnd, rnd.randint(1, 400))
    batches, i = [], 0
    while i < len(rows):
        j = i + rnd.randint(1, 50)
        batches.append(dispatch_batch(RecordColumns.from_records(rows[i:j])))
        i = j
    slots, entries = rnd.choice([(7, 11), (61, 350), (13, 1000)])

    def build(fold, streamed):
        images, files = [], []

        class Out:
            def __init__(self):
                self.buf = bytearray(20 * entries)
                files.append(self)

            def write_entries(self, first, new):
                self.buf[20 * first:20 * first + new.nbytes] = new.tobytes()

            def close(self, image):
                self.image = image

        ib = IndexBuilder(slots, entries, images.append, fold_keys=fold, open_file=Out if streamed else None)
        for d in batches:
            ib.add(d.key_hash, d.key_phy_offset, d.key_store_timestamp, d.record_phy_offset)
        ib.finish()
        if streamed:            # put the streamed entries back into each image
            for im, out in zip(images, files):
                n = int(im.header["index_count"][0]) - 1
                im.entries = np.frombuffer(bytes(out.buf[20:20 * (n + 1)]), im.entries.dtype)
        return [im.to_bytes() for im in images], ib.entries

    want = build(1 << 30, False)
    for fold in (1, 2, 7, rnd.randint(1, 100)):
        assert build(fold, False) == want
        assert build(fold, True) == want


@pytest.mark.parametrize("seed", range(5))
def test_queue_layout_fed_in_pieces_equals_whole(seed):
    """Units placed a batch at a time (the rule's state carried) equal one placement,
    gaps, repeats and skipped ranges included."""
    rnd = random.Random(seed)
    n = rnd.randint(1, 300)
    qoff = np.cumsum([rnd.choice([1, 1, 1, 0, 2, 5]) for _ in range(n)]) + rnd.randint(0, 90)
    phy = np.cumsum([rnd.choice([100, 100, -50, 0]) for _ in range(n)]) + 10_000
    size = np.full(n, 60, np.int64)
    tags = np.arange(n, dtype=np.int64)
    skipped = [(int(phy[n // 2]) - 1, int(phy[n // 2]))]

    whole = layout_cq(QueueUnits("T", 0, qoff, phy, size, tags), 800, skipped)
    placer = QueueLayout("T", 0, 800, skipped)
    parts, i = [], 0
    while i < n:
        j = i + rnd.randint(1, 40)
        parts.append(placer.add(qoff[i:j], phy[i:j], size[i:j], tags[i:j]))
        i = j
    assert b"".join(p.tobytes() for p in parts) == whole.units.tobytes()
    assert (placer.first_file, placer.real_units, placer.warnings) == (whole.first_file, whole.real_units,
                                                                      whole.warnings)


class _EveryUnitPlacedOneByOne(QueueLayout):
    """The reference: ``_place``'s per-unit rule for every batch, never the shortcut."""

    def _each_unit_in_place(self, qoff, end_phy) -> bool:
        return False


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_queue_layout_shortcut_equals_the_per_unit_rule(data):
    """A batch whose units all sit where the writer stands skips ``_place``: the same units,
    warnings and state as placing each one by the rule, for runs in order (the shortcut),
    starting mid-file (leading fillers), with repeats, gaps and skipped ranges."""
    first = data.draw(st.integers(0, 120), label="first queue offset")
    steps = data.draw(st.lists(st.sampled_from([1, 1, 1, 1, 0, 2, 7]), min_size=1, max_size=200), label="steps")
    moves = data.draw(st.lists(st.sampled_from([100, 100, 100, 0, -50]), min_size=len(steps),
                               max_size=len(steps)), label="phy moves")
    qoff = first + np.cumsum(steps) - steps[0]
    phy = 10_000 + np.cumsum(moves)
    size = np.asarray(data.draw(st.lists(st.integers(20, 90), min_size=len(steps), max_size=len(steps))), np.int32)
    tags = np.arange(len(steps), dtype=np.int64) * 7919
    skipped = [(int(phy[len(phy) // 2]) - 1, int(phy[len(phy) // 2]))] if data.draw(st.booleans()) else []
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, len(steps) - 1)), max_size=8), label="cuts")))

    shortcut, reference = QueueLayout("T", 3, 800, skipped), _EveryUnitPlacedOneByOne("T", 3, 800, skipped)
    for lo, hi in zip([0] + cuts, cuts + [len(steps)]):
        batch = (qoff[lo:hi], phy[lo:hi], size[lo:hi], tags[lo:hi])
        assert shortcut.add(*batch).tobytes() == reference.add(*batch).tobytes()
    state = lambda q: (q.first_file, q.written_end, q.max_phy, q.real_units, q.logical_units, q.warnings)  # noqa: E731
    assert state(shortcut) == state(reference)


@pytest.mark.parametrize("name", ["basic", "mixed", "crashed"])
@pytest.mark.parametrize("workers", [1, 2])
def test_rebuild_all_with_tiny_buffers_is_byte_identical(store_copy, tmp_path, monkeypatch, name, workers):
    """Every CQ flush and every index fold at its smallest: the same files as with the default
    buffers, which are upstream's byte for byte (the crashed store's queues are the broker's
    from before its crash, so there only the two rebuilds are compared)."""
    import rmqtool.broker.cqbuild as cqbuild
    import rmqtool.broker.dispatch as dispatch
    import rmqtool.ops.rebuild as rb
    from rmqtool.engines import ordered
    root = store_copy(name)
    want = rb.rebuild_all(Store(root), GEOMETRY, cq_file_size=800, output=tmp_path / "want", workers=workers,
                          allow_truncate=True)
    monkeypatch.setattr(cqbuild, "BUFFER_BYTES", 1)
    monkeypatch.setattr(dispatch, "FOLD_KEYS", 3)
    monkeypatch.setattr(ordered, "IN_FLIGHT_PER_WORKER", 1)
    cq, ix = rb.rebuild_all(Store(root), GEOMETRY, cq_file_size=800, output=tmp_path / "out", workers=workers,
                            allow_truncate=True)
    assert tree(tmp_path / "out" / "consumequeue") == tree(tmp_path / "want" / "consumequeue")
    assert index_contents(tmp_path / "out" / "index") == index_contents(tmp_path / "want" / "index")
    assert (cq.units, ix.entries) == (want[0].units, want[1].entries)
    if name != "crashed":
        assert tree(tmp_path / "out" / "consumequeue") == tree(reference_store(name) / "consumequeue")
        assert index_contents(tmp_path / "out" / "index") == index_contents(reference_store(name) / "index")
        assert cq.units == sum(1 for m in load_answers(name)["messages"] if m["inConsumeQueue"])


def test_rebuild_dry_run_writes_nothing_and_counts_the_same(store_copy, tmp_path):
    import rmqtool.ops.rebuild as rb
    root = store_copy("mixed")
    before = tree(root)
    dry = rb.rebuild_all(Store(root), GEOMETRY, cq_file_size=800, dry_run=True)
    real = rb.rebuild_all(Store(root), GEOMETRY, cq_file_size=800, output=tmp_path / "out")
    assert tree(root) == before
    for d, r in zip(dry, real):
        assert (d.units, d.entries, d.records, d.warnings, len(d.files_written)) == \
            (r.units, r.entries, r.records, r.warnings, len(r.files_written))


def test_collector_and_builder_group_queues_alike():
    """CqCollector (write) and CqBuilder (rebuild) take a batch's queues from one grouping."""
    from rmqtool.broker.cqbuild import CqBuilder
    rows = _random_rows(random.Random(3), 200)
    d = dispatch_batch(RecordColumns.from_records(rows))
    coll = CqCollector()
    coll.add(d)
    builder = CqBuilder(800)
    builder.add(d)
    builder.finish()
    assert [(q.topic, q.queue_id) for q in coll.queues()] == builder.queue_keys()
    assert sum(len(q) for q in coll.queues()) == builder.units


def test_rebuild_takes_jobs_like_verify_and_export(store_copy, tmp_path):
    """One option name for parallelism: -j/--jobs (rebuild's old --workers still works)."""
    from conftest import run_cli
    root = store_copy("basic")
    for name, flag in (("jobs", "-j"), ("long", "--jobs"), ("old", "--workers")):
        r = run_cli("rebuild", "all", root, "--output", tmp_path / name, flag, "2", "--cq-file-size", 800,
                    "--index-slots", 61, "--index-entries", 350, "-f", "json")
        assert r.code == 0, r.err
    assert tree(tmp_path / "jobs" / "consumequeue") == tree(tmp_path / "old" / "consumequeue") == \
        tree(reference_store("basic") / "consumequeue")
    assert index_contents(tmp_path / "long" / "index") == index_contents(reference_store("basic") / "index")


@pytest.mark.parametrize("topics,queues,low", [(4, 8, 0), (3, 1 << 16, 0), (2, 5, (1 << 32) - 3), (1, 1, 7)])
def test_queue_order_is_the_stable_sort_of_the_keys(topics, queues, low):
    """The radix path (few topics and queues) and the 64-bit path give ``np.argsort(kind="stable")``'s
    order, queue ids read as unsigned 32-bit (a negative id from a damaged record sorts last)."""
    from rmqtool.broker.cqbuild import queue_order
    rng = np.random.default_rng(topics * queues)
    topic = rng.integers(0, topics, 5000).astype(np.int64)
    qid = (low + rng.integers(0, queues, 5000)) & 0xFFFFFFFF
    key = topic << 32 | qid
    assert np.array_equal(queue_order(key), np.argsort(key, kind="stable"))
    assert len(queue_order(key[:0])) == 0
