"""Deep verify joins the store one CommitLog range (chunk of records) at a time, reads index
entries a window at a time and caps findings by report order: the report is the same
whatever the chunk and window sizes, and nothing is left in the temporary directory."""
from __future__ import annotations

import json
import random
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import dledger_copy
from corruptions import CASES, DLEDGER_CASES, corrupt, corrupt_dledger
from rmqtool.io.store import Store
from rmqtool.ops.verify import VerifyOptions, verify
from rmqtool.ops.verify import index as verify_index
from rmqtool.ops.verify import runner as verify_runner
from rmqtool.ops.verify.chunks import RecordChunks, RoutedRows, SpillDir
from rmqtool.ops.verify.findings import CHECKS, FindingSink, sort_key
from rmqtool.ops.verify.records import TopicTable


def report(root, chunk_records=None, **kw) -> str:
    opts = VerifyOptions(level=kw.pop("level", "deep"), limit_per_check=kw.pop("limit", None),
                         chunk_records=chunk_records, **kw)
    rep = verify(Store(root), opts).as_dict()
    rep["summary"].pop("reread_after_replace")
    return json.dumps(rep, sort_keys=True)


@pytest.fixture
def spill_root(tmp_path, monkeypatch):
    """Temporary files of the run go here, so the test can see what is left."""
    where = tmp_path / "spill"
    where.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(where))
    return where


def _mutate_queues_and_index(root: Path, seed: int) -> None:
    """Overwrite a few 4-byte words in ConsumeQueue units and IndexFile entries/slots."""
    rng = random.Random(seed)
    files = sorted(p for p in (root / "consumequeue").rglob("*") if p.is_file())
    files += sorted((root / "index").iterdir())
    for path in rng.sample(files, min(4, len(files))):
        size = path.stat().st_size
        with open(path, "r+b") as fh:
            for _ in range(3):
                at = rng.randrange(0, max(size - 4, 1)) // 4 * 4
                fh.seek(at)
                fh.write(rng.choice([b"\0\0\0\0", b"\xff\xff\xff\xff", rng.randbytes(4)]))


def corrupted_copy(store_copy, tmp_path, case: str):
    """A reference store copy with a named corruption (``corruptions``): classic or DLedger."""
    if case in DLEDGER_CASES:
        root = dledger_copy(tmp_path / "dledger")
        corrupt_dledger(root, case)
    else:
        root = store_copy("crashed" if case == "torn-tail" else "basic")
        corrupt(root, case)
    return root


@pytest.mark.parametrize("case", CASES + DLEDGER_CASES)
def test_chunked_report_equals_one_chunk_on_corrupt_commitlogs(store_copy, tmp_path, case, spill_root, monkeypatch):
    root = corrupted_copy(store_copy, tmp_path, case)
    whole = report(root)
    monkeypatch.setattr(verify_index, "ENTRY_WINDOW", 5)
    assert report(root, chunk_records=7) == whole
    assert report(root, chunk_records=7, level="shallow") == report(root, level="shallow", chunk_records=10 ** 9)
    assert not list(spill_root.iterdir())


@pytest.mark.parametrize("seed", range(8))
def test_chunked_report_equals_one_chunk_on_mutated_queues_and_index(store_copy, seed, spill_root, monkeypatch):
    root = store_copy(["basic", "mixed", "crashed"][seed % 3])
    _mutate_queues_and_index(root, seed)
    whole = report(root)
    topic = json.loads(whole)["forecast"]["not_dispatched"][:1]
    monkeypatch.setattr(verify_index, "ENTRY_WINDOW", 3)
    assert report(root, chunk_records=11) == whole
    assert report(root, chunk_records=1, limit=3) == report(root, limit=3)
    if topic:
        args = {"topic": topic[0]["topic"], "queue_id": topic[0]["queue_id"]}
        assert report(root, chunk_records=5, **args) == report(root, **args)
    assert not list(spill_root.iterdir())


