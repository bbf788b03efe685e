"""query-key / query-id / query-queue against upstream's answers on the reference stores."""
from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys

import pytest

from conftest import load_answers, reference_store
from formats.commitlog import split_keys
from formats.indexfile import INDEX_HEADER_OFFSETS, entry_position, slot_position
from rmqtool.kernels.javahash import index_key_hash
from rmqtool.output.schema import record_to_dict
from rmqtool.ops.query.byid import KIND_OFFSET, KIND_UNIQ, query_id
from rmqtool.ops.query.bykey import UPSTREAM_MAX_NUM, query_key, uncovered_ranges, open_index
from rmqtool.ops.query.byqueue import QueueView
from rmqtool.io.store import Store

ROLLBACK = 12


def true_matches(answers: dict, topic: str | None, key: str, begin: int, end: int,
                 uniq_only: bool = False) -> list[int]:
    """Independent expectation from upstream's decoded messages: newest first, deduplicated."""
    out = set()
    for m in answers["messages"]:
        if topic is not None and m["topic"] != topic:
            continue
        if m["transactionType"] == ROLLBACK or not begin <= m["storeTimestamp"] <= end:
            continue
        if m.get("uniqKey") == key or (not uniq_only and key in split_keys(m.get("keys"))):
            out.add(m["phyOffset"])
    return sorted(out, reverse=True)


def _raw_offsets(res) -> list[int]:
    return [r["phy_offset"] for r in res.raw]


@pytest.mark.parametrize("name", ["basic", "mixed"])
def test_raw_equals_upstream_index_service(name):
    answers, store = load_answers(name), Store(reference_store(name))
    for q in answers["keyQueries"]:
        res = query_key(store, q["key"], q["topic"], q["begin"], q["end"], max_num=q["maxNum"], raw=True)
        assert _raw_offsets(res) == q["indexServiceQueryOffset"]["phyOffsets"], q["id"]


def test_raw_on_crashed_index_files_as_shipped():
    answers, store = load_answers("crashed"), Store(reference_store("crashed"))
    before = {q["id"]: q for q in answers["recovery"]["keyQueriesOnIndexFilesBeforeRecovery"]}
    assert len(before) == len(answers["keyQueries"])
    for q in answers["keyQueries"]:
        res = query_key(store, q["key"], q["topic"], q["begin"], q["end"], max_num=q["maxNum"], raw=True)
        assert _raw_offsets(res) == before[q["id"]]["phyOffsets"], q["id"]


@pytest.mark.parametrize("name", ["basic", "mixed", "crashed"])
def test_default_mode_is_exactly_the_true_matches(name):
    answers, store = load_answers(name), Store(reference_store(name))
    beyond_cap = 0
    for q in answers["keyQueries"]:
        res = query_key(store, q["key"], q["topic"], q["begin"], q["end"])
        got = [h.phy_offset for h in res.hits]
        expected = true_matches(answers, q["topic"], q["key"], q["begin"], q["end"])
        assert got == expected, q["id"]
        # upstream's confirmed hits are all there (index time is whole seconds <= store time)
        by_offset = {m["phyOffset"]: m for m in answers["messages"]}
        exact = {p for p in q["rawOffsetsWithExactKey"]
                 if q["begin"] <= by_offset[p]["storeTimestamp"] <= q["end"]}
        assert exact <= set(got), q["id"]
        beyond_cap += len(got) > len(set(q["rawOffsetsWithExactKey"]))
        for h in res.hits:
            # crashed: dispatch stopped inside the record at 2315140 (some of its keys indexed)
            if name != "crashed" or h.phy_offset < 2315140:
                assert h.indexed, (q["id"], h.phy_offset)
            elif h.phy_offset > 2315140:
                assert not h.indexed, (q["id"], h.phy_offset)
    assert beyond_cap > 0          # the cap of 64 really hides matches that we return


def test_crashed_reports_undispatched_messages_as_not_indexed():
    answers, store = load_answers("crashed"), Store(reference_store("crashed"))
    tail = [m for m in answers["messages"] if m["phyOffset"] >= 2315394 and m.get("keys")]
    assert tail
    for m in tail[:10]:
        key = split_keys(m["keys"])[0]
        res = query_key(store, key, m["topic"])
        hit = {h.phy_offset: h for h in res.hits}[m["phyOffset"]]
        assert hit.indexed is False
        assert any("not in the index" in n for n in res.notes)


