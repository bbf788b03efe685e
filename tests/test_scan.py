"""The scanner against upstream's own answers, and the bulk decoder against construct."""
import base64
import hashlib
import zlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import load_answers, reference_store
from formats import commitlog as cl
from rmqtool.records.scan import (END_BLANK, END_CORRUPT, END_TORN, END_ZERO, FileScan, RecordBatch,
                          decode_record_reference, extract_properties, find_record_start, walk_store)
from rmqtool.output.schema import record_to_dict
from rmqtool.io.store import Store


def _scan(name):
    recs, ends = [], []
    for item in walk_store(Store(reference_store(name)), check_crc=True):
        if isinstance(item, RecordBatch):
            recs.extend(record_to_dict(item, i, body="base64") for i in range(len(item)))
        else:
            ends.append(item)
    return recs, ends


FIELD_MAP = {"phyOffset": "phy_offset", "size": "size", "magicCode": "magic", "topic": "topic",
             "queueId": "queue_id", "queueOffset": "queue_offset", "storeTimestamp": "store_timestamp",
             "bornTimestamp": "born_timestamp", "sysFlag": "sys_flag", "flag": "flag", "bodyCRC": "body_crc",
             "bodyLength": "body_length", "reconsumeTimes": "reconsume_times",
             "preparedTransactionOffset": "prepared_transaction_offset", "bornHost": "born_host",
             "storeHost": "store_host", "offsetMsgId": "offset_msg_id", "uniqKey": "uniq_key", "keys": "keys",
             "tags": "tags", "tagsCode": "tags_code", "properties": "properties",
             "transactionType": "transaction_type"}


@pytest.mark.parametrize("name", ["basic", "mixed", "crashed"])
def test_every_field_of_every_message_matches_upstream(name):
    answers = load_answers(name)
    recs, _ = _scan(name)
    assert len(recs) == len(answers["messages"])
    for rec, msg in zip(recs, answers["messages"]):
        for theirs, ours in FIELD_MAP.items():
            assert rec[ours] == msg[theirs], (msg["phyOffset"], ours)
        body = base64.b64decode(rec["body"]) if rec["compression"] is None else None
        if body is not None:
            assert hashlib.sha1(body).hexdigest() == msg["bodySha1"]
        if "inflatedBodyLength" in msg:
            assert rec["inflated_body_length"] == msg["inflatedBodyLength"]
            assert hashlib.sha1(base64.b64decode(rec["body"])).hexdigest() == msg["inflatedBodySha1"]
            assert rec["compression"] == msg["compressionType"].lower()
        assert rec["version"] == (2 if msg["version"].endswith("V2") else 1)


@pytest.mark.parametrize("name", ["basic", "mixed"])
def test_file_ends_match_upstream_layout(name):
    files = load_answers(name)["commitlog"]["files"]
    _, ends = _scan(name)
    assert len(ends) == len(files)
    for end, f in zip(ends, files):
        assert end.messages == f["messages"]
        if f["blankMagicAt"] is not None:
            assert end.kind == END_BLANK and end.phy_offset == f["blankMagicAt"]
            assert end.blank_size == f["blankLength"]
        else:
            assert end.kind == END_ZERO and end.position == f["dataEnd"]


def test_bulk_decoder_equals_construct_reference():
    store = Store(reference_store("mixed"))
    seen = 0
    for batch in walk_store(store):
        if not isinstance(batch, RecordBatch):
            continue
        for i in range(len(batch)):
            pos = int(batch.position[i]) - batch.buf_base
            ref = decode_record_reference(batch.buf[pos:pos + int(batch.size[i])].tobytes())
            assert ref.total_size == batch.size[i]
            assert ref.queue_offset == batch.queue_offset[i]
            assert ref.physical_offset == batch.stored_phy_offset[i]
            assert ref.store_timestamp == batch.store_timestamp[i]
            assert ref.prepared_transaction_offset == batch.prepared_transaction_offset[i]
            assert ref.body == batch.body(i)
            assert ref.topic.decode("utf-8", "replace") == batch.topic(i)
            assert ref.properties == (batch.span("props", i) or b"")
            assert (ref.store_host.address, ref.store_host.port) == batch.host("store", i)
            assert (ref.born_host.address, ref.born_host.port) == batch.host("born", i)
            seen += 1
    assert seen == 662