@pytest.mark.parametrize("seed", range(6))
def test_queues_kept_from_the_frontier_pass_make_the_report_of_queues_read_again(store_copy, seed, monkeypatch):
    """The ConsumeQueues the frontier pass read are kept for the unit checks with their findings
    (``QUEUE_KEEP_BYTES``): each queue is read once, and the report (findings, their order and cap, a
    topic/queue selection) is the one made when every queue is read again, or only some are kept."""
    root = store_copy(["basic", "mixed", "crashed"][seed % 3])
    _mutate_queues_and_index(root, seed)
    reads = []
    real = verify_runner.read_queue
    monkeypatch.setattr(verify_runner, "read_queue", lambda store, ref, sink: reads.append(ref) or real(store, ref, sink))
    kept = [report(root, limit=2), report(root, level="shallow")]
    queues = len(list(Store(root).queues()))
    assert len(reads) == 2 * queues                 # once per queue and run
    first = next(iter(Store(root).queues()))
    kept.append(report(root, topic=first.topic, queue_id=first.queue_id))
    monkeypatch.setattr(verify_runner, "QUEUE_KEEP_BYTES", 0)
    reads.clear()
    again = [report(root, limit=2), report(root, level="shallow"),
             report(root, topic=first.topic, queue_id=first.queue_id)]
    assert len(reads) == 6 * queues                 # the frontier pass, then the checks
    assert again == kept
    monkeypatch.setattr(verify_runner, "QUEUE_KEEP_BYTES", 200)    # a queue or two kept, the rest read again
    assert [report(root, limit=2), report(root, level="shallow"),
            report(root, topic=first.topic, queue_id=first.queue_id)] == kept


@pytest.mark.parametrize("case", CASES[::3] + DLEDGER_CASES[:1])
def test_joins_in_threads_equal_joins_in_sequence(store_copy, tmp_path, case, spill_root, monkeypatch):
    """Chunks joined by a thread pool, each into its own state merged in chunk order, make the
    report that joining them one after another into one state makes."""
    root = corrupted_copy(store_copy, tmp_path, case)
    monkeypatch.setattr(verify_runner, "join_threads", lambda chunks: 1)
    in_sequence = report(root, chunk_records=5, limit=4)
    monkeypatch.setattr(verify_runner, "join_threads", lambda chunks: 3)
    assert report(root, chunk_records=5, limit=4) == in_sequence
    assert not list(spill_root.iterdir())


def test_full_chunks_wait_on_disk_and_are_removed(store_copy, spill_root, monkeypatch):
    """Every chunk but the last is written to the temporary directory while verify runs."""
    seen = []
    real = RecordChunks.chunk

    def spy(self, k, columns=None):
        seen.append([p.name for p in spill_root.rglob("*")])
        return real(self, k, columns)
    monkeypatch.setattr(RecordChunks, "chunk", spy)
    root = store_copy("basic")
    report(root, chunk_records=500)
    assert any(any(n.startswith("records-") for n in names) for names in seen)
    assert not list(spill_root.iterdir())


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", None]), st.one_of(st.none(), st.integers(0, 30)),
                          st.sampled_from(["cq.gap", "cq.order", "index.chain"])), max_size=60, unique=True),
       st.integers(0, 6), st.randoms())
def test_finding_cap_keeps_the_first_by_report_order(items, limit, rnd):
    """At most ``limit`` findings per check are kept: the first by (file, offset), in any arrival order."""
    def fill(order):
        sink = FindingSink(limit)
        for file, offset, check in order:
            sink.add(check, file, offset, f"{file}:{offset}", excerpt=False)
        return sink
    shuffled = list(items)
    rnd.shuffle(shuffled)
    a, b = fill(items), fill(shuffled)
    key = lambda f: (sort_key(f), f.message)   # noqa: E731
    assert sorted(map(key, a.findings)) == sorted(map(key, b.findings))
    unlimited = FindingSink(None)
    for file, offset, check in items:
        unlimited.add(check, file, offset, "", excerpt=False)
    for check in {c for _, _, c in items}:
        kept = [f for f in a.findings if f.check == check]
        everything = sorted(sort_key(f) for f in unlimited.findings if f.check == check)
        assert sorted(sort_key(f) for f in kept) == everything[:limit]
    assert a.suppressed() == len(items) - len(a.findings)
    assert set(CHECKS) >= {c for _, _, c in items}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 10 ** 6), min_size=1, max_size=40, unique=True),
       st.lists(st.integers(-5, 10 ** 6 + 100), max_size=80), st.integers(1, 5))