@pytest.mark.parametrize("name", ["basic", "mixed"])
def test_scan_and_all_topics_agree_with_index(name):
    answers, store = load_answers(name), Store(reference_store(name))
    for q in answers["keyQueries"][::7]:
        idx = [h.phy_offset for h in query_key(store, q["key"], q["topic"], q["begin"], q["end"]).hits]
        scan = [h.phy_offset for h in query_key(store, q["key"], q["topic"], q["begin"], q["end"],
                                                scan=True).hits]
        assert idx == scan, q["id"]
        every = query_key(store, q["key"], None, q["begin"], q["end"])
        assert [h.phy_offset for h in every.hits] == true_matches(answers, None, q["key"], q["begin"], q["end"])
        assert all(h.indexed for h in every.hits)


def test_max_caps_default_mode_newest_first():
    answers, store = load_answers("basic"), Store(reference_store("basic"))
    q = answers["keyQueries"][0]
    full = [h.phy_offset for h in query_key(store, q["key"], q["topic"]).hits]
    assert len(full) > UPSTREAM_MAX_NUM
    assert [h.phy_offset for h in query_key(store, q["key"], q["topic"], max_num=5).hits] == full[:5]


def test_missing_index_falls_back_to_scan(store_copy):
    root = store_copy("mixed")
    answers = load_answers("mixed")
    shutil.rmtree(root / "index")
    q = next(q for q in answers["keyQueries"] if q["group"].startswith("A"))
    res = query_key(Store(root), q["key"], q["topic"])
    assert [h.phy_offset for h in res.hits] == true_matches(answers, q["topic"], q["key"], 0, 2**63 - 1)
    assert not any(h.indexed for h in res.hits)
    assert any("scan" in n for n in res.notes)


