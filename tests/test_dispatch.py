"""Dispatch core: byte-identical CQ and index files against upstream's reference stores,
and the vectorized index builder against a literal scalar model of IndexFile.putKey."""
from __future__ import annotations

import random

import numpy as np
import pytest

from conftest import load_answers, reference_store
from formats import commitlog as cl
from formats.indexfile import INDEX_HEADER_DTYPE, index_file_size
from rmqtool.broker.dispatch import (CqCollector, IndexBuilder, QueueUnits, RecordColumns, build_cq_files,
                                     build_index_image, dispatch_batch)
from rmqtool.kernels.javahash import index_key_hash, java_string_hash, span_hashes, tags_code
from rmqtool.records.scan import RecordBatch, walk_store
from rmqtool.io.store import Store

CQ_FILE_SIZE, SLOTS, ENTRIES = 800, 61, 350
CRASHED_DISPATCH_END = 2315394


def _answer_records(name: str, below: int | None = None) -> RecordColumns:
    rows = []
    for m in load_answers(name)["messages"]:
        if below is not None and m["phyOffset"] >= below:
            continue
        props = m.get("properties") or {}
        rows.append({"phy_offset": m["phyOffset"], "size": m["size"],
                     "store_timestamp": m["storeTimestamp"], "sys_flag": m["sysFlag"],
                     "queue_id": m["queueId"], "queue_offset": m["queueOffset"],
                     "topic": m["topic"], "tags": props.get("TAGS"), "keys": props.get("KEYS"),
                     "uniq_key": props.get("UNIQ_KEY"), "delay": props.get("DELAY")})
    return RecordColumns.from_records(rows)


def _build(batches, slots=SLOTS, entries=ENTRIES):
    cq, images = CqCollector(), []
    ib = IndexBuilder(slots, entries, images.append)
    for batch in batches:
        d = dispatch_batch(batch)
        assert d.stop is None
        cq.add(d)
        ib.add(d.key_hash, d.key_phy_offset, d.key_store_timestamp, d.record_phy_offset)
    ib.finish()
    cq_files = {}
    for q in cq.queues():
        for start, data in build_cq_files(q, CQ_FILE_SIZE).files.items():
            cq_files[f"{q.topic}/{q.queue_id}/{start:020d}"] = data
    return cq_files, images


def _upstream_cq(root) -> dict[str, bytes]:
    base = root / "consumequeue"
    return {str(p.relative_to(base)): p.read_bytes() for p in base.rglob("*") if p.is_file()}


def _scan_batches(name, below=None):
    st = Store(reference_store(name))
    for item in walk_store(st, stop_at_break=True):
        if isinstance(item, RecordBatch):
            if below is None:
                yield item
                continue
            keep = item.phy_offset < below
            cols = {k: item.columns[k][keep] for k in (
                "phy_offset", "size", "store_timestamp", "sys_flag", "queue_id", "queue_offset",
                *(f"{n}_{x}" for n in ("topic", "tags", "keys", "uniq", "delay") for x in ("start", "len")))}
            yield RecordColumns(buf=item.buf, **cols)


@pytest.mark.parametrize("source", ["answers", "scan"])
@pytest.mark.parametrize("name", ["basic", "mixed"])
def test_cq_and_index_byte_identical(name, source):
    batches = [_answer_records(name)] if source == "answers" else _scan_batches(name)
    cq_files, images = _build(batches)
    root = reference_store(name)
    upstream = _upstream_cq(root)
    assert set(cq_files) == set(upstream)
    for rel, data in upstream.items():
        assert cq_files[rel] == data, rel
    index_files = sorted((root / "index").iterdir())
    assert len(images) == len(index_files)
    for image, path in zip(images, index_files):
        assert image.to_bytes() == path.read_bytes(), path.name


