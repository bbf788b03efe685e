"""Valid inputs for the fuzzers: upstream-written reference files plus images built from formats/.

Each seed comes with ``hints``: (position, width) of the fields a structured mutation
aims at (lengths, magics, counts, offsets), derived from the construct declarations.
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from formats import checkpoint as ck
from formats import commitlog as cl
from formats import consumequeue as cq
from formats import indexfile as ix

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "fixtures" / "reference"
STORES = ("basic", "mixed", "crashed")
REF_INDEX_SLOTS, REF_INDEX_ENTRIES = 61, 350
REF_CQ_FILE_SIZE = 800


@dataclass
class Seed:
    data: bytes
    hints: list = field(default_factory=list)   # (position, width) of interesting fields
    origin: str = ""
    base: int = 0                                # commitlog file start offset (its name)
    extra: dict = field(default_factory=dict)    # target-specific context (companion files, keys)


# --- commitlog ------------------------------------------------------------------------------
def build_message(topic: bytes = b"T", body: bytes = b"hello", props: bytes = b"",
                  sys_flag: int = 0, magic: int = cl.MESSAGE_MAGIC_V1, queue_id: int = 0,
                  queue_offset: int = 0, phy: int = 0, born_ts: int = 1_700_000_000_000,
                  store_ts: int = 1_700_000_000_001) -> bytes:
    """One MESSAGE record built with the construct declaration."""
    def host(v6):
        return {"address": bytes(16 if v6 else 4), "port": 10911}
    total = cl.message_length(magic, sys_flag, len(body), len(topic), len(props))
    return cl.Message.build(dict(
        total_size=total, magic=magic, body_crc=zlib.crc32(body) & 0x7FFFFFFF, queue_id=queue_id,
        flag=0, queue_offset=queue_offset, physical_offset=phy, sys_flag=sys_flag,
        born_timestamp=born_ts, born_host=host(sys_flag & cl.BORNHOST_V6_FLAG), store_timestamp=store_ts,
        store_host=host(sys_flag & cl.STOREHOST_V6_FLAG), reconsume_times=0,
        prepared_transaction_offset=0, body_length=len(body), body=body, topic_length=len(topic),
        topic=topic, properties_length=len(props), properties=props))


def props(**kv) -> bytes:
    return cl.encode_properties(kv)


def commitlog_image(messages: list[dict], file_size: int, tail: str = "blank") -> bytes:
    """Records laid end to end (PHYSICALOFFSET filled in), then a BLANK or zeros to file_size."""
    out = bytearray()
    for m in messages:
        out += build_message(phy=len(out), **m)
    rest = file_size - len(out)
    if rest >= cl.END_FILE_MIN_BLANK_LENGTH and tail == "blank":
        out += cl.Blank.build(dict(total_size=rest)) + bytes(rest - cl.RECORD_PREFIX_SIZE)
    else:
        out += bytes(max(rest, 0))
    return bytes(out)


def record_hints(data: bytes) -> list[tuple[int, int]]:
    """Field positions of every record reachable by the TOTALSIZE chain of a valid image."""
    hints, p = [], 0
    head = cl.MESSAGE_HEAD_OFFSETS
    while p + cl.RECORD_PREFIX_SIZE <= len(data):
        total, magic = struct.unpack_from(">iI", data, p)
        if magic not in cl.MESSAGE_MAGICS or total < 1 or p + total > len(data):
            hints += [(p, 4), (p + 4, 4)]
            break
        sys_flag = struct.unpack_from(">i", data, p + head["sys_flag"])[0]
        tail = p + cl.tail_position(sys_flag)
        body_len = struct.unpack_from(">i", data, tail + cl.MESSAGE_TAIL_OFFSETS["body_length"])[0]
        topic_pos = tail + cl.MESSAGE_TAIL_SIZE + max(body_len, 0)
        tl_size = cl.topic_length_size(magic)
        topic_len = int.from_bytes(data[topic_pos:topic_pos + tl_size], "big", signed=True)
        props_pos = topic_pos + tl_size + max(topic_len, 0)
        hints += [(p, 4), (p + head["magic"], 4), (p + head["sys_flag"], 4),
                  (p + head["physical_offset"], 8), (p + head["queue_offset"], 8),
                  (tail + cl.MESSAGE_TAIL_OFFSETS["body_length"], 4), (topic_pos, tl_size),
                  (props_pos, 2), (p + head["body_crc"], 4)]
        p += total
    return hints


def built_commitlog_seeds() -> list[Seed]:
    big_topic = b"t" * 200
    msgs = [
        dict(topic=b"orders", body=b"x" * 40, props=props(KEYS="k1 k2", TAGS="tagA", UNIQ_KEY="AC1100")),
        dict(topic=big_topic, body=b"v2 topic", magic=cl.MESSAGE_MAGIC_V2, props=props(KEYS="long")),
        dict(topic=b"v6", body=b"ipv6", sys_flag=cl.BORNHOST_V6_FLAG | cl.STOREHOST_V6_FLAG,
             props=props(TAGS="t6")),
        dict(topic=b"z", body=zlib.compress(b"A" * 2000), sys_flag=cl.COMPRESSED_FLAG,
             props=props(KEYS="zip")),
        dict(topic=b"SCHEDULE_TOPIC_XXXX", body=b"later",
             props=props(DELAY="3", REAL_TOPIC="orders", REAL_QID="1", KEYS="d")),
        dict(topic=b"tx", body=b"rollback", sys_flag=cl.TRANSACTION_ROLLBACK_TYPE, props=props(KEYS="rb")),
        dict(topic=b"e", body=b"", props=b""),
    ]
    try:
        import zstandard
        msgs.append(dict(topic=b"zs", body=zstandard.ZstdCompressor().compress(b"B" * 3000),
                         sys_flag=cl.COMPRESSED_FLAG | (cl.COMPRESSION_ZSTD << cl.COMPRESSION_TYPE_SHIFT)))
    except ImportError:
        pass
    try:
        import lz4.frame
        msgs.append(dict(topic=b"l4", body=lz4.frame.compress(b"C" * 3000),
                         sys_flag=cl.COMPRESSED_FLAG | (cl.COMPRESSION_LZ4 << cl.COMPRESSION_TYPE_SHIFT)))
    except ImportError:
        pass
    seeds = []
    for size, tail in ((4096, "blank"), (6000, "zero")):
        img = commitlog_image(msgs, size, tail)
        seeds.append(Seed(img, record_hints(img), f"built-{tail}"))
    return seeds


def _ref_files(sub: str) -> list[Path]:
    out = []
    for store in STORES:
        base = REFERENCE / store / sub
        if base.is_dir():
            out += sorted(p for p in base.rglob("*") if p.is_file())
    return out


@lru_cache(maxsize=None)
def commitlog_seeds() -> list[Seed]:
    seeds = built_commitlog_seeds()
    for p in _ref_files("commitlog")[::6]:
        data = p.read_bytes()
        seeds.append(Seed(data, record_hints(data), str(p.relative_to(ROOT)), int(p.name)))
    return seeds


# --- consume queue ------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def consumequeue_seeds() -> list[Seed]:
    seeds = []
    for store in STORES:
        root = REFERENCE / store / "consumequeue"
        for qdir in sorted(d for d in root.glob("*/*") if d.is_dir())[:6]:
            files = sorted(qdir.iterdir())[:3]
            data = b"".join(f.read_bytes() for f in files)
            hints = [(u * cq.CQ_UNIT_SIZE + off, 8 if name != "size" else 4)
                     for u in range(len(data) // cq.CQ_UNIT_SIZE)
                     for name, off in cq.CQ_UNIT_OFFSETS.items()]
            seeds.append(Seed(data, hints, str(qdir.relative_to(ROOT))))
    blank = cq.ConsumeQueueUnit.build(dict(commitlog_offset=cq.PRE_BLANK_COMMITLOG_OFFSET,
                                           size=cq.PRE_BLANK_SIZE, tags_code=cq.PRE_BLANK_TAGS_CODE))
    unit = cq.ConsumeQueueUnit.build(dict(commitlog_offset=4096, size=120, tags_code=-5))
    seeds.append(Seed(blank * 3 + unit * 50, [(i * 20 + 8, 4) for i in range(53)], "built-preblank"))
    return seeds


# --- index ----------------------------------------------------------------------------------------
def index_hints(data: bytes, slots: int = REF_INDEX_SLOTS) -> list[tuple[int, int]]:
    hints = [(off, 4 if name in ("hash_slot_count", "index_count") else 8)
             for name, off in ix.INDEX_HEADER_OFFSETS.items()]
    count = struct.unpack_from(">i", data, ix.INDEX_HEADER_OFFSETS["index_count"])[0] \
        if len(data) >= ix.INDEX_HEADER_SIZE else 0
    for s in range(slots):
        pos = ix.slot_position(slots, s)
        if data[pos:pos + 4] != b"\0\0\0\0":
            hints.append((pos, 4))
    for e in range(ix.FIRST_INDEX, min(max(count, 0), 400)):
        pos = ix.entry_position(slots, e)
        hints += [(pos, 4), (pos + 12, 4), (pos + 16, 4)]
    return hints


@lru_cache(maxsize=None)
def index_seeds() -> list[Seed]:
    seeds = []
    for p in _ref_files("index")[::3]:
        data = p.read_bytes()
        seeds.append(Seed(data, index_hints(data), str(p.relative_to(ROOT))))
    return seeds


# --- checkpoint ----------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def checkpoint_seeds() -> list[Seed]:
    hints = [(off, 8) for off in ck.CHECKPOINT_OFFSETS.values()]
    seeds = [Seed((REFERENCE / s / "checkpoint").read_bytes(), hints, s) for s in STORES
             if (REFERENCE / s / "checkpoint").is_file()]
    built = ck.Checkpoint.build(dict(physic_msg_timestamp=1, logics_msg_timestamp=2, index_msg_timestamp=3,
                                     master_flushed_offset=4, confirm_phy_offset=5))
    seeds.append(Seed(built + bytes(ck.CHECKPOINT_FILE_SIZE - len(built)), hints, "built"))
    return seeds


# --- properties --------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def properties_seeds() -> list[Seed]:
    blobs = [
        props(KEYS="k1 k2  k3", TAGS="TagA", UNIQ_KEY="7F0000010001", DELAY="2", WAIT="true"),
        props(TAGS="é中文", KEYS="ключ", CLUSTER="DefaultCluster"),
        b"KEYS\x01a\x02KEYS\x01b\x02TAGS\x01\x02\x01x\x02",
        b"\x01\x02\x02KEYS\x01\x01v\x02",
        "TAGS\x01t\ud800".encode("utf-8", "surrogatepass") + b"\x02KEYS\x01\xff\xfe\x02",
    ]
    for seed in commitlog_seeds()[:2]:
        blobs.append(seed.data[200:420])
    return [Seed(b, [(i, 1) for i, c in enumerate(b) if c in (1, 2)], "built") for b in blobs]


# --- JSONL input of `write` -------------------------------------------------------------------
@lru_cache(maxsize=None)
def jsonl_seeds() -> list[Seed]:
    """Rows exactly as `dump commitlog --format jsonl` prints them (bodies in base64 and hex)."""
    import json
    from rmqtool.ops.dump import RecordFilter, commitlog_rows
    from rmqtool.io.store import Store
    seeds = []
    for store in STORES:
        for body in ("base64", "hex", "text"):
            rows = []
            for row in commitlog_rows(Store(REFERENCE / store), RecordFilter(), body=body):
                rows.append(json.dumps(row, ensure_ascii=False).encode("utf-8") + b"\n")
                if len(rows) >= 6:
                    break
            data = b"".join(rows)
            seeds.append(Seed(data, [(i, 1) for i, c in enumerate(data) if c in b'{}":,'], f"{store}-{body}"))
    return seeds


# --- the simplified article layout (commitLog.txt, consumerQueue.txt, index.txt) -----------------
#: the article's example: topic Topic-test, body "消息内容" + the first k characters of "msgmsg…"
#: (k fixed by the record offsets it prints; the 10th is free, tests/test_simplified.py uses 33)
ARTICLE_KS = (46, 46, 4, 7, 14, 21, 29, 26, 13, 33)


def article_example() -> list[dict]:
    return [{"topic": "Topic-test", "body": "消息内容" + ("msg" * 17)[:k],
             "msg_id": f"0b7c3f4e-0000-4000-8000-{i:012d}", "transaction_id": f"tx-{i}",
             "store_timestamp": 1_700_000_000_000 + 7 * i} for i, k in enumerate(ARTICLE_KS)]


def _simplified_mixed() -> list[dict]:
    """Edge cases the article's example lacks: multi-byte and 64-byte strings, empty and binary
    bodies, a body larger than a small read window, slot collisions, gaps in queueOffset."""
    from rmqtool.kernels.javahash import java_string_hash
    rows = [
        {"topic": "orders", "msg_id": "id-α-中文", "body": "", "queue_offset": 0},
        {"topic": "t" * 64, "msg_id": "m" * 64, "body": "00ff00" * 30, "body_encoding": "hex"},
        {"topic": "é" * 32, "uniq_key": "AC11000100002A9F0000000000000001", "body": "A" * 3000,
         "queue_offset": 7},
        {"topic": "orders", "msg_id": "🙂-non-bmp", "body": "QUJDAA==", "body_encoding": "base64",
         "queue_offset": 1, "transaction_id": ""},
    ]
    # two more ids hashed to the slot of the first: the slot is overwritten, the entries remain
    want = abs(java_string_hash(rows[0]["msg_id"])) % 100
    k = 0
    for _ in range(2):
        while abs(java_string_hash(f"c{k}")) % 100 != want:
            k += 1
        rows.append({"topic": "orders", "msg_id": f"c{k}", "body": f"collides {k}", "queue_offset": 2 + len(rows)})
        k += 1
    return [{"transaction_id": f"tx-{i}", **r, "store_timestamp": 1_700_000_000_000 + 1000 * i}
            for i, r in enumerate(rows)]        # every field given: the seeds are the same in every run


def _small_index(entries: int) -> int:
    from formats import simplified as sf
    return sf.entry_position(0) + entries * sf.INDEX_ENTRY_SIZE


@lru_cache(maxsize=None)
def simplified_stores() -> list[dict]:
    """Stores written by rmqtool's simplified writer: {name: (commitlog, cq, index), msg_ids}."""
    from rmqtool.simplified.writer import article_messages, build
    specs = [
        ("article", article_example(), dict()),                                    # the article's sizes
        ("article-start", article_example(), dict(index_points_at="start", commitlog_size=4096,
                                                  cq_size=400, index_size=_small_index(40))),
        ("synthetic", [dict(m, store_timestamp=1_700_000_000_000 + i)
                       for i, m in enumerate(article_messages(24, seed=7))],
         dict(commitlog_size=9000, cq_size=600, index_size=_small_index(30))),
        ("mixed", _simplified_mixed(), dict(commitlog_size=6000, cq_size=200, index_size=_small_index(12))),
        ("empty", [], dict(commitlog_size=1024, cq_size=100, index_size=_small_index(5))),
    ]
    out = []
    for name, msgs, opts in specs:
        commitlog, cq, index, rows = build(msgs, now_ms=lambda: 1_700_000_000_000, **opts)
        out.append({"name": name, "files": (commitlog, cq, index), "msg_ids": tuple(r["msg_id"] for r in rows),
                    "rows": rows})
    return out