def test_deleted_middle_index_file_is_scanned(store_copy):
    root = store_copy("basic")
    answers = load_answers("basic")
    files = sorted((root / "index").iterdir())
    victim = files[len(files) // 2]
    victim.unlink()
    q = answers["keyQueries"][0]
    res = query_key(Store(root), q["key"], q["topic"])
    assert [h.phy_offset for h in res.hits] == true_matches(answers, q["topic"], q["key"], 0, 2**63 - 1)
    assert any(not h.indexed for h in res.hits)


def _corrupt(path, pos, value, fmt=">i"):
    with open(path, "r+b") as fh:
        fh.seek(pos)
        fh.write(struct.pack(fmt, value))


def test_corrupt_chains_terminate_and_still_answer(store_copy):
    """Loops, forward links and out-of-range slots: no hang, no error, same confirmed answer."""
    root = store_copy("basic")
    answers = load_answers("basic")
    store = Store(root)
    geo = store.index_geometry
    q = answers["keyQueries"][0]
    h = index_key_hash(f"{q['topic']}#{q['key']}")
    files = store.index_files()
    # a loop: the newest entry's prev points at itself's successor chain head
    f0 = files[-2]
    with open(f0, "rb") as fh:
        fh.seek(slot_position(geo.hash_slots, h % geo.hash_slots))
        head = struct.unpack(">i", fh.read(4))[0]
    assert head > 1
    prev_at = entry_position(geo.hash_slots, 1) + 16   # prev of entry 1 -> the chain head (a loop)
    _corrupt(f0, prev_at, head)
    # an out-of-range slot value in another file
    _corrupt(files[-3], slot_position(geo.hash_slots, h % geo.hash_slots), 10**8)
    # garbage header in a third file: its range gets scanned
    _corrupt(files[-4], INDEX_HEADER_OFFSETS["index_count"], -5)
    res = query_key(Store(root), q["key"], q["topic"])
    assert [x.phy_offset for x in res.hits] == true_matches(answers, q["topic"], q["key"], 0, 2**63 - 1)
    raw = query_key(Store(root), q["key"], q["topic"], raw=True)     # terminates
    assert len(raw.raw) < 10_000


def test_brand_new_index_file_and_entry_at_index_count(store_copy):
    """A new file whose header counts are still 0, and an entry written at indexCount."""
    root = store_copy("mixed")
    answers = load_answers("mixed")
    store = Store(root)
    geo = store.index_geometry
    last = store.index_files()[-1]
    new = last.with_name("99991231235959999")
    data = bytearray(geo.file_size)
    with open(last, "rb") as fh:
        header = fh.read(40)
    data[:32] = header[8:16] + header[8:16] + header[24:32] + header[24:32]   # seeded begin/end
    new.write_bytes(bytes(data))
    q = answers["keyQueries"][0]
    expected = true_matches(answers, q["topic"], q["key"], 0, 2**63 - 1)
    # an in-flight entry at indexCount of the last real file, linked into the chain
    h = index_key_hash(f"{q['topic']}#{q['key']}")
    with open(last, "rb") as fh:
        count = struct.unpack(">i", fh.read(40)[36:40])[0]
        fh.seek(slot_position(geo.hash_slots, h % geo.hash_slots))
        head = struct.unpack(">i", fh.read(4))[0]
    if count < geo.index_entries:
        _corrupt(last, entry_position(geo.hash_slots, count), h)
        _corrupt(last, entry_position(geo.hash_slots, count) + 4, 999_999_999, ">q")
        _corrupt(last, entry_position(geo.hash_slots, count) + 16, head)
        _corrupt(last, slot_position(geo.hash_slots, h % geo.hash_slots), count)
    res = query_key(Store(root), q["key"], q["topic"])
    assert [x.phy_offset for x in res.hits] == expected


@pytest.mark.parametrize("name", ["basic", "mixed", "crashed"])
def test_query_id_by_offset_msg_id_and_uniq_key(name):
    answers, store = load_answers(name), Store(reference_store(name))
    msgs = answers["messages"]
    if name == "crashed":   # ids of messages the shipped commitlog holds (all of them)
        assert msgs
    for m in msgs:
        res = query_id(store, m["offsetMsgId"])
        assert res.kind == KIND_OFFSET and [h.phy_offset for h in res.hits] == [m["phyOffset"]]
    uniq = {}
    for m in msgs:
        if m.get("uniqKey"):
            uniq.setdefault(m["uniqKey"], set()).add(m["phyOffset"])
    for key in sorted(uniq):
        res = query_id(store, key)
        assert res.kind == KIND_UNIQ
        assert {h.phy_offset for h in res.hits} == uniq[key], key
        assert res.decoded is not None and res.decoded["timestamp"] is not None


def test_query_id_uniq_key_that_looks_like_offset_msg_id():
    from rmqtool.records.ids import decode_offset_msg_id
    store = Store(reference_store("mixed"))
    m = next(m for m in load_answers("mixed")["messages"] if len(m.get("uniqKey") or "") in (32, 56))
    assert decode_offset_msg_id(m["uniqKey"]) is not None      # hex of an id's length: ambiguous
    res = query_id(store, m["uniqKey"])
    assert res.kind == KIND_UNIQ and m["phyOffset"] in [h.phy_offset for h in res.hits]


def test_query_id_unknown_is_empty():
    res = query_id(Store(reference_store("basic")), "C0A8010A00002A9F00000000DEADBEEF")
    assert res.kind == KIND_UNIQ and not res.hits


def _units_equal(before: dict, after: dict) -> bool:
    return before == after


@pytest.mark.parametrize("name", ["basic", "mixed", "crashed"])
def test_offset_by_time_equals_upstream(name):
    answers, store = load_answers(name), Store(reference_store(name))
    same_queue = None
    if name == "crashed":   # answers come from the recovered store: compare queues recovery left alone
        after = {(c["topic"], c["queueId"]): c["entries"] for c in answers["consumeQueues"]}
        same_queue = set()
        for (t, qid), entries in after.items():
            v = QueueView(store, t, qid)
            mine = [list(u) for u in v.units(0, v.max_offset)]
            if mine == [e for e in entries if e[0] < v.max_offset] and v.max_offset == len(entries):
                same_queue.add((t, qid))
    checked = 0
    for q in answers["timeQueries"]:
        key = (q["topic"], q["queueId"])
        if same_queue is not None and key not in same_queue and q["kind"] not in ("missing-queue", "missing-topic"):
            continue
        v = QueueView(store, *key)
        assert v.offset_by_time(q["timestamp"], "lower") == q["default"] == q["lower"], q
        assert v.offset_by_time(q["timestamp"], "upper") == q["upper"], q
        checked += 1
    assert checked >= (10 if name == "crashed" else len(answers["timeQueries"]))


@pytest.mark.parametrize("name", ["basic", "mixed"])
def test_queue_min_max_and_units_equal_upstream(name):
    answers, store = load_answers(name), Store(reference_store(name))
    for c in answers["consumeQueues"]:
        v = QueueView(store, c["topic"], c["queueId"])
        assert (v.min_offset, v.max_offset) == (c["getMinOffsetInQueue"], c["getMaxOffsetInQueue"])
        assert [list(u) for u in v.units(0, v.max_offset)] == c["entries"]


def test_uncovered_ranges_on_clean_store_are_small():
    store = Store(reference_store("basic"))
    notes = []
    index = open_index(store, notes)
    gaps = uncovered_ranges(store, index)
    index.close()
    assert not notes
    covered_end = max(f.end_phy_offset for f in index.files)
    assert gaps[-1][0] == covered_end
    assert sum(hi - lo for lo, hi in gaps[:-1]) < 20_000


# --- CLI ------------------------------------------------------------------------------
def run(*args):
    return subprocess.run([sys.executable, "-m", "rmqtool", *args], capture_output=True, text=True)


def test_cli_query_key_raw_and_default():
    answers = load_answers("basic")
    q = answers["keyQueries"][0]
    root = str(reference_store("basic"))
    p = run("query-key", root, q["key"], "--topic", q["topic"], "--raw", "--max", str(q["maxNum"]),
            "--format", "jsonl")
    assert p.returncode == 0, p.stderr
    assert [json.loads(x)["phy_offset"] for x in p.stdout.splitlines()] == \
        q["indexServiceQueryOffset"]["phyOffsets"]
    p = run("query-key", root, q["key"], "--topic", q["topic"], "--format", "json", "--body", "base64")
    rows = json.loads(p.stdout)
    assert [r["phy_offset"] for r in rows] == true_matches(answers, q["topic"], q["key"], 0, 2**63 - 1)
    assert all(r["matched_by"] in ("keys", "uniq_key") and r["indexed"] for r in rows)
    assert rows[0]["body_encoding"] == "base64"


def test_cli_exit_codes_and_time_parsing():
    root = str(reference_store("basic"))
    assert run("query-key", root, "no-such-key-anywhere").returncode == 1
    assert run("query-key", root, "key-0000", "--begin", "the day before").returncode == 2
    assert run("query-key", root, "key-0000", "--topic", "OrderTopic", "--begin", "yesterday").returncode in (0, 1)
    iso = run("query-key", root, "key-0000", "--topic", "OrderTopic", "--begin", "2099-01-01T00:00:00Z")
    assert iso.returncode == 1
    assert run("query-queue", root, "OrderTopic", "0").returncode == 2
    assert run("query-key", "/nonexistent/store", "k").returncode == 2


def test_cli_query_id_and_queue():
    answers = load_answers("mixed")
    root = str(reference_store("mixed"))
    m = answers["messages"][5]
    p = run("query-id", root, m["offsetMsgId"], "--format", "json")
    out = json.loads(p.stdout)[0]
    assert out["kind"] == "offsetMsgId" and out["records"][0]["phy_offset"] == m["phyOffset"]
    p = run("query-id", root, m["uniqKey"])
    assert p.returncode == 0 and "uniqKey" in p.stdout and "client ip" in p.stderr    # stdout: rows only
    c = answers["consumeQueues"][0]
    p = run("query-queue", root, c["topic"], str(c["queueId"]), "--offset", "0", "--count", "3",
            "--format", "jsonl", "--body", "hex")
    rows = [json.loads(x) for x in p.stdout.splitlines()]
    assert [[r["cq_queue_offset"], r["phy_offset"], r["size"], r["cq_tags_code"]] for r in rows] == c["entries"][:3]
    q = answers["timeQueries"][3]
    p = run("query-queue", root, q["topic"], str(q["queueId"]), "--time", str(q["timestamp"]),
            "--boundary", "upper", "--format", "json")
    assert json.loads(p.stdout)[0]["queue_offset"] == q["upper"]


@pytest.mark.parametrize("name", ["basic", "mixed", "crashed"])
def test_single_record_decoder_equals_bulk_scanner(name):
    """Fast path (struct, one record) == reference path (numpy batch decoder) on every record."""
    from rmqtool.records.single import RecordReader
    from rmqtool.records.scan import walk_store, RecordBatch
    store = Store(reference_store(name))
    reader = RecordReader(store)
    n = 0
    for item in walk_store(store):
        if not isinstance(item, RecordBatch):
            continue
        for i in range(len(item)):
            one = reader.read(int(item.phy_offset[i]))
            assert one is not None
            assert record_to_dict(one, 0, body="base64") == record_to_dict(item, i, body="base64")
            n += 1
    reader.close()
    assert n == len(load_answers(name)["messages"]) or name == "crashed"


def test_reader_rejects_non_record_offsets():
    from rmqtool.records.single import RecordReader
    store = Store(reference_store("basic"))
    reader = RecordReader(store)
    first = load_answers("basic")["messages"][1]["phyOffset"]
    for off in (first + 1, first + 4, -1, 10**12, store.commitlog.end_offset - 3):
        assert reader.read(off) is None


def test_mutated_index_files_never_hang_or_lie(tmp_path):
    """Random int32 overwrites in index files: queries end, raise nothing, report only true matches."""
    from hypothesis import HealthCheck, given, settings, strategies as st

    answers = load_answers("mixed")
    src = reference_store("mixed")
    queries = [q for q in answers["keyQueries"] if q["group"][0] in "ABDG"][:6]
    by_offset = {m["phyOffset"]: m for m in answers["messages"]}

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 7284 // 4 - 1),
                              st.integers(-2**31, 2**31 - 1)), min_size=1, max_size=25))
    def check(mutations):
        root = tmp_path / "m"
        if root.exists():
            shutil.rmtree(root)
        shutil.copytree(src, root)
        files = sorted((root / "index").iterdir())
        for f, word, value in mutations:
            _corrupt(files[f % len(files)], word * 4, value)
        store = Store(root)
        for q in queries:
            res = query_key(store, q["key"], q["topic"], q["begin"], q["end"])
            for h in res.hits:
                m = by_offset[h.phy_offset]
                assert m["topic"] == q["topic"]
                assert m.get("uniqKey") == q["key"] or q["key"] in split_keys(m.get("keys"))
            raw = query_key(store, q["key"], q["topic"], q["begin"], q["end"], max_num=10**6, raw=True)
            assert len(raw.raw) <= 5 * 350

    check()