def test_crashed_store_up_to_dispatch_lag():
    """CQ identical; index identical except the last file, whose first put the kill interrupted."""
    cq_files, images = _build(_scan_batches("crashed", CRASHED_DISPATCH_END))
    root = reference_store("crashed")
    upstream = _upstream_cq(root)
    assert set(cq_files) == set(upstream)
    assert all(cq_files[k] == v for k, v in upstream.items())
    files = sorted((root / "index").iterdir())
    assert len(images) == len(files)
    for image, path in zip(images[:-1], files[:-1]):
        assert image.to_bytes() == path.read_bytes(), path.name
    on_disk = np.frombuffer(files[-1].read_bytes()[:40], INDEX_HEADER_DTYPE)[0]
    ours = image_header = images[-1].header[0]
    assert on_disk["begin_phy_offset"] == ours["begin_phy_offset"] == image_header["end_phy_offset"]
    assert on_disk["index_count"] == 0 and ours["index_count"] == 2


# --- hashing and keys ---------------------------------------------------------------------
def test_span_hashes_match_scalar_including_non_ascii():
    words = ["", "a", "TagA", "TagA||TagB", "ключ", "emoji\U0001F600x", "polygenelubricants",
             "hcAaAa", "hcAaBB", "x" * 300]
    raw = [w.encode("utf-8") for w in words] + [b"bad\xff\xfeutf8", b"\xe2\x82"]
    blob = b"".join(raw)
    starts = np.cumsum([0] + [len(r) for r in raw[:-1]])
    h, units = span_hashes(np.frombuffer(blob, np.uint8), starts, [len(r) for r in raw])
    for r, hv, u in zip(raw, h, units):
        text = r.decode("utf-8", "replace")
        assert int(hv) == java_string_hash(text)
        assert int(u) == len(text.encode("utf-16-le", "surrogatepass")) // 2


def _reference_keys(topic, uniq, keys):
    out = []
    if uniq is not None:
        out.append(f"{topic}#{uniq}")
    for k in cl.split_keys(keys):
        out.append(f"{topic}#{k}")
    return out


def test_index_keys_in_broker_order_with_odd_spacing():
    rows = [
        {"topic": "T", "uniq_key": "U1", "keys": " a  b ", "phy_offset": 0, "store_timestamp": 1},
        {"topic": "Тема", "uniq_key": None, "keys": "ключ  x", "phy_offset": 100, "store_timestamp": 2},
        {"topic": "T", "uniq_key": "U3", "keys": None, "phy_offset": 200, "store_timestamp": 3,
         "sys_flag": cl.TRANSACTION_ROLLBACK_TYPE},
        {"topic": "T", "uniq_key": None, "keys": "   ", "phy_offset": 300},
        {"topic": "T2", "uniq_key": "U5", "keys": "k k", "phy_offset": 400,
         "sys_flag": cl.TRANSACTION_PREPARED_TYPE},
    ]
    d = dispatch_batch(RecordColumns.from_records(rows))
    expect, offs = [], []
    for r in rows:
        if (r.get("sys_flag") or 0) == cl.TRANSACTION_ROLLBACK_TYPE:
            continue
        for key in _reference_keys(r["topic"], r["uniq_key"], r["keys"]):
            expect.append(index_key_hash(key))
            offs.append(r["phy_offset"])
    assert d.key_hash.tolist() == expect
    assert d.key_phy_offset.tolist() == offs
    # CQ: NOT and COMMIT only (ROLLBACK and PREPARED excluded)
    assert sorted(d.cq_phy_offset.tolist()) == [0, 100, 300]


def test_tags_code_and_schedule_deliver_time():
    rows = [
        {"topic": "T", "tags": "TagA||TagB", "phy_offset": 0, "store_timestamp": 5000},
        {"topic": "T", "tags": None, "phy_offset": 1},
        {"topic": "T", "tags": "метка", "phy_offset": 2},
        {"topic": cl.SCHEDULE_TOPIC, "tags": "TagA", "delay": "3", "phy_offset": 3, "store_timestamp": 1000},
        {"topic": cl.SCHEDULE_TOPIC, "tags": "TagA", "delay": "99", "phy_offset": 4, "store_timestamp": 1000},
        {"topic": cl.SCHEDULE_TOPIC, "tags": "TagA", "delay": "0", "phy_offset": 5, "store_timestamp": 1000},
        {"topic": "T", "tags": "TagA", "delay": "3", "phy_offset": 6, "store_timestamp": 1000},
    ]
    d = dispatch_batch(RecordColumns.from_records(rows))
    got = dict(zip(d.cq_phy_offset.tolist(), d.cq_tags_code.tolist()))
    assert got[0] == tags_code("TagA||TagB") == 1789476431
    assert got[1] == 0
    assert got[2] == java_string_hash("метка")
    assert got[3] == 1000 + 10_000                 # level 3 = 10s
    assert got[4] == 1000 + 2 * 3_600_000          # clamped to the last level (2h)
    assert got[5] == tags_code("TagA")            # level 0: plain tags code
    assert got[6] == tags_code("TagA")            # DELAY outside the schedule topic is ignored