def _message(topic: bytes, body: bytes, props: bytes, sys_flag: int, magic: int, pos: int) -> bytes:
    born = {"address": b"\x01" * (16 if sys_flag & cl.BORNHOST_V6_FLAG else 4), "port": 1}
    stored = {"address": b"\x02" * (16 if sys_flag & cl.STOREHOST_V6_FLAG else 4), "port": 2}
    size = cl.message_length(magic, sys_flag, len(body), len(topic), len(props))
    return cl.Message.build(dict(
        total_size=size, magic=magic, body_crc=zlib.crc32(body) & 0x7FFFFFFF, queue_id=3, flag=4, queue_offset=5, physical_offset=pos,
        sys_flag=sys_flag, born_timestamp=6, born_host=born, store_timestamp=7, store_host=stored,
        reconsume_times=8, prepared_transaction_offset=9, body_length=len(body), body=body,
        topic_length=len(topic), topic=topic, properties_length=len(props), properties=props))


segment = st.one_of(
    st.tuples(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "X", "", "TAG"]),
              st.text(alphabet="ab \x01é", max_size=5)).map(lambda kv: f"{kv[0]}\x01{kv[1]}"),
    st.text(alphabet="ab\x01", max_size=4))


@settings(max_examples=300, deadline=None)
@given(st.lists(segment, max_size=8), st.booleans(), st.binary(max_size=3))
def test_property_extraction_equals_upstream_parser(segments, trailing, junk):
    raw = ("\x02".join(segments) + ("\x02" if trailing else "")).encode("utf-8") + junk
    props = cl.decode_properties(raw)
    buf = np.frombuffer(b"\x02\x01" + raw + b"\x01\x02", np.uint8)   # separators around the span
    spans = extract_properties(buf, np.array([2]), np.array([len(raw) if raw else -1]))
    for name, key in [("tags", "TAGS"), ("keys", "KEYS"), ("uniq", "UNIQ_KEY"), ("delay", "DELAY")]:
        n = int(spans[f"{name}_len"][0])
        got = None if n < 0 else buf[spans[f"{name}_start"][0]:][:n].tobytes().decode("utf-8", "replace")
        assert got == props.get(key), (name, raw)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.binary(min_size=1, max_size=140), st.binary(max_size=50),
                          st.sampled_from([0, 0x10, 0x20, 0x30, 0x8, 0x301]),
                          st.sampled_from([cl.MESSAGE_MAGIC_V1, cl.MESSAGE_MAGIC_V2])), min_size=1, max_size=6))
def test_scanner_decodes_construct_built_records(tmp_path_factory, records):
    raw, expected = b"", []
    for topic, body, sys_flag, magic in records:
        topic = topic[:127] if magic == cl.MESSAGE_MAGIC_V1 else topic
        rec = _message(topic, body, b"KEYS\x01k1 k2\x02", sys_flag, magic, len(raw))
        expected.append((len(raw), len(rec), topic.decode("utf-8", "replace"), body))
        raw += rec
    path = tmp_path_factory.mktemp("cl") / "00000000000000000000"
    path.write_bytes(raw + b"\x00" * 64)
    scan = FileScan(path, 0)
    got = []
    for batch in scan:
        got.extend((int(batch.position[i]), int(batch.size[i]), batch.topic(i), batch.body(i),
                    batch.text("keys", i)) for i in range(len(batch)))
    assert [g[:4] for g in got] == expected
    assert all(g[4] == "k1 k2" for g in got)
    assert scan.end.kind == END_ZERO and scan.end.position == len(raw)


def _one_file(tmp_path, data: bytes):
    p = tmp_path / "00000000000000000000"
    p.write_bytes(data)
    scan = FileScan(p, 0, check_crc=True)
    n = sum(len(b) for b in scan)
    return n, scan.end