def _hits(store, key, **kw):
    res = query_key(store, key, **kw)
    return ([(h.phy_offset, h.match, h.indexed, json.dumps(h.record(body="base64"), sort_keys=True)) for h in res.hits],
            res.scanned_bytes)


def _some_keys(name, n=25):
    msgs = load_answers(name)["messages"]
    keys = [m["uniqKey"] for m in msgs[::max(1, len(msgs) // n)] if m.get("uniqKey")]
    keys += [k for m in msgs[::max(1, len(msgs) // n)] for k in split_keys(m.get("keys"))]
    return keys[:2 * n] + ["no-such-key"]


@pytest.mark.parametrize("name", ["basic", "mixed", "crashed"])
@pytest.mark.parametrize("window", [1 << 16, 5000, 300])
def test_struct_walk_of_gaps_equals_the_bulk_scan(name, window, monkeypatch):
    """The first window of every scanned range is walked with struct (no numpy); with it off the
    bulk scan does all of it: the same hits and the same bytes scanned, whatever the window."""
    from rmqtool.ops.query import bykey
    store = Store(reference_store(name))
    monkeypatch.setattr(bykey, "GAP_CHUNK_MIN", window)
    fast = {k: _hits(store, k, scan=True) for k in _some_keys(name)}
    monkeypatch.setattr(bykey, "_chain_walk", lambda seg, start, *a: (0, start, False))
    assert fast == {k: _hits(store, k, scan=True) for k in _some_keys(name)}


@pytest.mark.parametrize("case", ["bad-magic", "total-size", "zeroed-middle", "blank-size", "torn-tail"])
def test_struct_walk_hands_damage_to_the_bulk_scan(case, store_copy, monkeypatch):
    from corruptions import corrupt
    from rmqtool.ops.query import bykey
    root = store_copy("crashed" if case == "torn-tail" else "basic")
    corrupt(root, case)
    store = Store(root)
    name = "crashed" if case == "torn-tail" else "basic"
    monkeypatch.setattr(bykey, "GAP_CHUNK_MIN", 3000)
    fast = {k: _hits(store, k, scan=True) for k in _some_keys(name, 10)}
    monkeypatch.setattr(bykey, "_chain_walk", lambda seg, start, *a: (0, start, False))
    assert fast == {k: _hits(store, k, scan=True) for k in _some_keys(name, 10)}


def test_query_key_imports_no_numpy_for_an_index_walk_and_a_few_records():
    """issue 14: a key query that needs one index walk and a few records starts without numpy,
    rich or pyspark (the geometry given, so nothing has to be inferred from the files)."""
    code = ("import runpy, sys; sys.argv = ['rmqtool', 'query-key', sys.argv[1], 'key-0011', '--topic', 'OrderTopic',"
            " '--index-slots', '61', '--index-entries', '350', '-f', 'jsonl']\n"
            "try:\n    runpy.run_module('rmqtool', run_name='__main__')\nexcept SystemExit as e:\n    code = e.code\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'rich', 'pyspark', 'pyarrow'))\n"
            "print('HEAVY', heavy, 'EXIT', code, file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code, str(reference_store("basic"))], capture_output=True, text=True)
    assert "HEAVY [] EXIT 0" in r.stderr, r.stderr[-2000:]
    assert '"key-0011"' in r.stdout or "key-0011" in r.stdout