def test_bad_delay_stops_dispatch_like_the_broker():
    rows = [{"topic": "T", "phy_offset": 0},
            {"topic": cl.SCHEDULE_TOPIC, "delay": "x1", "phy_offset": 10},
            {"topic": "T", "phy_offset": 20}]
    d = dispatch_batch(RecordColumns.from_records(rows))
    assert d.stop and "x1" in d.stop
    assert d.records == 1 and d.cq_phy_offset.tolist() == [0]


def test_cq_pre_blank_fill_and_file_placement():
    q = QueueUnits("T", 0, np.arange(37, 45), np.arange(8) * 100, np.full(8, 50), np.zeros(8, np.int64))
    files = build_cq_files(q, 200).files        # 10 units per file
    assert sorted(files) == [600, 800]
    first = np.frombuffer(files[600], dtype=[("o", ">i8"), ("s", ">i4"), ("t", ">i8")])
    assert (first["s"][:7] == 0x7FFFFFFF).all() and (first["o"][:7] == 0).all()
    assert first["o"][7] == 0 and first["s"][7] == 50
    second = np.frombuffer(files[800], dtype=first.dtype)
    assert second["o"][:5].tolist() == [300, 400, 500, 600, 700] and (second["s"][5:] == 0).all()


def test_cq_gap_and_repeat_follow_the_broker_writer():
    q = QueueUnits("T", 0, np.array([0, 1, 1, 5]), np.array([0, 100, 100, 300]),
                   np.full(4, 50), np.zeros(4, np.int64))
    out = build_cq_files(q, 200)
    units = np.frombuffer(out.files[0], dtype=[("o", ">i8"), ("s", ">i4"), ("t", ">i8")])
    assert units["o"][:3].tolist() == [0, 100, 300] and out.units == 3
    assert len(out.warnings) == 2


# --- the index builder against a scalar model of IndexService/IndexFile --------------------
class _ScalarIndex:
    """Literal transcription of format.md §5.4/§5.5, one key at a time."""

    def __init__(self, slots, entries):
        self.slots_n, self.entries_n = slots, entries
        self.files = []

    def _new(self):
        prev = self.files[-1] if self.files else None
        f = {"slots": [0] * self.slots_n, "entries": [(0, 0, 0, 0)], "count": 1, "hsc": 0,
             "begin_ts": 0, "end_ts": 0, "begin_phy": 0, "end_phy": 0}
        if prev and prev["end_phy"] > 0:
            f["begin_phy"] = f["end_phy"] = prev["end_phy"]
        if prev and prev["end_ts"] > 0:
            f["begin_ts"] = f["end_ts"] = prev["end_ts"]
        self.files.append(f)
        return f

    def _last(self):
        if not self.files or self.files[-1]["count"] >= self.entries_n:
            return self._new()
        return self.files[-1]

    def _put(self, f, h, phy, ts):
        if f["count"] >= self.entries_n:
            return False
        s = h % self.slots_n
        sv = f["slots"][s]
        if sv <= 0 or sv > f["count"]:
            sv = 0
        td = 0 if f["begin_ts"] <= 0 else max(0, min(int((ts - f["begin_ts"]) / 1000), 2**31 - 1))
        if ts - f["begin_ts"] < 0:
            td = 0
        f["entries"].append((h, phy, td, sv))
        f["slots"][s] = f["count"]
        if f["count"] <= 1:
            f["begin_phy"], f["begin_ts"] = phy, ts
        if sv == 0:
            f["hsc"] += 1
        f["count"] += 1
        f["end_phy"], f["end_ts"] = phy, ts
        return True

    def build(self, phy, ts, keys, rollback=False):
        f = self._last()
        if phy < f["end_phy"] or rollback:
            return
        for k in keys:
            while not self._put(f, index_key_hash(k), phy, ts):
                f = self._last()

    def image(self, f):
        out = bytearray(index_file_size(self.slots_n, self.entries_n))
        hdr = np.zeros(1, INDEX_HEADER_DTYPE)
        hdr[0] = (f["begin_ts"], f["end_ts"], f["begin_phy"], f["end_phy"], f["hsc"], f["count"])
        out[:40] = hdr.tobytes()
        out[40:40 + 4 * self.slots_n] = np.asarray(f["slots"], ">i4").tobytes()
        ent = np.asarray(f["entries"][1:], dtype=[("h", ">i4"), ("p", ">i8"), ("t", ">i4"), ("v", ">i4")])
        base = 40 + 4 * self.slots_n + 20
        out[base:base + 20 * len(ent)] = ent.tobytes()
        return bytes(out)