def test_rows_go_to_the_chunk_holding_their_offset(phys, offsets, chunk_records):
    """RoutedRows: each row lands in the chunk of the last record at or before its offset (the
    first chunk for offsets before every record), in the order rows were added."""
    phys = sorted(phys)
    spill = SpillDir()
    try:
        chunks = RecordChunks(TopicTable(), [], spill, chunk_records)
        for p in phys:
            chunks.append({"phy": np.array([p], np.int64), "size": np.array([1], np.int64)})
        chunks.finish()
        dtype = np.dtype([("offset", np.int64), ("n", np.int32)])
        routed = RoutedRows("t", dtype, chunks)
        rows = np.zeros(len(offsets), dtype)
        rows["offset"], rows["n"] = offsets, np.arange(len(offsets))
        half = len(rows) // 2
        routed.add(rows[:half], rows["offset"][:half])
        routed._flush() if len(chunks) > 1 else None
        routed.add(rows[half:], rows["offset"][half:])
        firsts = [int(chunks.chunk(k).cols["phy"][0]) for k in range(len(chunks))]
        for k in range(len(chunks)):
            got = routed.take(k)
            want = [i for i, o in enumerate(offsets)
                    if max([j for j, f in enumerate(firsts) if f <= o] or [0]) == k]
            assert got["n"].tolist() == want
    finally:
        spill.close()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 6), st.booleans(), st.booleans()), min_size=1, max_size=12),
       st.integers(1, 9), st.integers(-5, 400), st.integers(0, 400))
def test_chunks_of_walked_and_adopted_parts_read_as_one_table(parts, chunk_records, lo, span):
    """Chunks mixing records walked here (some carved) with parts adopted from staging: each chunk
    reads as the concatenation of its records (topic ids renumbered, key records rebased), the
    count of walked records in a range is the brute-force one, and closing leaves no part behind."""
    import pickle
    from rmqtool.io.staging import Staging
    from rmqtool.ops.verify.chunks import StagedPart
    spill, staging = SpillDir(), Staging()
    try:
        chunks = RecordChunks(TopicTable(), [], spill, chunk_records)
        phy, want = 0, []
        for n, staged, carved in parts:
            rows = np.arange(phy, phy + 10 * n, 10, dtype=np.int64)
            phy += 10 * n + 7
            local_topics = np.arange(n, dtype=np.int32) % 2
            cols = {"phy": rows, "carved": np.full(n, carved and not staged), "topic_id": local_topics,
                    "key_rec": np.arange(n, dtype=np.int64), "key_hash": (rows % 97).astype(np.int32)}
            mapping = np.array([5, 3], dtype=np.int32)
            if staged:
                ref = staging.put(pickle.dumps(cols, protocol=5))
                chunks.adopt(StagedPart(staging, ref, mapping, 1), n, int(rows[0]), int(rows[-1]))
            else:
                cols = dict(cols, topic_id=mapping[local_topics], file_idx=np.zeros(n, np.int32))
                chunks.append(cols)
            want += [(int(p), int(mapping[t]), bool(cols["carved"][i]), int(p % 97))
                     for i, (p, t) in enumerate(zip(rows, local_topics))]
        chunks.finish()
        got = []
        for k in range(len(chunks)):
            c = chunks.chunk(k).cols
            assert c["key_rec"].tolist() == list(range(len(c["phy"])))          # one key per record, rebased
            got += list(zip(c["phy"].tolist(), c["topic_id"].tolist(), c["carved"].tolist(), c["key_hash"].tolist()))
        assert got == want
        hi = lo + span
        assert chunks.count(lo, hi) == sum(1 for p, _, carved, _ in want if lo <= p < hi and not carved)
    finally:
        spill.close()
    assert not Path(staging.root).exists() or not list(Path(staging.root).iterdir())
    staging.close()


# --- the index files checked while the walk runs (``runner.IndexPass``) ------------------------------
REFERENCE_STORES = ("basic", "mixed", "crashed", "consumers", "propcrc-lmq-batchcq", "rocksdb-cq", "dledger", "timer")


def _reference_copy(store_copy, tmp_path, name: str) -> Path:
    from conftest import timer_copy
    if name == "dledger":
        return dledger_copy(tmp_path / "dledger")
    if name == "timer":
        return timer_copy(tmp_path / "timer")
    return store_copy(name)


def _routed_during_walk(monkeypatch) -> list:
    """Every bound ``known_starts`` answered with (None: the walk had finished)."""
    bounds = []
    real = RecordChunks.known_starts

    def spy(self, offset):
        starts, bound = real(self, offset)
        bounds.append(bound)
        return starts, bound
    monkeypatch.setattr(RecordChunks, "known_starts", spy)
    return bounds