def test_torn_bad_magic_and_length_mismatch_are_reported(tmp_path):
    good = _message(b"T", b"body", b"", 0, cl.MESSAGE_MAGIC_V1, 0)
    n, end = _one_file(tmp_path, good + good[:40])                      # torn tail
    assert (n, end.kind, end.position) == (1, END_TORN, len(good))
    bad = bytearray(good)
    bad[4:8] = b"\x12\x34\x56\x78"
    n, end = _one_file(tmp_path, bytes(bad) + b"\0" * 8)                 # bad magic
    assert (n, end.kind, end.check) == (0, END_CORRUPT, "commitlog.magic")
    bad = bytearray(good)
    bad[84:88] = (len(b"body") + 1).to_bytes(4, "big")
    n, end = _one_file(tmp_path, bytes(bad) + b"\0" * 8)
    assert (n, end.kind, end.check) == (0, END_CORRUPT, "commitlog.length")
    huge = bytearray(good)
    huge[0:4] = (2 ** 31 - 1).to_bytes(4, "big")                         # absurd TOTALSIZE: no allocation
    n, end = _one_file(tmp_path, bytes(huge))
    assert (n, end.kind) == (0, END_TORN)


def test_crc_mismatch_stops_recovery_walk(tmp_path):
    import zlib
    body = b"hello"
    rec = bytearray(_message(b"T", body, b"", 0, cl.MESSAGE_MAGIC_V1, 0))
    rec[8:12] = ((zlib.crc32(body) & 0x7FFFFFFF) ^ 1).to_bytes(4, "big")
    n, end = _one_file(tmp_path, bytes(rec) + b"\0" * 8)
    assert (n, end.check) == (0, "commitlog.body-crc")


def test_resync_finds_next_record_by_stored_offset():
    store = Store(reference_store("basic"))
    seg = store.commitlog.files[1]
    first = next(iter(FileScan(seg.path, seg.start)))
    assert find_record_start(seg.path, seg.start, 1) == int(first.position[1])
    assert find_record_start(seg.path, seg.start, 0) == 0


# --- the vectorised chain walk equals the record-by-record one ---------------------------------------

_MIN = cl.message_length(cl.MESSAGE_MAGIC_V1, 0, 0, 0, 0)


def _prefix(total: int, magic: int) -> bytes:
    return cl.RecordPrefix.build({"total_size": total, "magic": magic})


_fake = st.builds(_prefix, st.sampled_from([_MIN, _MIN + 9, 40, -5, 2**31 - 1]),
                  st.sampled_from(cl.MESSAGE_MAGICS + (cl.BLANK_MAGIC, 0)))


@st.composite
def _piece(draw):
    kind = draw(st.sampled_from(["msg", "msg", "msg", "msg", "blank", "zeros", "garbage", "short", "huge"]))
    if kind in ("msg", "short", "huge"):
        total = {"msg": draw(st.integers(_MIN, _MIN + 120)), "short": draw(st.integers(-3, _MIN - 1)),
                 "huge": draw(st.integers(_MIN, 2**31 - 1))}[kind]
        body_len = max(0, min(total, _MIN + 120) - 8)
        body = bytearray(draw(st.binary(min_size=body_len, max_size=body_len)))
        for _ in range(draw(st.integers(0, 3))):         # magics hidden inside the body
            fake = draw(_fake)
            if len(body) >= len(fake):
                at = draw(st.integers(0, len(body) - len(fake)))
                body[at:at + len(fake)] = fake
        return _prefix(total, draw(st.sampled_from(cl.MESSAGE_MAGICS))) + bytes(body)
    if kind == "blank":
        return _prefix(draw(st.integers(8, 200)), cl.BLANK_MAGIC)
    if kind == "zeros":
        return bytes(draw(st.integers(1, 40)))
    return draw(st.binary(min_size=1, max_size=30))


@settings(max_examples=400, deadline=None)
@given(pieces=st.lists(_piece(), max_size=14), cut=st.integers(0, 60), base=st.integers(0, 5000),
       slack=st.integers(0, 300), hi_back=st.integers(0, 400))
def test_vector_chain_walk_equals_the_scalar_walk(pieces, cut, base, slack, hi_back):
    from rmqtool.records.scan import _walk_chain, _walk_chain_scalar
    window = b"".join(pieces)
    window = window[:max(0, len(window) - cut)]
    file_size = base + len(window) + slack
    hi = max(base, file_size - hi_back)
    starts, stop, resume = _walk_chain(window, base, file_size, hi)
    ref_starts, ref_stop, ref_resume = _walk_chain_scalar(window, base, file_size, hi)
    assert [int(x) for x in starts] == ref_starts
    assert (stop, resume) == (ref_stop, ref_resume)