def simplified_commitlog_hints(data: bytes) -> list[tuple[int, int]]:
    from formats import simplified as sf
    hints, p = [], 0
    head, tail = sf.RECORD_HEAD_OFFSETS, sf.RECORD_TAIL_OFFSETS
    while p + sf.RECORD_FIELDS_SIZE <= len(data):
        total, = struct.unpack_from(">q", data, p)
        hints.append((p, 8))
        if total < sf.RECORD_FIELDS_SIZE or p + total > len(data):
            break
        body = struct.unpack_from(">q", data, p + head["body_size"])[0]
        hints += [(p + head["queue_offset"], 8), (p + head["body_size"], 8), (p + head["msg_id"], 4),
                  (p + head["topic"], 1)]
        if 0 <= body <= total - sf.RECORD_FIELDS_SIZE:
            t = p + sf.tail_position(body)
            hints += [(t + tail["commit_log_offset"], 8), (t + tail["transaction_id"], 2),
                      (t + sf.RECORD_TAIL_SIZE, 8)]                       # the 56-byte gap
        p += total
    return hints


def _simplified_seeds(kind: int, hints) -> list[Seed]:
    seeds = []
    for store in simplified_stores():
        data = store["files"][kind]
        seeds.append(Seed(data, hints(data), f"simplified-{store['name']}",
                          extra={"files": store["files"], "msg_ids": store["msg_ids"]}))
    return seeds