@pytest.mark.parametrize("name", REFERENCE_STORES)
def test_index_checks_during_the_walk_make_the_report_of_checks_after_it(store_copy, tmp_path, name, spill_root,
                                                                         monkeypatch):
    """The index files are checked in a thread while the CommitLog walk runs, their entries routed to
    the record chunks as the walk makes them: the report (findings, their cap and order, summary,
    forecast) is the one of the same checks run after the walk, on every reference store, whole,
    with its index and queues mutated, and cut into many chunks and entry windows."""
    root = _reference_copy(store_copy, tmp_path, name)
    runs = [dict(), dict(chunk_records=3, limit=2), dict(level="shallow", chunk_records=4)]

    def reports():
        return [report(root, **kw) for kw in runs]
    monkeypatch.setattr(verify_index, "ENTRY_WINDOW", 4)
    monkeypatch.setattr(verify_runner.IndexPass, "DURING_WALK", False)
    after, bounds = reports(), _routed_during_walk(monkeypatch)
    assert all(b is None for b in bounds)            # after the walk: every row routed by the final chunks
    monkeypatch.setattr(verify_runner.IndexPass, "DURING_WALK", True)
    assert reports() == after
    if name not in ("dledger", "rocksdb-cq"):     # (their consumequeue/ is not ConsumeQueue files)
        _mutate_queues_and_index(root, len(name))
        monkeypatch.setattr(verify_runner.IndexPass, "DURING_WALK", False)
        after = reports()
        monkeypatch.setattr(verify_runner.IndexPass, "DURING_WALK", True)
        assert reports() == after
    assert not list(spill_root.glob("rmqtool-verify-*"))     # (a RocksDB store's snapshots go at exit)


def test_index_rows_are_routed_while_the_walk_runs(store_copy, spill_root, monkeypatch):
    """The overlap is real: with many chunks, index entries are routed before the walk finishes."""
    import threading
    root = store_copy("basic")
    bounds = _routed_during_walk(monkeypatch)
    real = RecordChunks._add
    started = threading.Event()

    def slow_add(self, piece):          # the walk waits for the index thread to be routing
        real(self, piece)
        if len(self._begun) > 2 and not started.is_set():
            started.wait(5)
    monkeypatch.setattr(RecordChunks, "_add", slow_add)
    real_ks = RecordChunks.known_starts

    def ks(self, offset):
        out = real_ks(self, offset)
        started.set()
        return out
    monkeypatch.setattr(RecordChunks, "known_starts", ks)
    monkeypatch.setattr(verify_index, "ENTRY_WINDOW", 16)
    report(root, chunk_records=50)
    assert any(b is not None for b in bounds)


def test_a_failed_walk_ends_the_index_thread(store_copy, spill_root, monkeypatch):
    """A walk that fails (a full disk, Ctrl-C) leaves no index thread waiting for chunks and no
    temporary files; its error is the one raised."""
    import threading
    from rmqtool.ops.verify.commitlog import CommitLogVerifier
    root = store_copy("basic")

    def broken(self, files, prepared):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(CommitLogVerifier, "_walk_files", broken)
    with pytest.raises(OSError, match="No space"):
        report(root, chunk_records=3)
    assert not [t for t in threading.enumerate() if t.name == "rmqtool-verify-index"]
    assert not list(spill_root.iterdir())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 10 ** 6), min_size=1, max_size=40, unique=True),
       st.lists(st.integers(-5, 10 ** 6 + 100), max_size=80), st.integers(1, 5), st.booleans(), st.integers(1, 9))
def test_rows_routed_during_the_walk_equal_rows_routed_after_it(phys, offsets, chunk_records, ascending, piece):
    """``RoutedRows.add_during_walk`` from a thread while another fills the chunks gives every chunk
    the rows ``add`` gives it after the walk, in the same order (ascending offsets, as an index file's,
    and any order)."""
    import threading
    phys = sorted(phys)
    if ascending:
        offsets = sorted(offsets)
    dtype = np.dtype([("offset", np.int64), ("n", np.int32)])
    rows = np.zeros(len(offsets), dtype)
    rows["offset"], rows["n"] = offsets, np.arange(len(offsets))

    def fill(chunks):
        for p in phys:
            chunks.append({"phy": np.array([p], np.int64), "size": np.array([1], np.int64)})
        chunks.finish()

    def taken(during: bool) -> list:
        spill = SpillDir()
        try:
            chunks = RecordChunks(TopicTable(), [], spill, chunk_records)
            routed = RoutedRows("t", dtype, chunks)
            if during:
                filler = threading.Thread(target=fill, args=(chunks,))
                filler.start()
                for at in range(0, len(rows), piece):
                    routed.add_during_walk(rows[at:at + piece], rows["offset"][at:at + piece])
                filler.join()
            else:
                fill(chunks)
                for at in range(0, len(rows), piece):
                    routed.add(rows[at:at + piece], rows["offset"][at:at + piece])
            return [routed.take(k)["n"].tolist() for k in range(len(chunks))]
        finally:
            spill.close()
    assert taken(True) == taken(False)
