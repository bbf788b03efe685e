"""Fast paths used by deep verify agree with their reference definitions.

Property extraction (matrix rows per power-of-two width) against the upstream-style
parser, span hashing against the scalar Java hash, token splitting, CRC helpers.
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from formats import commitlog as cl
from rmqtool.kernels.javahash import java_string_hash
from rmqtool.kernels.gather import span_rows
from rmqtool.records.scan import EXTRACTED_PROPERTIES, extract_properties

segment = st.one_of(
    st.tuples(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "X", "", "TAG", "UNIQ_KEYS"]),
              st.text(alphabet="ab \x01\x02é", max_size=90)).map(lambda kv: f"{kv[0]}\x01{kv[1]}"),
    st.text(alphabet="ab\x01\x02", max_size=6))
record_props = st.tuples(st.lists(segment, max_size=6), st.booleans(), st.binary(max_size=3))


@settings(max_examples=300, deadline=None)
@given(st.lists(record_props, min_size=1, max_size=6), st.binary(max_size=40), st.integers(0, 3))
def test_extract_properties_many_records_equals_parser(records, junk, tail):
    """Adjacent records of mixed widths, junk between them, the last one flush with the buffer end."""
    raws, starts, blob = [], [], b""
    for segments, trailing, extra in records:
        raw = ("\x02".join(segments) + ("\x02" if trailing else "")).encode("utf-8") + extra
        blob += junk[:len(blob) % 7]
        starts.append(len(blob))
        raws.append(raw)
        blob += raw
    blob += b"\x01\x02"[:tail]
    buf = np.frombuffer(blob, np.uint8)
    lens = np.array([len(r) if r else -1 for r in raws], dtype=np.int64)
    out = extract_properties(buf, np.array(starts, dtype=np.int64), lens, pad_to=len(raws) + 1)
    for i, raw in enumerate(raws):
        want = cl.decode_properties(raw) if raw else {}
        for name, key in EXTRACTED_PROPERTIES.items():
            n = int(out[f"{name}_len"][i])
            got = None if n < 0 else buf[int(out[f"{name}_start"][i]):][:n].tobytes().decode("utf-8", "replace")
            assert got == want.get(key), (name, raw)
    assert all(int(out[f"{name}_len"][-1]) == -1 for name in EXTRACTED_PROPERTIES)


def test_span_rows_zero_fills_past_the_end():
    buf = np.arange(10, dtype=np.uint8)
    rows = span_rows(buf, np.array([0, 7, 9]), 4)
    assert rows.tolist() == [[0, 1, 2, 3], [7, 8, 9, 0], [9, 0, 0, 0]]
    assert span_rows(buf, np.array([1]), 16).tolist()[0][:9] == list(range(1, 10))


spans = st.lists(st.one_of(st.text(alphabet="abcXYZ #0", max_size=300), st.text(max_size=20)), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(spans, st.binary(max_size=5))
def test_span_hashes_equal_java_hash(texts, gap):
    """The one vectorised Java hash (javahash.span_hashes: dispatch's and verify's) on any UTF-8 spans."""
    from rmqtool.kernels.javahash import span_hashes
    raw = [t.encode("utf-8") for t in texts]
    blob, starts = b"", []
    for r in raw:
        blob += gap
        starts.append(len(blob))
        blob += r
    h, units = span_hashes(np.frombuffer(blob, np.uint8), np.array(starts), np.array([len(r) for r in raw]))
    for i, t in enumerate(texts):
        assert int(h[i]) == java_string_hash(t)
        assert int(units[i]) == len(t.encode("utf-16-le")) // 2


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet="ab ", max_size=70), min_size=1, max_size=10), st.binary(max_size=3))
def test_keys_tokens_equal_str_split(values, gap):
    """The one KEYS tokenizer (dispatch._keys_tokens, used by dispatch and verify)."""
    from rmqtool.broker.dispatch import _keys_tokens
    blob, starts, lens = b"", [], []
    for v in values:
        blob += gap
        starts.append(len(blob))
        lens.append(len(v) if v else -1)
        blob += v.encode()
    owner, tok_start, tok_len, _ = _keys_tokens(np.frombuffer(blob, np.uint8), np.array(starts), np.array(lens))
    got = [(int(o), blob[s:s + n].decode()) for o, s, n in zip(owner, tok_start, tok_len)]
    want = [(i, tok) for i, v in enumerate(values) for tok in v.split(" ") if tok]
    assert got == want


@settings(max_examples=400, deadline=None)
@given(st.lists(st.integers(-3, 40), min_size=1, max_size=40), st.integers(2, 9),
       st.lists(st.tuples(st.sampled_from(["prev", "slot"]), st.integers(0, 60), st.integers(-2, 45)), max_size=3),
       st.integers(1, 41))
def test_windowed_chains_equal_reference(hashes, S, mutations, window):
    """The slot chain check fed a window of entries at a time gives exactly the findings of the
    straightforward per-entry formulation (prevIndex = the previous entry of its slot; every slot
    = the newest entry of its slot), on broker-built chains with prevIndex and slot mutations."""
    from formats.indexfile import INDEX_ENTRY_DTYPE
    from rmqtool.ops.verify.findings import FindingSink
    from rmqtool.ops.verify.index import _Chains
    n = len(hashes)
    h = np.array(hashes, dtype=np.int64)
    bucket = np.where(h >= 0, h % S, -1)
    prev = np.zeros(n, dtype=np.int64)
    slots = np.zeros(S, dtype=np.int32)
    for e in range(1, n + 1):
        b = int(bucket[e - 1])
        if b >= 0:
            prev[e - 1], slots[b] = slots[b], e
    for what, at, value in mutations:
        (prev if what == "prev" else slots)[at % (n if what == "prev" else S)] = value
    entries = np.zeros(n, INDEX_ENTRY_DTYPE)
    entries["key_hash"], entries["prev_index"] = h, prev
    sink = FindingSink(None)
    chains = _Chains("f", S, n, slots, sink)
    for lo in range(0, n, window):
        chains.feed(entries[lo:lo + window], lo + 1)
    chains.finish()
    want, newest = [], {}
    for e in range(1, n + 1):
        b = int(bucket[e - 1])
        if b >= 0:
            if prev[e - 1] < e and prev[e - 1] != newest.get(b, 0):
                want.append((e, int(prev[e - 1])))
            newest[b] = e
    slot_want = [s for s in range(S) if 0 <= slots[s] <= n and slots[s] != newest.get(s, 0)]
    from formats.derive import field_offsets
    from formats.indexfile import IndexEntry, entry_position, slot_position
    at = field_offsets(IndexEntry)["prev_index"]
    got = sorted((f.offset, f.message) for f in sink.findings)
    assert [o for o, _ in got] == sorted([entry_position(S, e) + at for e, _ in want]
                                         + [slot_position(S, s) for s in slot_want])


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=0, max_size=64), st.lists(st.integers(-8, 80), max_size=12), st.integers(1, 16))
def test_strided_gathers_equal_byte_slices(raw, positions, width):
    """_gather / _gather_int / span_rows (one memcpy per item from a stride-1 view) against plain slicing."""
    import struct
    from rmqtool.kernels.gather import gather_bytes as _gather, gather_ints as _gather_int
    buf = np.frombuffer(raw, np.uint8)
    pos = np.array(positions, dtype=np.int64)
    padded = raw + bytes(max(0, width - len(raw)))
    limit = len(padded) - width
    rows = _gather(buf, pos, width)
    assert rows.shape == (len(pos), width)
    for p, row in zip(positions, rows.tolist()):
        q = min(max(p, 0), limit)
        assert bytes(row) == padded[q:q + width]
    for fmt, code in ((">i1", ">b"), (">i2", ">h"), (">i4", ">i"), (">i8", ">q")):
        size = struct.calcsize(code)
        pad = raw + bytes(max(0, size - len(raw)))
        got = _gather_int(buf, pos, fmt)
        assert got.dtype == np.int64
        for p, v in zip(positions, got.tolist()):
            q = min(max(p, 0), len(pad) - size)
            assert v == struct.unpack_from(code, pad, q)[0]
    ok = [p for p in positions if 0 <= p < len(raw)]
    if ok:
        spans = span_rows(buf, np.array(ok, dtype=np.int64), width)
        for p, row in zip(ok, spans.tolist()):
            assert bytes(row) == (raw[p:p + width] + bytes(width))[:width]


@given(st.lists(st.integers(0, 5000), min_size=1, max_size=50), st.sampled_from([1, 2, 4]), st.sampled_from([4, 8, 64]))
def test_row_widths_cover_lengths_and_distinct_equals_unique(lengths, steps, minimum):
    from rmqtool.kernels.gather import distinct_widths, row_width as _row_width
    lens = np.array(lengths, dtype=np.int64)
    w = _row_width(lens, minimum, steps=steps)
    assert (w >= np.maximum(lens, minimum)).all()
    assert len(distinct_widths(w)) <= len(np.unique(_row_width(lens, minimum))) * steps
    assert distinct_widths(w) == np.unique(w).tolist()
    assert distinct_widths(np.array([0, 1 << 22, 7])) == [0, 7, 1 << 22]
    from rmqtool.kernels.gather import _compute_row_width
    big = np.array(lengths + [70000, 1 << 20], dtype=np.int64)        # past the lookup table
    assert _row_width(big, minimum, steps).tolist() == _compute_row_width(big, minimum, steps).tolist()
    assert w.tolist() == _compute_row_width(lens, minimum, steps).tolist()


def _record(props: bytes, pos: int, body: bytes = b"body") -> bytes:
    size = cl.message_length(cl.MESSAGE_MAGIC_V2, 0, len(body), 5, len(props))
    return cl.Message.build(dict(
        total_size=size, magic=cl.MESSAGE_MAGIC_V2, body_crc=zlib.crc32(body) & 0x7FFFFFFF, queue_id=0, flag=0,
        queue_offset=0, physical_offset=pos, sys_flag=0, born_timestamp=1, born_host={"address": b"\x01" * 4, "port": 1},
        store_timestamp=2, store_host={"address": b"\x02" * 4, "port": 2}, reconsume_times=0,
        prepared_transaction_offset=0, body_length=len(body), body=body, topic_length=5, topic=b"Topic",
        properties_length=len(props), properties=props))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["good", "bad", "none", "near", "short"]), st.binary(max_size=30)),
                min_size=1, max_size=8))
def test_prop_crc_findings_equal_per_record_check(tmp_path_factory, kinds):
    """check_batch's __CRC32# candidates (one gather + compare) against a per-record scalar check."""
    from rmqtool.records.scan import FileScan
    from rmqtool.ops.verify.records import check_batch
    prefix = (cl.PROPERTY_CRC32 + cl.NAME_VALUE_SEPARATOR).encode()
    raw, want = b"", []
    for kind, junk in kinds:
        head = b"KEYS\x01k\x02" + junk.replace(b"\x00", b"")
        if kind == "short":
            props = head[:3] + b"\x02"
        elif kind == "none":
            props = head + b"X" * 19 + b"\x02"
        else:
            lead = prefix if kind != "near" else b"__CRC33#\x01"
            probe = _record(head + lead + b"0" * 10 + b"\x02", len(raw))
            crc = zlib.crc32(probe[:len(probe) - cl.CRC32_RESERVED_LENGTH]) & 0x7FFFFFFF
            digits = cl.crc32_property_digits(crc) if kind != "bad" else "9" * 10
            props = head + lead + digits.encode() + b"\x02"
        rec = _record(props, len(raw))
        stored_ok = True
        if len(props) >= cl.CRC32_RESERVED_LENGTH and props[-cl.CRC32_RESERVED_LENGTH:].startswith(prefix):
            digits_at = len(rec) - cl.CRC32_RESERVED_LENGTH + len(prefix)
            stored = rec[digits_at:digits_at + 10].decode("ascii", "replace")
            crc = zlib.crc32(rec[:len(rec) - cl.CRC32_RESERVED_LENGTH]) & 0x7FFFFFFF
            stored_ok = stored == cl.crc32_property_digits(crc)
            if not stored_ok:
                want.append(len(raw) + digits_at)
        raw += rec
    path = tmp_path_factory.mktemp("cl") / "00000000000000000000"
    path.write_bytes(raw + bytes(64))
    got = [f.offset for b in FileScan(path, 0) for f in check_batch(b) if f.check == "commitlog.prop-crc"]
    assert got == want


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["Aa", "BB", "AaBB", "BBAa", "T", "", "topic", "topicé", "x" * 70]),
                         min_size=1, max_size=12), min_size=1, max_size=4), st.binary(max_size=3))