@pytest.mark.parametrize("seed", range(6))
def test_index_builder_matches_scalar_model(seed):
    rnd = random.Random(seed)
    slots, entries = rnd.choice([(3, 4), (7, 11), (61, 350), (5, 2)])
    rows, phy, ts = [], 0, 1_700_000_000_000 if seed % 2 else 0
    pool = [f"k{i}" for i in range(rnd.randint(1, 30))] + ["hcAaAa", "hcAaBB", "ключ"]
    for _ in range(rnd.randint(0, 200)):
        keys = " ".join(rnd.choice(pool + [""]) for _ in range(rnd.randint(0, 4))) if rnd.random() < .8 else None
        uniq = f"U{rnd.randint(0, 10**6)}" if rnd.random() < .7 else None
        flag = rnd.choice([0, 0, 0, 4, 8, 12])
        rows.append({"topic": rnd.choice(["T", "Topic2"]), "keys": keys, "uniq_key": uniq,
                     "phy_offset": phy, "store_timestamp": ts, "sys_flag": flag, "size": 10})
        phy += rnd.randint(92, 3000)
        ts += rnd.choice([0, 1, 999, 1000, 1500, 7000, -2000])
    model = _ScalarIndex(slots, entries)
    for r in rows:
        model.build(r["phy_offset"], r["store_timestamp"], _reference_keys(r["topic"], r["uniq_key"], r["keys"]),
                    r["sys_flag"] == 12)
    images = []
    ib = IndexBuilder(slots, entries, images.append)
    # feed in uneven batches to exercise state carried across batches
    i = 0
    while i < len(rows):
        j = i + rnd.randint(1, 40)
        d = dispatch_batch(RecordColumns.from_records(rows[i:j]))
        ib.add(d.key_hash, d.key_phy_offset, d.key_store_timestamp, d.record_phy_offset)
        i = j
    ib.finish()
    assert [im.to_bytes() for im in images] == [model.image(f) for f in model.files]


def test_continuation_after_kept_files_equals_full_build():
    """Seeding from a kept file and skipping the keys it already holds gives the same files."""
    rows = [{"topic": "T", "keys": "a b c d e", "uniq_key": f"U{i}", "phy_offset": i * 100,
             "store_timestamp": 10_000 + i * 700} for i in range(40)]
    full = []
    ib = IndexBuilder(7, 11, full.append)
    d = dispatch_batch(RecordColumns.from_records(rows))
    ib.add(d.key_hash, d.key_phy_offset, d.key_store_timestamp, d.record_phy_offset)
    ib.finish()
    kept = full[2]
    end_phy = int(kept.header["end_phy_offset"][0])
    already = int((kept.entries["phy_offset"] == end_phy).sum())
    rest = []
    ib2 = IndexBuilder(7, 11, rest.append, seed_phy=end_phy,
                       seed_ts=int(kept.header["end_timestamp"][0]), skip_keys_at_seed=already)
    ib2.add(d.key_hash, d.key_phy_offset, d.key_store_timestamp, d.record_phy_offset)
    ib2.finish()
    assert [im.to_bytes() for im in rest] == [im.to_bytes() for im in full[3:]]


