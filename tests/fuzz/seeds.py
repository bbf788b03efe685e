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
    from rmqtool.dump import RecordFilter, commitlog_rows
    from rmqtool.store import Store
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