def test_topic_ids_known_keys_equal_exact_interning(batches, gap):
    """Batches after the first map known (hash, length) keys to ids and compare bytes; ids must be
    what exact interning gives ("Aa"/"BB" share a Java hash and a length)."""
    from types import SimpleNamespace
    from rmqtool.ops.verify.records import TopicTable
    table = TopicTable()
    for topics in batches:
        raw = [t.encode("utf-8") for t in topics]
        blob, starts = b"", []
        for r in raw:
            blob += gap
            starts.append(len(blob))
            blob += r
        batch = SimpleNamespace(buf=np.frombuffer(blob + b"\x00", np.uint8), topic_start=np.array(starts, dtype=np.int64),
                                topic_len=np.array([len(r) for r in raw], dtype=np.int64))
        ids = table.topic_ids(batch)
        for r, tid in zip(raw, ids.tolist()):
            assert table.ids[r] == tid


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 9), st.integers(1, 9)), min_size=0, max_size=12),
       st.lists(st.integers(-5, 120), max_size=20))
def test_locate_equals_scalar_search(records, offsets):
    """RecordTable.locate (in-place temporaries) against a per-offset scan of the records."""
    from rmqtool.ops.verify.records import RecordTable, TopicTable
    phy, size, at = [], [], 3
    for gap, n in records:
        phy.append(at)
        size.append(n)
        at += n + gap - 1
    table = RecordTable({"phy": np.array(phy, dtype=np.int64), "size": np.array(size, dtype=np.int64)}, TopicTable(), [])
    exact, inside = table.locate(np.array(offsets, dtype=np.int64))
    for o, e, i in zip(offsets, exact.tolist(), inside.tolist()):
        want_e = phy.index(o) if o in phy else -1
        cont = [k for k, p in enumerate(phy) if p < o < p + size[k]]
        want_i = cont[-1] if want_e < 0 and cont else -1
        assert (e, i) == (want_e, want_i)