def test_build_index_image_rejects_overflow():
    with pytest.raises(ValueError):
        build_index_image(np.zeros(11, np.int32), np.zeros(11), np.zeros(11), 7, 11)


def test_grouped_and_flat_span_hashes_agree():
    from hypothesis import given, settings, strategies as st
    from rmqtool.kernels.javahash import _span_hashes_flat

    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.binary(max_size=40), max_size=30), st.binary(max_size=8))
    def check(chunks, junk):
        blob = junk + b"".join(chunks)
        starts = np.cumsum([len(junk)] + [len(c) for c in chunks[:-1]]) if chunks else np.zeros(0, np.int64)
        lens = np.asarray([len(c) for c in chunks], dtype=np.int64)
        buf = np.frombuffer(blob, np.uint8)
        h1, u1 = span_hashes(buf, starts, lens)
        if lens.any():
            h2, u2 = _span_hashes_flat(buf, np.asarray(starts, np.int64), lens)
            assert h1.tolist() == h2.tolist() and u1.tolist() == u2.tolist()
        for c, h in zip(chunks, h1):
            assert int(h) == java_string_hash(c.decode("utf-8", "replace"))
    check()


def test_topics_with_equal_hash_and_length_stay_apart():
    assert java_string_hash("AaAa") == java_string_hash("BBBB")
    rows = [{"topic": t, "phy_offset": i * 10, "queue_offset": i // 2, "size": 5}
            for i, t in enumerate(["AaAa", "BBBB", "AaAa", "BBBB"])]
    cq = CqCollector()
    cq.add(dispatch_batch(RecordColumns.from_records(rows)))
    got = {(q.topic, q.queue_id): q.phy_offset.tolist() for q in cq.queues()}
    assert got == {("AaAa", 0): [0, 20], ("BBBB", 0): [10, 30]}


# --- the fast index image builder against the straightforward formulation -----------------
def _extend_reference(image, key_hash, phy, ts):
    """extend_index_image as first written (stable argsort on slot, one temporary per step)."""
    from formats.indexfile import INDEX_ENTRY_DTYPE, INVALID_INDEX
    from rmqtool.broker.dispatch import IndexFileImage
    n = len(key_hash)
    h = image.header
    count = int(h["index_count"][0])
    count = 1 if count <= 0 else count
    if n == 0:
        return image
    key_hash = np.asarray(key_hash, dtype=np.int64)
    phy = np.asarray(phy, dtype=np.int64)
    ts = np.asarray(ts, dtype=np.int64)
    slots = image.slots.copy()
    number = np.arange(count, count + n, dtype=np.int64)
    slot = key_hash % image.hash_slots
    order = np.argsort(slot, kind="stable")
    s_sorted = slot[order]
    same = s_sorted[1:] == s_sorted[:-1]
    prev = np.zeros(n, dtype=np.int64)
    prev[order[1:][same]] = number[order[:-1][same]]
    first = np.ones(n, dtype=bool)
    first[1:] = ~same
    old = slots[s_sorted[first]].astype(np.int64)
    old_valid = (old > 0) & (old <= count)
    prev[order[first]] = np.where(old_valid, old, INVALID_INDEX)
    last = np.ones(n, dtype=bool)
    last[:-1] = ~same
    slots[s_sorted[last]] = number[order[last]]
    begin_ts = int(h["begin_timestamp"][0])
    begin = np.full(n, begin_ts if count > 1 else int(ts[0]), dtype=np.int64)
    if count <= 1:
        begin[0] = begin_ts
    diff = ts - begin
    time_diff = np.minimum(np.where(diff < 0, 0, diff // 1000), (1 << 31) - 1)
    time_diff[begin <= 0] = 0
    new = np.zeros(n, dtype=INDEX_ENTRY_DTYPE)
    new["key_hash"], new["phy_offset"], new["time_diff"], new["prev_index"] = key_hash, phy, time_diff, prev
    header = h.copy()
    if count <= 1:
        header["begin_timestamp"] = ts[0]
        header["begin_phy_offset"] = phy[0]
    header["end_timestamp"] = ts[-1]
    header["end_phy_offset"] = phy[-1]
    header["hash_slot_count"] = int(h["hash_slot_count"][0]) + int((~old_valid).sum())
    header["index_count"] = count + n
    entries = np.concatenate([image.entries, new]).astype(INDEX_ENTRY_DTYPE)
    return IndexFileImage(header, slots, entries, image.hash_slots, image.index_entries)


@pytest.mark.parametrize("seed", range(40))
def test_extend_index_image_equals_straightforward_formulation(seed):
    from rmqtool.broker.dispatch import empty_index_image, extend_index_image
    rng = np.random.default_rng(seed)
    slots_n = int(rng.choice([1, 2, 7, 61, 1000, 5_000_000]))
    entries_n = int(rng.choice([3, 50, 400, 20_000]))
    seed_ts = int(rng.choice([0, 1_700_000_000_000]))
    image = empty_index_image(slots_n, entries_n, int(rng.integers(0, 3)) * 1000, seed_ts)
    ref = image
    ts0 = int(rng.choice([0, 5, 1_700_000_000_000]))
    for _ in range(int(rng.integers(1, 4))):
        room = entries_n - int(image.header["index_count"][0])
        n = int(rng.integers(0, room + 1))
        kh = rng.integers(0, 1 << 31, n).astype(np.int32)
        if n and rng.random() < .5:                      # many keys on few slots: long chains
            kh = rng.choice(kh[:max(1, n // 10)], n).astype(np.int32)
        phy = np.sort(rng.integers(0, 1 << 40, n))
        ts = ts0 + np.cumsum(rng.choice([0, 1, 999, 1000, 1500, -2000, 10**15], n))
        if rng.random() < .3:                            # an open file with damaged slot values
            junk = rng.integers(-5, entries_n + 5, slots_n).astype(np.int32)
            image.slots[:] = ref.slots[:] = np.where(rng.random(slots_n) < .5, junk, image.slots)
        image = extend_index_image(image, kh, phy, ts)
        ref = _extend_reference(ref, kh, phy, ts)
        assert image.to_bytes() == ref.to_bytes()
        assert image.entries.dtype == ref.entries.dtype


def test_slot_chain_order_is_the_stable_argsort_also_past_the_packing_limit():
    from rmqtool.broker.dispatch import _slot_chain_order
    rng = np.random.default_rng(3)
    for hash_slots in (1, 7, 5_000_000, 1 << 50):
        slot = rng.integers(0, min(hash_slots, 50), 5000)
        order, s_sorted = _slot_chain_order(slot, hash_slots)
        want = np.argsort(slot, kind="stable")
        assert order.tolist() == want.tolist() and s_sorted.tolist() == slot[want].tolist()


@pytest.mark.parametrize("piece", [None, 1, 7, 64])
def test_index_image_write_to_equals_to_bytes(tmp_path, monkeypatch, piece):
    """The file ``write_to`` leaves is ``to_bytes`` byte for byte, however the slot table is cut
    into pieces (pieces of zeros are left as holes)."""
    import os
    import rmqtool.broker.dispatch as dispatch
    from rmqtool.broker.dispatch import build_index_image, empty_index_image
    if piece is not None:
        monkeypatch.setattr(dispatch, "SLOT_WRITE_PIECE", piece)
    rng = np.random.default_rng(0)
    for image in (empty_index_image(61, 350),
                  build_index_image(rng.integers(0, 1 << 31, 300).astype(np.int32), np.arange(300) * 97,
                                    np.arange(300) * 10 + 1_700_000_000_000, 61, 350, 5, 7),
                  build_index_image(np.array([60, 121], np.int32), np.array([1, 2]), np.array([3, 4]), 61, 350),
                  build_index_image(np.array([3, 700, 701, 1003, 5], np.int32), np.arange(5) * 50,
                                    np.arange(5) + 1_700_000_000_000, 1009, 40)):
        path = tmp_path / "ix"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            image.write_to(fd)
        finally:
            os.close(fd)
        assert path.read_bytes() == image.to_bytes()


@pytest.mark.parametrize("seed", range(30))
def test_compact_dispatch_builds_the_same_files(seed):
    """BatchDispatch.compact (what rebuild workers ship) gives the CQ and index builders the
    same answers as the full result, with seeded builders and unordered stored offsets too."""
    rnd = random.Random(seed)
    rows, phy = [], 0
    for i in range(rnd.randint(1, 300)):
        phy += rnd.randint(92, 500)
        rows.append({"topic": rnd.choice(["T", "U"]), "queue_id": rnd.choice([0, 1, 2**31 - 1]),
                     "queue_offset": i, "size": rnd.choice([92, 4000]),
                     "phy_offset": phy if rnd.random() < .9 else rnd.randint(0, 10**6),
                     "store_timestamp": 1_700_000_000_000 + i * 300, "sys_flag": rnd.choice([0, 0, 8, 12]),
                     "keys": rnd.choice([None, None, "a", "a b c"]),
                     "uniq_key": f"U{i}" if rnd.random() < .6 else None})
    seed_phy = rnd.choice([0, rows[len(rows) // 2]["phy_offset"]])
    outs = []
    for compact in (False, True):
        cq, images = CqCollector(), []
        ib = IndexBuilder(7, 11, images.append, seed_phy=seed_phy, seed_ts=5 if seed_phy else 0,
                          skip_keys_at_seed=random.Random(seed).randint(0, 2) if seed_phy else 0)
        i = 0
        step = random.Random(seed)
        while i < len(rows):
            j = i + step.randint(1, 40)
            d = dispatch_batch(RecordColumns.from_records(rows[i:j]))
            d = d.compact() if compact else d
            cq.add(d)
            ib.add(d.key_hash, d.key_phy_offset, d.key_store_timestamp, d.record_phy_offset)
            i = j
        ib.finish()
        files = {(q.topic, q.queue_id, s): data for q in cq.queues()
                 for s, data in build_cq_files(q, CQ_FILE_SIZE).files.items()}
        outs.append((files, [im.to_bytes() for im in images]))
    assert outs[0] == outs[1]


def test_grouped_and_flat_keys_tokens_agree():
    """KEYS split by length-grouped byte matrices equals the per-byte formulation (odd spacing,
    empty and absent values, many lengths, values at the very end of the buffer)."""
    from hypothesis import given, settings, strategies as st
    from rmqtool.broker.dispatch import _keys_tokens, _keys_tokens_flat
    value = st.one_of(st.none(), st.text(alphabet=" ab\u00e9", max_size=12),
                      st.lists(st.sampled_from(["k", "order-1", "", "  "]), max_size=5).map(" ".join))

    @settings(max_examples=300, deadline=None)
    @given(st.lists(value, max_size=40), st.binary(max_size=6))
    def check(values, junk):
        raw = [b"" if v is None else v.encode() for v in values]
        lens = np.asarray([-1 if v is None else len(r) for v, r in zip(values, raw)], dtype=np.int64)
        starts = np.asarray([len(junk) + sum(map(len, raw[:i])) for i in range(len(raw))], dtype=np.int64)
        buf = np.frombuffer(junk + b"".join(raw), np.uint8)
        got = _keys_tokens(buf, starts, lens)
        want = _keys_tokens_flat(buf, starts, lens)
        assert [a.tolist() for a in got] == [a.tolist() for a in want]
        for rec, s, n in zip(*[a.tolist() for a in got[:3]]):
            assert buf[s:s + n].tobytes() in raw[rec].split(b" ")
    check()


def test_span_matrix_stays_inside_the_buffer():
    from rmqtool.kernels.gather import span_matrix
    buf = np.frombuffer(b"abcdef", np.uint8)
    assert span_matrix(buf, np.array([0, 4]), 2).tolist() == [[97, 98], [101, 102]]
    for starts, length in (([5], 2), ([0], 7)):
        with pytest.raises(IndexError):
            span_matrix(buf, np.array(starts), length)