def test_vector_chain_walk_steps_over_magics_inside_bodies():
    from rmqtool.records.scan import _message_run
    body = (_prefix(_MIN, cl.MESSAGE_MAGIC_V1) + bytes(10)) * 3
    rec = _prefix(8 + len(body), cl.MESSAGE_MAGIC_V1) + body
    rec = _prefix(max(len(rec), _MIN), cl.MESSAGE_MAGIC_V1) + rec[8:] + bytes(max(0, _MIN - len(rec)))
    window = rec * 4 + _prefix(100, cl.BLANK_MAGIC)
    run, after = _message_run(window, len(window))
    assert list(run) == [i * len(rec) for i in range(4)] and after == 4 * len(rec)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=400), step=st.integers(1, 64))
def test_magic_byte_search_in_steps_finds_every_position(data, step):
    import rmqtool.records.scan as scan
    probe = np.frombuffer(data.replace(b"\x01", bytes([scan._MAGIC_FIRST_BYTES[0]])), np.uint8)
    saved, scan._PROBE_STEP = scan._PROBE_STEP, step
    try:
        got = scan._first_magic_bytes(probe)
    finally:
        scan._PROBE_STEP = saved
    assert got.tolist() == np.flatnonzero(np.isin(probe, scan._MAGIC_FIRST_BYTES)).tolist()


def _resync_reference(data: bytes, file_base: int, lo: int, hi: int | None):
    """Every position, one at a time, parsed with the construct declaration of the head."""
    end = len(data) if hi is None else min(hi, len(data))
    for pos in range(lo, end):
        if pos + cl.MESSAGE_HEAD_SIZE > len(data):
            return None
        head = cl.MessageHead.parse(data[pos:pos + cl.MESSAGE_HEAD_SIZE])
        if head.magic in cl.MESSAGE_MAGICS and head.physical_offset == file_base + pos:
            return pos
    return None


@settings(max_examples=150, deadline=None)
@given(pieces=st.lists(_piece(), max_size=8), plants=st.lists(st.floats(0, 1, exclude_max=True), max_size=4),
       base=st.sampled_from([0, 1 << 20]), lo=st.integers(0, 600), hi_back=st.one_of(st.none(), st.integers(0, 300)))
def test_resync_equals_the_construct_reference(tmp_path_factory, pieces, plants, base, lo, hi_back):
    """Anchors (a MESSAGE head whose PHYSICALOFFSET is its own place) planted among noise."""
    from rmqtool.records.scan import find_record_start
    data = bytearray(b"".join(pieces))
    for at in (int(f * len(data)) for f in plants):
        if at + cl.MESSAGE_HEAD_SIZE <= len(data):
            head = cl.MessageHead.build(dict(total_size=_MIN, magic=cl.MESSAGE_MAGIC_V1, body_crc=0, queue_id=0,
                                             flag=0, queue_offset=0, physical_offset=base + at, sys_flag=0,
                                             born_timestamp=0))
            data[at:at + len(head)] = head
    path = tmp_path_factory.mktemp("resync") / f"{base:020d}"
    path.write_bytes(bytes(data))
    hi = None if hi_back is None else max(lo, len(data) - hi_back)
    assert find_record_start(path, base, lo, hi) == _resync_reference(bytes(data), base, lo, hi)


def test_resync_ignores_anchors_at_or_after_hi(tmp_path):
    from rmqtool.records.scan import find_record_start
    data = bytearray(4096)
    head = cl.MessageHead.build(dict(total_size=_MIN, magic=cl.MESSAGE_MAGIC_V2, body_crc=0, queue_id=0, flag=0,
                                     queue_offset=0, physical_offset=3000, sys_flag=0, born_timestamp=0))
    data[3000:3000 + len(head)] = head
    path = tmp_path / f"{0:020d}"
    path.write_bytes(bytes(data))
    assert find_record_start(path, 0, 100) == 3000
    assert find_record_start(path, 0, 100, 3001) == 3000
    assert find_record_start(path, 0, 100, 3000) is None
    assert find_record_start(path, 0, 3001) is None