@pytest.mark.parametrize("mutation", ["none", "phy", "hash", "time", "mixed"])
def test_deep_index_checks_equal_reference(store_copy, mutation):
    """deep_index_checks (entries read 7 at a time and routed as rows, in-place time math) gives the
    findings and matched pairs of the straightforward formulation, on mutated reference index files."""
    import struct as st_
    from formats.indexfile import INDEX_ENTRY_DTYPE, entry_position
    from rmqtool.io.store import Store
    from rmqtool.ops.verify import index as vix
    from rmqtool.ops.verify.commitlog import CommitLogVerifier
    from rmqtool.ops.verify.findings import FindingSink
    from rmqtool.kernels.search import is_member
    root = store_copy("basic")
    store = Store(root)
    geometry = store.index_geometry
    S = geometry.hash_slots
    rng = np.random.default_rng(len(mutation))
    for n, path in enumerate(store.index_files()):
        state = vix.check_index_file(path, geometry, FindingSink(None), False)
        count = state.count
        with open(path, "r+b") as fh:
            for e in rng.integers(1, count + 1, size=min(count, 6)).tolist() if mutation != "none" else []:
                kind = mutation if mutation != "mixed" else ["phy", "hash", "time"][e % 3]
                pos = entry_position(S, e)
                if kind == "phy":
                    fh.seek(pos + 4)
                    fh.write(st_.pack(">q", int(rng.integers(0, 1 << 20))))
                elif kind == "hash":
                    fh.seek(pos)
                    fh.write(st_.pack(">i", int(rng.integers(-50, 1 << 31))))
                else:
                    fh.seek(pos + 12)
                    fh.write(st_.pack(">i", int(rng.integers(-3, 1 << 20))))
    store = Store(root)
    clv = CommitLogVerifier(store, FindingSink(None), deep=True, live=False)
    chunks = clv.walk()
    assert len(chunks) == 1
    table = chunks.chunk(0)
    selected = np.ones(len(table), dtype=bool)
    selected[::3] = False
    valid_end = int(table.cols["phy"][-1]) - 500

    def reference(state, ent):
        sink = FindingSink(None)
        num = np.arange(1, len(ent) + 1)
        phy = ent["phy_offset"].astype(np.int64)
        h = ent["key_hash"].astype(np.int64)
        live_part = phy >= store.commitlog.min_offset
        exact, inside = table.locate(phy)
        past = live_part & (exact < 0) & (phy >= valid_end)
        if past.any():
            i = int(np.flatnonzero(past)[0])
            sink.add("index.entry-target", state.path, entry_position(S, int(num[i])), f"{int(past.sum())} {int(num[i])}")
        for i in np.flatnonzero(live_part & (exact < 0) & ~past):
            sink.add("index.entry-target", state.path, entry_position(S, int(num[i])) + 4, f"{int(phy[i])}" + (f" {int(table.cols['phy'][inside[i]])}" if inside[i] >= 0 else ""))
        hit = np.flatnonzero(exact >= 0)
        r = exact[hit]
        pairs = (r.astype(np.int64) << 32) | h[hit]
        keys = (table.cols["key_rec"] << 32) | table.cols["key_hash"].astype(np.int64)
        ok = is_member(pairs, keys)
        sel = selected[r]
        for k in np.flatnonzero(~ok & sel):
            sink.add("index.entry-key", state.path, entry_position(S, int(num[hit[k]])), f"{int(h[hit[k]])}")
        if state.header.begin_timestamp > 0:
            rest = np.flatnonzero(num[hit] >= 2)
            ts = table.cols["store_ts"][r[rest]]
            want = np.clip((ts - state.header.begin_timestamp) // 1000, 0, (1 << 31) - 1)
            got = ent["time_diff"].astype(np.int64)[hit[rest]]
            for k in np.flatnonzero((want != got) & sel[rest]):
                sink.add("index.entry-time", state.path, entry_position(S, int(num[hit[rest[k]]])) + 12,
                         f"{int(got[k])} {int(want[k])}")
        return sink, pairs[ok]

    total, indexed = 0, []
    for path in store.index_files():
        read = []
        state = vix.check_index_file(path, geometry, FindingSink(None), False,
                                     on_entries=lambda ent, first: read.append(vix.entry_rows(ent, first, 0)),
                                     window=7)
        if not state.usable:
            continue
        rows = np.concatenate(read)
        sink, past = FindingSink(None), vix.PastEnd()
        got_pairs = vix.deep_index_checks(state, geometry, rows, table, store, valid_end, sink, selected, past)
        past.report(geometry, valid_end, sink)
        ref_entries = np.zeros(len(rows), INDEX_ENTRY_DTYPE)
        for name, col in (("phy_offset", "phy"), ("key_hash", "key_hash"), ("time_diff", "time_diff")):
            ref_entries[name] = rows[col]
        ref_sink, ref_pairs = reference(state, ref_entries)
        assert got_pairs.tolist() == ref_pairs.tolist()
        assert sorted((f.check, f.offset) for f in sink.findings) == sorted((f.check, f.offset) for f in ref_sink.findings)
        for f, g in zip(sink.sorted(), ref_sink.sorted()):
            assert all(part in f.message for part in g.message.split())
        total += len(sink.findings)
        indexed.append(got_pairs)
    assert total > 0 if mutation != "none" else True
    # missing_keys against the straightforward formulation (per-key gathers, a scan per hole record)
    pairs = np.concatenate(indexed)
    phy_all = table.cols["phy"]
    lo, frontier = int(phy_all[len(phy_all) // 5]), int(phy_all[3 * len(phy_all) // 4])
    sink = FindingSink(None)
    pending = vix.missing_keys(table, pairs, lo, frontier, valid_end, sink, selected)
    ref = FindingSink(None)
    c = table.cols
    kr = c["key_rec"]
    present = is_member((kr << 32) | c["key_hash"].astype(np.int64), pairs)
    phy = c["phy"][kr]
    usable = selected[kr] & ~c["carved"][kr] & (phy + c["size"][kr] <= valid_end)
    hole = np.flatnonzero(~present & usable & (phy >= lo) & (phy < frontier))
    seen = []
    for k in hole:
        i = int(kr[k])
        if i not in seen:
            seen.append(i)
            ref.add("index.missing", "x", int(c["position"][i]), f"{int(np.count_nonzero(kr[hole] == i))} of its keys")
    want_pending = np.unique(kr[usable & ~present & (phy >= frontier)]).tolist()
    assert pending == want_pending
    got = [(f.offset, f.message) for f in sink.findings if f.check == "index.missing"]
    assert [o for o, _ in got] == [f.offset for f in ref.findings]
    assert all(g.message in m for (_, m), g in zip(got, ref.findings))
    assert got or mutation in ("none", "time")


def test_tune_allocator_runs_in_a_fresh_process():
    """fileio.tune_allocator (mallopt through ctypes) is process-wide: tried in a child process only."""
    import subprocess
    import sys
    code = ("from rmqtool.io.fileio import tune_allocator; import numpy as np; ok = tune_allocator(); "
            "a = [np.ones(1 << 20) for _ in range(4)]; print(ok in (True, False))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