@lru_cache(maxsize=None)
def simplified_commitlog_seeds() -> list[Seed]:
    return _simplified_seeds(0, simplified_commitlog_hints)


@lru_cache(maxsize=None)
def simplified_consumequeue_seeds() -> list[Seed]:
    from formats import simplified as sf

    def hints(data):
        out = []
        for u in range(min(len(data) // sf.CQ_UNIT_SIZE, 60)):
            at = u * sf.CQ_UNIT_SIZE
            if any(data[at:at + sf.CQ_UNIT_SIZE]) or u < 2:
                out += [(at, 8), (at + 8, 4), (at + 12, 8)]
        return out
    return _simplified_seeds(1, hints)


@lru_cache(maxsize=None)
def simplified_index_seeds() -> list[Seed]:
    from formats import simplified as sf

    def hints(data):
        out = [(off, 4 if name in ("hash_slot_count", "index_count") else 8)
               for name, off in sf.INDEX_HEADER_OFFSETS.items()]
        count = struct.unpack_from(">i", data, sf.INDEX_HEADER_OFFSETS["index_count"])[0]
        for s in range(sf.HASH_SLOTS):
            at = sf.slot_position(s)
            if data[at:at + 4] != b"\0\0\0\0" or s % 10 == 0:
                out.append((at, 4))
        for e in range(min(max(count, 0), 60) + 1):
            at = sf.entry_position(e)
            out += [(at, 4), (at + 4, 8), (at + 12, 4), (at + 16, 4)]
        return out
    return _simplified_seeds(2, hints)


@lru_cache(maxsize=None)
def simplified_jsonl_seeds() -> list[Seed]:
    """Rows for `write --layout simplified --from`: the article's messages, and what `dump
    commitlog` prints for the written stores (bodies as text, hex, base64)."""
    import json
    import tempfile
    from formats import simplified as fmt
    from rmqtool.simplified import ops
    seeds = []

    def add(rows, origin):
        data = b"".join(json.dumps(r, ensure_ascii=False).encode("utf-8") + b"\n" for r in rows)
        seeds.append(Seed(data, [(i, 1) for i, c in enumerate(data) if c in b'{}":,'], origin))

    add(article_example(), "simplified-article-rows")
    add(_simplified_mixed(), "simplified-mixed-rows")
    with tempfile.TemporaryDirectory() as tmp:
        for store in simplified_stores():
            if not store["msg_ids"]:
                continue
            path = Path(tmp) / f"{store['name']}.txt"
            path.write_bytes(store["files"][0])
            for body in ("text", "hex", "base64"):
                rows = [dict(r, file=fmt.COMMITLOG_NAME) for r in ops.commitlog_rows(path, body)
                        if r["kind"] == "MESSAGE"][:8]           # no temporary path: seeds are fixed
                add(rows, f"simplified-{store['name']}-dump-{body}")
    return seeds


# --- DLedger data files -------------------------------------------------------------------------
@lru_cache(maxsize=None)
def dledger_seeds() -> list[Seed]:
    """Windows of the upstream-written DLedger data files (fixtures/reference/dledger.tar.gz):
    hints on every entry header field and the record prefix behind it."""
    import sys
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import dledger_store
    from formats import dledger as dl
    seeds = []
    for p in sorted((dledger_store() / "dledger-n0" / "data").iterdir()):
        data = p.read_bytes()
        hints, heads, at = [], [], 0
        while at + dl.ENTRY_HEADER_SIZE <= len(data):
            heads.append(at)
            magic, size = int.from_bytes(data[at:at + 4], "big", signed=True), int.from_bytes(data[at + 4:at + 8], "big")
            for name, off in dl.ENTRY_HEADER_OFFSETS.items():
                hints.append((at + off, 8 if name in ("index", "term", "pos") else 4))
            hints.append((at + dl.ENTRY_BODY_OFFSET, 4))
            if magic != dl.ENTRY_MAGIC or size <= 0:
                break
            at += size
        middle = next((h for h in heads if h >= len(data) // 2), 0)
        for lo in sorted({0, middle}):      # from a file's start and from an entry in its middle, 12 KiB each
            cut = [(h - lo, w) for h, w in hints if lo <= h < lo + 12288]
            seeds.append(Seed(data[lo:lo + 12288], cut, f"{p.name}@{lo}", int(p.name) + lo))
    return seeds


def timer_seeds() -> list[Seed]:
    """The upstream-written timer log files (fixtures/reference/timer.tar.gz), hints on every
    unit field and on the filler, and the wheel's used slots (``extra['slot']``: the slot index of
    the 32 bytes given with each seed)."""
    import sys
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import timer_store_root
    from formats import timer as tf
    seeds = []
    for p in sorted((timer_store_root() / "timerlog").iterdir()):
        data = p.read_bytes()
        hints = [(at + off, 8 if name in ("prev_pos", "enqueue_time_ms", "offset_py", "reserved") else 4)
                 for at in range(0, len(data) - tf.UNIT_SIZE + 1, tf.UNIT_SIZE)
                 for name, off in tf.UNIT_OFFSETS.items()]
        seeds.append(Seed(data, hints, p.name, int(p.name)))
    return seeds


def kinds_seeds() -> list[Seed]:
    """Inputs for the 5.x queue kinds' parsers: BatchConsumeQueue files of the reference store,
    RocksDB entries (key + value, as the reference database holds them) and properties that name
    light queues, inner batches and timer times."""
    import sys
    sys.path.insert(0, str(ROOT / "tests"))
    from formats import rocksdb_cq as rf
    seeds = []
    for qdir in sorted((REFERENCE / "propcrc-lmq-batchcq" / "batchconsumequeue").glob("*/*")):
        data = b"".join(p.read_bytes() for p in sorted(qdir.iterdir()))
        hints = [(u * cq.BCQ_UNIT_SIZE + off, 8) for u in range(len(data) // cq.BCQ_UNIT_SIZE)
                 for off in cq.BCQ_UNIT_OFFSETS.values()]
        seeds.append(Seed(b"B" + data, hints, f"bcq:{qdir.name}"))
    key = rf.UnitKey.build(dict(topic_length=10, topic=b"RocksTopic", queue_id=1, queue_offset=7))
    value = rf.UnitValue.build(dict(commitlog_offset=4096, size=300, tags_code=5, store_timestamp=1))
    okey = rf.OffsetKey.build(dict(topic_length=10, topic=b"RocksTopic", which=rf.MAX, queue_id=1))
    ovalue = rf.OffsetValue.build(dict(commitlog_offset=4096, queue_offset=7))
    seeds.append(Seed(b"R" + bytes([len(key)]) + key + value, [(1, 1), (2, 4), (20, 8)], "rocksdb-unit"))
    seeds.append(Seed(b"O" + bytes([len(okey)]) + okey + ovalue, [(1, 1), (2, 4)], "rocksdb-offset"))
    props = cl.encode_properties({"INNER_MULTI_DISPATCH": "%LMQ%a,%LMQ%b,plain", "INNER_MULTI_QUEUE_OFFSET": "3,4,5",
                                  "INNER_NUM": "7", "INNER_BASE": "14", "TIMER_OUT_MS": "1795482428500",
                                  "TIMER_DEL_UNIQKEY": "X"})
    seeds.append(Seed(b"P" + props, [], "properties-kinds"))
    return seeds
