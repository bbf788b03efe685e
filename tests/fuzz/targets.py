"""Fuzz targets: one function per parser entry point, fed one mutated input.

A target may raise ``RmqError`` (a refusal naming the file) and may report findings;
any other exception is a bug. Every target also checks cheap invariants of what the
parser returned (records inside the file, ascending, ...), so a parser that silently
invents data fails too. Inputs are written to a scratch directory (tmpfs when
available) because the parsers read files with pread, as they do on a real store.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from formats import commitlog as cl
from formats.consumequeue import CQ_UNIT_SIZE
from formats.indexfile import INDEX_ENTRY_SIZE, INDEX_HEADER_SIZE, entry_position
from rmqtool.errors import RmqError
from rmqtool.output.schema import record_to_dict

from . import seeds as sd


class InvariantError(AssertionError):
    """A parser returned something impossible for its input (a wrong answer)."""


def check(cond: bool, what: str) -> None:
    if not cond:
        raise InvariantError(what)


def _write(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


class Steps:
    """Run independent steps; a step's RmqError is a refusal, recorded, not a failure."""

    def __init__(self):
        self.refused = 0

    def __call__(self, fn, *args, **kw):
        try:
            return fn(*args, **kw)
        except RmqError as exc:
            check(bool(str(exc)), "RmqError without a message")
            self.refused += 1
            return None


@dataclass
class Target:
    name: str
    seeds: Callable[[], list]
    run: Callable[[bytes, "sd.Seed", Path], int]   # returns the number of refused steps
    mutate: Callable | None = None                  # (rng, seed, byte_mutator) -> bytes, else bytes only


# --- commitlog --------------------------------------------------------------------------------
class _OneFileStore:
    def __init__(self, queue):
        self.commitlog = queue


def _one_file_store(directory: Path, seed, data: bytes):
    """The input written as the one CommitLog file (based at the seed's offset) of a store."""
    from rmqtool.io.segments import Segment, SegmentQueue
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{seed.base:020d}"
    _write(path, data)
    return path, _OneFileStore(SegmentQueue("commitlog", [Segment(path, seed.base, len(data))], max(len(data), 1)))


def run_commitlog(data: bytes, seed, scratch: Path) -> int:
    from rmqtool.broker.dispatch import dispatch_batch
    from rmqtool.records.scan import RecordBatch, find_record_start, walk_store
    path, store = _one_file_store(scratch / "commitlog", seed, data)
    size = len(data)
    steps = Steps()

    def walk():
        last_end, ends = 0, 0
        for item in walk_store(store, check_crc=True):
            if isinstance(item, RecordBatch):
                pos, sz = item.position, item.size
                check(len(pos) > 0, "empty batch yielded")
                check(bool((pos[:-1] + sz[:-1] == pos[1:]).all()), "records not contiguous")
                check(int(pos[0]) >= last_end and int(pos[-1] + sz[-1]) <= size, "record outside the file")
                check(bool((sz >= cl.RECORD_PREFIX_SIZE).all()), "record smaller than its prefix")
                last_end = int(pos[-1] + sz[-1])
                for i in sorted({0, len(item) // 2, len(item) - 1}):
                    rec = record_to_dict(item, i, body="text")
                    check(rec["phy_offset"] == seed.base + int(pos[i]), "phy_offset != base + position")
                steps(dispatch_batch, item)
            else:
                ends += 1
                check(last_end <= item.position <= size, f"end position {item.position} outside [{last_end}, {size}]")
        check(ends == 1, f"{ends} file ends for one file")

    steps(walk)
    hit = steps(find_record_start, path, seed.base, 1)
    if hit is not None:
        check(1 <= hit < size, "resync position outside the file")
        phy = struct.unpack_from(">q", data, hit + cl.MESSAGE_HEAD_OFFSETS["physical_offset"])[0]
        check(phy == seed.base + hit, "resync landed on a record with the wrong PHYSICALOFFSET")
    return steps.refused


def run_dledger(data: bytes, seed, scratch: Path) -> int:
    """The input as a DLedger member's data file: the real FileScan walks its entries into
    record batches (records inside the file, each behind an entry header naming its own pos),
    one file end; the entries taken in C equal the scalar walk; the resync lands on an entry; the
    member's recovery model (over the same bytes as data and entry index) ends inside the file."""
    from formats import dledger as dl
    from rmqtool.kernels import native
    from rmqtool.records.scan import RecordBatch, _walk_entries, find_record_start, walk_store
    path, store = _one_file_store(scratch / "dledger-n0" / "data", seed, data)
    size = len(data)
    steps = Steps()

    def walk():
        ends, last_end = 0, 0
        for item in walk_store(store, check_crc=True):
            if isinstance(item, RecordBatch):
                for pos, sz in zip(item.position.tolist(), item.size.tolist()):
                    head = pos - dl.ENTRY_BODY_OFFSET
                    check(head >= last_end and pos + sz <= size, "record outside the file or overlapping")
                    h = dl.EntryHeader.parse(data[head:pos])
                    check(h.magic == dl.ENTRY_MAGIC and h.pos == seed.base + head and h.size == sz + dl.ENTRY_BODY_OFFSET,
                          "a record without its entry header")
                    last_end = pos + sz
            else:
                ends += 1
        check(ends == 1, f"{ends} file ends for one file")
    steps(walk)
    for core in ((native.core,) if native.core is not None else ()):
        a = _walk_entries(data, 0, seed.base, size, size, core=core)
        b = _walk_entries(data, 0, seed.base, size, size, core=None)
        check((list(a[0]), a[1] and vars(a[1]), a[2]) == (list(b[0]), b[1] and vars(b[1]), b[2]),
              "the native entry run and the scalar entry walk differ")
    # the file scanned entry by entry by the native window scan and by the reference entry walk
    import random
    import zlib
    rng = random.Random(zlib.crc32(data))
    kwargs = dict(chunk_size=rng.choice([1 << 16, rng.randrange(64, max(size, 65) + 64)]),
                  lo=rng.choice([0, 0, rng.randrange(0, size + 1)]))
    kwargs["check_crc"], kwargs["crc_column"] = rng.choice(((False, False), (True, False), (False, True)))
    piece = rng.choice([None, rng.randrange(1, 4096)])
    (_, a), (_, b) = _both_paths(lambda core: _scanned(path, seed.base, core, **kwargs,
                                                       **({"piece_size": piece} if core is not None else {})))
    check(a == b, f"native window scan of the entries differs from the reference ({kwargs})")
    hit = steps(find_record_start, path, seed.base, 1)
    if hit is not None:
        check(1 <= hit < size, "resync position outside the file")
        h = dl.EntryHeader.parse(data[hit:hit + dl.ENTRY_HEADER_SIZE])
        check(h.magic == dl.ENTRY_MAGIC and h.pos == seed.base + hit, "resync landed off an entry header")
    # the same bytes as the member's entry index and as its checkpoint / currterm text
    from rmqtool.io.dledger_layout import read_properties
    from rmqtool.ops.dledger import index_units
    member = scratch / "dledger-n0"
    (member / "index").mkdir(exist_ok=True)
    _write(member / "index" / f"{0:020d}", data)

    def units():
        n = 0
        for _, first, u in index_units(member):
            check(first == n and bool((u["magic"] == dl.ENTRY_MAGIC).all()), "index units out of order or unmarked")
            n += len(u)
        check(n <= size // dl.INDEX_UNIT_SIZE, "more index units than the file holds")
    steps(units)

    def recovery():         # the member's recovery over the same bytes as data file and entry index
        from rmqtool.broker.dledger_recovery import dledger_recovery
        rec = dledger_recovery(store)
        file_end = seed.base + store.commitlog.file_size
        check(seed.base <= rec.start_offset <= rec.end <= file_end, f"recovery end {rec.end} outside the file")
        check((rec.last_entry is None) == (rec.entries == 0), "entries walked without a last entry")
        check(rec.stop.path == str(path) and 0 <= rec.stop.position <= store.commitlog.file_size,
              "recovery stop outside the file")
    steps(recovery)
    _write(member / "checkpoint", data)
    props = steps(read_properties, member / "checkpoint")
    check(props is None or isinstance(props, dict), "checkpoint text not read as properties")
    return steps.refused


def run_timer(data: bytes, seed, scratch: Path) -> int:
    """The input as a timer log file, as the wheel (its bytes at a used slot of the reference
    wheel layout) and as the timer checkpoint: the log walk yields whole units inside the file and
    one end; every slot's chain walk ends (bounded, loop-safe) with units inside the log; the
    pending-timer listing and verify's timer checks finish with findings, never an exception."""
    from formats import timer as tf
    from rmqtool.io.timerstore import LogEnd, TimerStore, Unit
    root = scratch / "timer-store"
    (root / "timerlog").mkdir(parents=True, exist_ok=True)
    (root / "config").mkdir(exist_ok=True)
    for old in (root / "timerlog").iterdir():
        old.unlink()
    _write(root / "timerlog" / f"{0:020d}", data)
    wheel = bytearray(tf.SLOT_SIZE * 64)
    wheel[:min(len(data), len(wheel))] = data[:len(wheel)]
    _write(root / "timerwheel", bytes(wheel))
    _write(root / "config" / "timercheck", data[:tf.CHECKPOINT_STRUCT.size + 7])
    steps = Steps()
    ts = TimerStore(root, precision_ms=1000)

    def walk():
        items = list(ts.walk_log())
        check(sum(isinstance(i, LogEnd) for i in items) == 1, "one end per timer log file")
        for u in items:
            if isinstance(u, Unit):
                check(u.position + tf.UNIT_SIZE <= len(data) and u.size == tf.UNIT_SIZE, "unit outside the file")
    steps(walk)

    def chains():
        end = ts.log_end()
        for slot in ts.slots():
            chain = ts.chain(slot)
            check(len(chain.units) <= end // tf.UNIT_SIZE + 1, "a chain longer than the log")
            check(all(0 <= u.pos < max(end, len(data)) for u in chain.units), "a chain unit outside the log")
    steps(chains)
    steps(ts.checkpoint)
    return steps.refused


def run_kinds(data: bytes, seed, scratch: Path) -> int:
    """The 5.x queue kinds' parsers on the input, by its first byte: ``B`` a BatchConsumeQueue file
    (units read up to the first zero unit, whole and inside the file), ``R``/``O`` a RocksDB entry
    (the next byte the key's length; a unit or offset tuple, or a reason), anything else properties
    (light-queue units, inner batch position and kind fields: values, never exceptions)."""
    from formats import commitlog as cl
    from formats.consumequeue import BCQ_UNIT_SIZE
    from rmqtool.broker.queuekinds import QueueKinds, batch_position, lmq_units
    from rmqtool.io.rocksdb_cq import decode_offset, decode_unit
    from rmqtool.output.kinds_fields import kind_fields
    steps = Steps()
    tag, body = data[:1], data[1:]
    if tag == b"B":
        qdir = scratch / "bcq-store" / "batchconsumequeue" / "T" / "0"
        qdir.mkdir(parents=True, exist_ok=True)
        for old in qdir.iterdir():
            old.unlink()
        _write(qdir / f"{0:020d}", body)
        from rmqtool.io.store import QueueRef
        from rmqtool.io.consumequeue import read_batch_queue

        class _Store:
            def queue(self, topic, qid, batch=False):
                from rmqtool.io.segments import SegmentQueue
                return SegmentQueue.discover([qdir], "batchconsumequeue", None, BCQ_UNIT_SIZE)

        def bcq():
            n = sum(len(u) for _, _, u in read_batch_queue(_Store(), QueueRef("T", 0, qdir)))
            check(n <= len(body) // BCQ_UNIT_SIZE, "more units than the file holds")
        steps(bcq)
    elif tag in (b"R", b"O") and body:
        n = body[0]
        key, value = body[1:1 + n], body[1 + n:]
        for decode in (decode_unit, decode_offset):
            got = decode(key, value)
            check(isinstance(got, (str, tuple)), "a decoder returned neither a tuple nor a reason")
    else:
        props = cl.decode_properties(body)
        for kinds in (QueueKinds(True, True), QueueKinds(True, False), QueueKinds()):
            units = lmq_units(kinds, "T", 3, props)
            check(all(isinstance(q, int) and isinstance(o, int) for _, q, o in units), "light-queue unit fields")
        pos = batch_position(props, 9)
        check(pos is None or (isinstance(pos[0], int) and isinstance(pos[1], int)), "batch position")
        check(set(kind_fields(props)) == {"inner_num", "inner_base", "lmq_queues", "timer_out_ms"}, "kind fields")
    return steps.refused


# --- consume queue ---------------------------------------------------------------------------
def run_consumequeue(data: bytes, seed, scratch: Path) -> int:
    from rmqtool.io.consumequeue import read_units
    from rmqtool.ops.dump import _queue_rows
    from rmqtool.io.segments import SegmentQueue
    qdir = scratch / "consumequeue" / "T" / "0"
    qdir.mkdir(parents=True, exist_ok=True)
    for name in os.listdir(qdir):
        os.unlink(qdir / name)
    first = (len(data) % 3) * sd.REF_CQ_FILE_SIZE     # vary where the queue starts
    chunks = [data[i:i + sd.REF_CQ_FILE_SIZE] for i in range(0, max(len(data), 1), sd.REF_CQ_FILE_SIZE)]
    for k, chunk in enumerate(chunks):
        _write(qdir / f"{first + k * sd.REF_CQ_FILE_SIZE:020d}", chunk)
    steps = Steps()
    for nominal in (None, sd.REF_CQ_FILE_SIZE):
        queue = SegmentQueue.discover([qdir], "consumequeue", nominal, CQ_UNIT_SIZE)
        units = steps(read_units, "T", 0, queue)
        if units is not None:
            n = len(units.units)
            check(len(units.queue_offset) == n == len(units.position) == len(units.file_index), "ragged columns")
            check(bool((units.units["size"] > 0).all() and (units.units["commitlog_offset"] >= 0).all()),
                  "unit past the logical end returned")
            check(bool((np.diff(units.queue_offset) > 0).all()), "queue offsets not ascending")
            check(n == 0 or units.end_queue_offset > int(units.queue_offset[-1]), "end before last unit")
        steps(lambda: list(_queue_rows("T", 0, queue)))
    return steps.refused


# --- index ---------------------------------------------------------------------------------------
def run_index(data: bytes, seed, scratch: Path) -> int:
    from rmqtool.ops.dump import index_rows
    from rmqtool.io.indexfile import DEFAULT_GEOMETRY, IndexFileReader, IndexGeometry, resolve_geometry
    from rmqtool.ops.query.indexwalk import IndexSet
    d = scratch / "index"
    d.mkdir(exist_ok=True)
    path = d / "20240101000000000"
    _write(path, data)
    slots, entries = sd.REF_INDEX_SLOTS, sd.REF_INDEX_ENTRIES
    geometry = IndexGeometry(slots, entries)
    steps = Steps()
    guess = steps(resolve_geometry, [(path, len(data))])          # content-based inference
    if guess is not None:
        check(guess.hash_slots > 0 and guess.index_entries > 0, "non-positive inferred geometry")
        check(guess.file_size == len(data) or len(data) == 0 or guess == DEFAULT_GEOMETRY,
              "inferred geometry does not match the file size")

    def reader():
        with IndexFileReader(path, geometry) as r:
            r.header()
            r.slots()
            got = r.entries()
            check(len(got) <= entries, "more entries than the geometry holds")
    steps(reader)
    rows = steps(lambda: list(index_rows([path], geometry)))
    if rows:
        check(rows[0]["kind"] == "HEADER", "first index row is not the header")
        check(len(rows) <= entries, "more index rows than entries")
    hashes = {0, 1, 12345}
    for e in range(1, min(8, max((len(data) - entry_position(slots, 0)) // INDEX_ENTRY_SIZE, 0))):
        pos = entry_position(slots, e)
        hashes.add(abs(struct.unpack_from(">i", data, pos)[0]))
    iset = IndexSet([path], slots, entries)
    try:
        for h in sorted(hashes):
            warnings: list[str] = []
            hits = steps(iset.upstream_query, h, 64, 0, 1 << 62, warnings)
            check(hits is None or len(hits) <= 64, "upstream walk returned more than maxNum")
            cands = steps(iset.candidates, h, 0, 1 << 62)
            check(cands is None or len(cands) < entries, "protected walk returned more than the file holds")
    finally:
        iset.close()
    check(len(data) >= INDEX_HEADER_SIZE or not rows, "header row from a file shorter than a header")
    return steps.refused


# --- checkpoint -------------------------------------------------------------------------------
def run_checkpoint(data: bytes, seed, scratch: Path) -> int:
    from rmqtool.io.checkpoint import read_checkpoint
    from rmqtool.ops.dump import checkpoint_rows
    path = scratch / "checkpoint"
    _write(path, data)
    steps = Steps()
    values = steps(read_checkpoint, path)
    if values is not None:
        d = values.as_dict()
        check(d["file_size"] == len(data), "checkpoint size misreported")
        check(d["min_timestamp"] >= 0, "negative min timestamp")
    steps(lambda: list(checkpoint_rows(str(path), None)))
    return steps.refused


# --- properties codec ---------------------------------------------------------------------------
def run_properties(data: bytes, seed, scratch: Path) -> int:
    """decode_properties must never fail; the vectorized extractor must agree with it."""
    from rmqtool.records.scan import EXTRACTED_PROPERTIES, extract_properties
    props = cl.decode_properties(data)
    cl.split_keys(props.get(cl.PROPERTY_KEYS))
    # the blob split into up to three adjacent records, behind some padding
    pad = 7
    buf = np.frombuffer(bytes(pad) + data, dtype=np.uint8)
    cut = sorted({0, len(data) // 3, (2 * len(data)) // 3, len(data)})
    starts = np.array([pad + a for a, b in zip(cut, cut[1:])], dtype=np.int64)
    lens = np.array([b - a for a, b in zip(cut, cut[1:])], dtype=np.int64)
    if not len(starts):
        return 0
    lens = np.where(lens > 0, lens, -1)
    out = extract_properties(buf, starts, lens)
    reference = extract_properties(buf, starts, lens, core=None)       # the numpy path, if out was native
    check(all(out[k].tolist() == reference[k].tolist() for k in out), "native and numpy property spans differ")
    for r, (s, n) in enumerate(zip(starts.tolist(), lens.tolist())):
        want = cl.decode_properties(data[s - pad:s - pad + n]) if n > 0 else {}
        for name, key in EXTRACTED_PROPERTIES.items():
            ln = int(out[f"{name}_len"][r])
            got = None if ln < 0 else buf[int(out[f"{name}_start"][r]):][:ln].tobytes().decode("utf-8", "replace")
            check(got == want.get(key), f"extract_properties {key}={got!r} but decode_properties "
                                        f"{want.get(key)!r} (record {r})")
    # the KEYS values found split into tokens: the native split equals the numpy split and split_keys
    from rmqtool.broker.dispatch import _keys_tokens
    k_start, k_len = out["keys_start"], np.maximum(out["keys_len"], 0)
    native_tokens = [x.tolist() for x in _keys_tokens(buf, k_start, k_len)]
    numpy_tokens = [x.tolist() for x in _keys_tokens(buf, k_start, k_len, core=None)]
    check(native_tokens == numpy_tokens, "native and numpy KEYS tokens differ")
    rec, tok_start, tok_len, _ = native_tokens
    for r in range(len(starts)):
        got = [buf[a:a + n].tobytes().decode("utf-8", "replace") for q, a, n in zip(rec, tok_start, tok_len) if q == r]
        value = buf[int(k_start[r]):int(k_start[r]) + int(k_len[r])].tobytes().decode("utf-8", "replace")
        check(got == cl.split_keys(value) if k_len[r] else not got, f"KEYS tokens {got} != split_keys (record {r})")
    return 0


# --- JSONL input of `write` ----------------------------------------------------------------------
HOSTILE_VALUES = (None, -1, 0, 2 ** 31, 2 ** 63, -(2 ** 63) - 1, 10 ** 30, 1.5, True, "", "x" * 40_000,
                  "\x00", "../../x", "/etc/passwd", "é" * 70, [], {}, [1, 2], "zz", "!!!", "===",
                  "::1:99999999", "[::1]:-1", "1.2.3.4:", "256.0.0.1:1", {"KEYS": 5}, {"a\x01b": "c\x02"},
                  {"k": "v" * 40_000}, "QUJD", "4142", "MESSAGE", "BLANK")
JSONL_FIELDS = ("topic", "body", "body_encoding", "queue_id", "queue_offset", "sys_flag", "born_host",
                "store_host", "properties", "properties_raw", "keys", "tags", "uniq_key", "store_timestamp",
                "born_timestamp", "flag", "reconsume_times", "prepared_transaction_offset", "kind")


def mutate_jsonl(rng, seed, byte_mutator) -> bytes:
    """Half the time set fields of some rows to hostile values (valid JSON), else mutate bytes."""
    import json
    if rng.random() < 0.4:
        return byte_mutator.mutate(seed.data, seed.hints)
    rows = [json.loads(line) for line in seed.data.splitlines() if line.strip()]
    for _ in range(rng.randint(1, 4)):
        row = rng.choice(rows)
        if rng.random() < 0.15:
            row.pop(rng.choice(JSONL_FIELDS), None)
        else:
            row[rng.choice(JSONL_FIELDS)] = rng.choice(HOSTILE_VALUES)
    if rng.random() < 0.1:
        rows.append(rng.choice([[], 5, "row", None]))
    return b"".join(json.dumps(r, ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass") + b"\n"
                    for r in rows)


def run_jsonl(data: bytes, seed, scratch: Path) -> int:
    """Rows -> message fields -> record bytes for every input; a full `write` into a scratch
    store (small geometry) for one input in 16."""
    import shutil
    import zlib
    from rmqtool.cli.cmd_write import _rows
    from rmqtool.records.encode import encode
    from rmqtool.ops.writer import Geometry, UniqKeyGenerator, fields_from_row, group_batches, write_rows
    src = scratch / "rows.jsonl"
    _write(src, data)
    steps = Steps()

    def parse_and_encode():
        uniq = UniqKeyGenerator()
        for group in group_batches(_rows(str(src))):
            for where, row in group:
                raw = encode(fields_from_row(row, where, uniq, 1_700_000_000_000))
                check(struct.unpack_from(">i", raw)[0] == len(raw), "encoded TOTALSIZE != record length")
    steps(parse_and_encode)
    if zlib.crc32(data) % 16 == 0:
        root = scratch / "written"
        shutil.rmtree(root, ignore_errors=True)
        summary = steps(write_rows, root, _rows(str(src)), Geometry(1 << 16, 800, 61, 350))
        if summary is not None:
            check(summary.records >= 0, "negative record count")
            for p in root.rglob("*"):
                check(root in p.resolve().parents or p.resolve() == root, f"wrote outside the store: {p}")
    return steps.refused


# --- the simplified article layout (formats/simplified.py, rmqtool/simplified/) --------------------
#: values that mean something in this layout: the fields' size (224), the article's record for an
#: empty body (280), its first record length (338), pre-sizes, and the extremes of a long
SIMPLIFIED_VALUES = (0, 1, -1, 8, 56, 64, 100, 223, 224, 225, 279, 280, 281, 338, 4096, 409_600,
                     (1 << 31) - 1, 1 << 40, 1 << 62, (1 << 63) - 1, -(1 << 63))


def mutate_simplified(rng, seed, byte_mutator) -> bytes:
    """Byte mutations, then (a quarter of the time) layout-specific values in a few fields."""
    from .mutate import _pack
    data = byte_mutator.mutate(seed.data, seed.hints)
    r = rng.random()
    if r < 0.2:
        data = byte_mutator.mutate(data, seed.hints)
    elif r < 0.45 and seed.hints:
        buf = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            pos, width = rng.choice(seed.hints)
            if pos + width <= len(buf):
                value = rng.choice(SIMPLIFIED_VALUES + (len(buf), len(buf) - pos, pos, rng.choice(seed.hints)[0]))
                buf[pos:pos + width] = _pack(value, width)
        data = bytes(buf)
    return data


def _simplified_store(data: bytes, seed, scratch: Path, which: str) -> tuple[Path, Path | None]:
    """A store directory holding the mutated file ``which`` beside the seed's pristine other two
    (rewritten only when the seed changes), and for one input in 8 a directory holding only the
    mutated file (the missing-file and no-index paths)."""
    import zlib
    from formats import simplified as sf
    d = scratch / "simplified" / which
    d.mkdir(parents=True, exist_ok=True)
    files = seed.extra.get("files") or sd.simplified_stores()[0]["files"]
    origin = seed.origin or "default"
    marker = d / ".seed"
    if not marker.is_file() or marker.read_text() != origin:
        for name, content in zip(sf.FILE_NAMES, files):
            if name != which:
                _write(d / name, content)
        marker.write_text(origin)
    _write(d / which, data)
    alone = None
    if zlib.crc32(data) % 8 == 0:
        alone = scratch / "simplified" / f"{which}-alone"
        alone.mkdir(parents=True, exist_ok=True)
        _write(alone / which, data)
    return d, alone


def _simplified_ids(seed, extra=()) -> list[str]:
    ids = list(seed.extra.get("msg_ids") or sd.simplified_stores()[0]["msg_ids"])
    return list(dict.fromkeys(ids[:2] + ids[-1:] + [i for i in extra if i is not None] + ["no-such-msg-id"]))


def _json_rows(rows) -> None:
    """The CLI prints rows as JSON: everything returned must serialize."""
    import json
    json.dumps(rows, ensure_ascii=False)


def _check_simplified_verify(steps: Steps, store: Path, n_records: int | None = None) -> None:
    from rmqtool.simplified.verify import CHECKS, verify
    res = steps(verify, store, 1000)
    if res is None:
        return
    findings, summary = res
    for f in findings:
        check(f.check in CHECKS, f"undeclared check {f.check!r}")
        check(f.offset is None or f.offset >= 0, f"finding {f.check} at negative offset {f.offset}")
    check(summary["errors"] == sum(n for c, n in summary["findings"].items() if CHECKS[c][0] == "error"),
          "summary error count != findings")
    if n_records is not None and summary["records"] is not None:
        check(summary["records"] == n_records, f"verify counted {summary['records']} records, the walk {n_records}")
    _json_rows([f.as_dict() for f in findings] + [summary])


def _check_simplified_query(steps: Steps, store: Path, ids) -> None:
    from rmqtool.simplified.ops import query_msg_id
    for key in ids:
        res = steps(query_msg_id, store, key, "hex")
        if res is None:
            continue
        rows, notes = res
        check(all(r["msg_id"] == key for r in rows), f"query-key {key!r} returned another msgId")
        pos = [r["position"] for r in rows]
        check(pos == sorted(set(pos)), "query-key rows not unique and ascending")
        check(all(isinstance(n, str) for n in notes), "non-text note")
        _json_rows(rows)


def _check_locate_queue(steps: Steps, store: Path, queue_offsets, n_units: int | None) -> None:
    from rmqtool.simplified.ops import locate_queue_offset
    for q in sorted(set(queue_offsets)):
        res = steps(locate_queue_offset, store, q)
        if res is None:
            continue
        if n_units is not None:
            check(res["found"] == (q < n_units), f"locate --queue-offset {q}: found={res['found']} with "
                                                 f"{n_units} units")
        _json_rows(res)


def _simplified_cli(steps: Steps, store: Path, key: str) -> None:
    """The CLI functions with their JSON output (captured), for a sample of inputs."""
    import contextlib
    import io
    from rmqtool.cli import simplified_store as scli
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = steps(scli.verify, store, "json")
        check(code in (None, 0, 1), f"verify exit code {code}")
        code = steps(scli.query_key, store, key, "jsonl", "text")
        check(code in (None, 0, 1), f"query-key exit code {code}")


def _walk_simplified(path: Path, size: int, chunk: int | None):
    """Record starts and the end of one walk, with the walk's invariants checked."""
    from formats import simplified as sf
    from rmqtool.simplified.reader import END_CORRUPT, END_EOF, END_TORN, END_ZERO, RecordBatch, walk_commitlog
    starts, ends, last_end = [], [], 0
    for item in (walk_commitlog(path) if chunk is None else walk_commitlog(path, chunk)):
        if isinstance(item, RecordBatch):
            pos = item.position
            total = item.heads["msg_total_len"].astype(np.int64)
            body = item.heads["body_size"].astype(np.int64)
            check(len(pos) > 0, "empty batch yielded")
            check(int(pos[0]) == last_end, f"batch starts at {int(pos[0])}, the previous record ended at {last_end}")
            check(bool((pos[1:] == pos[:-1] + total[:-1]).all()), "records not contiguous")
            check(bool((total >= sf.RECORD_FIELDS_SIZE).all()), "record shorter than its fields")
            check(bool(((body >= 0) & (body + sf.RECORD_FIELDS_SIZE <= total)).all()), "body overflows its record")
            last_end = int(pos[-1] + total[-1])
            check(last_end <= size, "record past the end of the file")
            for i in sorted({0, len(item) - 1}):
                check(len(item.body(i)) == int(body[i]), "body shorter than bodySize")
            starts += pos.tolist()
        else:
            ends.append(item)
    check(len(ends) == 1, f"{len(ends)} ends for one walk")
    end = ends[0]
    check(end.position == last_end, f"end at {end.position}, the last record ended at {last_end}")
    check(end.kind in (END_ZERO, END_EOF, END_TORN, END_CORRUPT), f"unknown end kind {end.kind!r}")
    check(end.kind != END_EOF or end.position == size, "eof end before the end of the file")
    return starts, (end.kind, end.position)


def run_simplified_commitlog(data: bytes, seed, scratch: Path) -> int:
    """commitLog.txt: the walk (two window sizes agree), read_commitlog, dump commitlog (store and
    file), locate OFFSET and --queue-offset, query-key, verify."""
    import zlib
    from formats import simplified as sf
    from rmqtool.kernels.javahash import java_bytes_hash
    from rmqtool.simplified import ops
    from rmqtool.simplified.reader import read_commitlog
    store, alone = _simplified_store(data, seed, scratch, sf.COMMITLOG_NAME)
    path = store / sf.COMMITLOG_NAME
    size = len(data)
    crc = zlib.crc32(data)
    mode = ("text", "hex", "base64", "none")[crc % 4]
    steps = Steps()
    walked = steps(_walk_simplified, path, size, None)
    small = steps(_walk_simplified, path, size, 300 + crc % 700)      # records crossing windows
    if walked is not None and small is not None:
        check(walked == small, f"window size changes the walk: {walked[1]} vs {small[1]} "
                               f"({len(walked[0])} vs {len(small[0])} records)")
    starts = walked[0] if walked is not None else None
    rows = steps(lambda: list(ops.commitlog_rows(store, mode)))
    if rows is not None:
        msgs = [r for r in rows if r["kind"] == "MESSAGE"]
        check(all(r["kind"] in ("MESSAGE", "END") for r in rows), "unknown row kind")
        check(sum(r["kind"] == "END" for r in rows) <= 1 and all(r["kind"] == "MESSAGE" for r in rows[:-1]),
              "END row not last")
        if starts is not None:
            check([r["position"] for r in msgs] == starts, "dump rows != walked records")
        _json_rows(rows)
    lo = starts[len(starts) // 2] if starts else 0
    filtered = steps(lambda: list(ops.commitlog_rows(path, "none", lo, lo + 2000, "Topic-test")))
    if filtered is not None:
        check(all(lo <= r["position"] < lo + 2000 for r in filtered), "--from/--to-offset not applied")
    cl = steps(read_commitlog, path)
    if cl is not None:
        if starts is not None:
            check(cl.position.tolist() == starts, "read_commitlog != walk")
        if rows is not None and msgs:
            for i in sorted({0, len(msgs) // 2, len(msgs) - 1}):
                check(steps(cl.row, i, mode) in (None, msgs[i]), f"record {i} re-read differs from the walk")
        hashes = cl.msg_id_hashes()
        for i in range(min(len(cl), 40)):
            want = java_bytes_hash(cl.heads["msg_id"][i].tobytes().rstrip(b"\0"))
            check(int(hashes[i]) == want, f"vectorized msgId hash of record {i} != scalar")
        data_end = int(cl.record_end[-1]) if len(cl) else 0
        offs = {cl.end.position, crc % max(size, 1), data_end - 1}
        for off in sorted(o for o in offs if o >= 0):
            res = steps(ops.locate_offset, store, off)
            if res is None:
                continue
            if off < size:
                check(res["found"] == (off < data_end), f"locate {off}: found={res['found']}, data ends at {data_end}")
            if res["found"]:
                rec = res["record"]
                check(rec["start"] <= off < rec["start"] + rec["size"] and rec["start"] in set(cl.position.tolist()),
                      f"locate {off} named a record that does not hold it")
            _json_rows(res)
    _check_locate_queue(steps, store, (crc % 12,), None)
    first_id = None
    if cl is not None and len(cl):
        first_id = cl.msg_ids()[0]
    ids = _simplified_ids(seed, [first_id])[-3:]           # a seed's id, the mutated first id, an absent one
    _check_simplified_query(steps, store, ids)
    _check_simplified_verify(steps, store, None if cl is None else len(cl))
    if alone is not None:
        steps(lambda: _json_rows(list(ops.commitlog_rows(alone, "hex"))))
        _check_simplified_query(steps, alone, ids[:1])
        _check_simplified_verify(steps, alone, None if cl is None else len(cl))
    if crc % 32 == 1:
        _simplified_cli(steps, store, ids[0])
    return steps.refused


def run_simplified_consumequeue(data: bytes, seed, scratch: Path) -> int:
    """consumerQueue.txt: read_consumer_queue (two window sizes agree), dump consumequeue (store and
    file), locate --queue-offset, verify."""
    import zlib
    from formats import simplified as sf
    from rmqtool.simplified import ops
    from rmqtool.simplified.reader import read_consumer_queue
    store, alone = _simplified_store(data, seed, scratch, sf.CONSUMER_QUEUE_NAME)
    path = store / sf.CONSUMER_QUEUE_NAME
    whole = len(data) // sf.CQ_UNIT_SIZE
    steps = Steps()
    cq = steps(read_consumer_queue, path)
    n = None
    if cq is not None:
        n = len(cq)
        check(n <= whole, "more units than the file holds")
        if n:
            raw = np.ascontiguousarray(cq.units).view(np.uint8).reshape(n, sf.CQ_UNIT_SIZE)
            check(bool(raw.any(axis=1).all()), "an all-zero unit before the end")
        check(bool(((cq.stale_after_end > n) & (cq.stale_after_end < whole)).all()), "stale unit numbers out of range")
        check(len(cq.trailing) == len(data) % sf.CQ_UNIT_SIZE, "trailing bytes misreported")
        other = steps(read_consumer_queue, path, 3)
        if other is not None:
            check(other.units.tobytes() == cq.units.tobytes() and other.stale_after_end.tolist()
                  == cq.stale_after_end.tolist() and other.trailing == cq.trailing, "window size changes the units")
    for target in ((store, path) if zlib.crc32(data) % 2 else (store,)):
        rows = steps(lambda: list(ops.consumer_queue_rows(target)))
        if rows is not None:
            check(rows[-1]["kind"] == "END" and all(r["kind"] == "UNIT" for r in rows[:-1]), "END row not last")
            check([r["queue_offset"] for r in rows] == list(range(len(rows))), "queue offsets not 0, 1, 2, ...")
            check(n is None or len(rows) == n + 1, "dump rows != units")
            _json_rows(rows)
    qs = {0, 1, 5, zlib.crc32(data) % 64}
    if n is not None:
        qs |= {max(n - 1, 0), n, n + 1}
    _check_locate_queue(steps, store, qs, n)
    _check_simplified_verify(steps, store)
    if alone is not None:
        _check_locate_queue(steps, alone, (0, 1), n)
        _check_simplified_verify(steps, alone)
    return steps.refused


def run_simplified_index(data: bytes, seed, scratch: Path) -> int:
    """index.txt: read_index, dump index (store, file, --header-only, offset filters), query-key, verify."""
    import zlib
    from formats import simplified as sf
    from rmqtool.simplified import ops
    from rmqtool.simplified.reader import read_index
    store, alone = _simplified_store(data, seed, scratch, sf.INDEX_NAME)
    path = store / sf.INDEX_NAME
    steps = Steps()
    ix = steps(read_index, path)
    if ix is not None:
        check(len(data) >= sf.entry_position(0), "index read from a file shorter than header and slots")
        check(ix.capacity == sf.index_capacity(len(data)), "capacity misreported")
        check(len(ix) == min(max(ix.header["index_count"], 0), ix.capacity), "entries != min(indexCount, capacity)")
        check(len(ix.slots) == sf.HASH_SLOTS, "slot count")
        holds = ix.slot_holds()
        check(len(holds) == len(ix), "slot_holds length")
    rows = steps(lambda: list(ops.index_rows(store)))
    if rows is not None:
        check(rows[0]["kind"] == "HEADER" and all(r["kind"] == "ENTRY" for r in rows[1:]), "HEADER not first")
        check([r["entry"] for r in rows[1:]] == list(range(len(rows) - 1)), "entries not 0, 1, 2, ...")
        check(all(r["position"] + sf.INDEX_ENTRY_SIZE <= len(data) and 0 <= r["slot"] < sf.HASH_SLOTS
                  for r in rows[1:]), "entry outside the file or slot out of range")
        check(ix is None or len(rows) == len(ix) + 1, "dump rows != entries")
        _json_rows(rows)
    head = steps(lambda: list(ops.index_rows(path, header_only=True)))
    check(head is None or len(head) == 1, "--header-only printed entries")
    lo = zlib.crc32(data) % 4000
    part = steps(lambda: list(ops.index_rows(store, False, lo, lo + 1500)))
    if part is not None:
        check(all(lo <= r["phy_offset"] < lo + 1500 for r in part[1:]), "--from/--to-offset not applied")
    _check_simplified_query(steps, store, _simplified_ids(seed))
    _check_simplified_verify(steps, store)
    if alone is not None:
        steps(lambda: _json_rows(list(ops.index_rows(alone))))
        _check_simplified_verify(steps, alone)
    return steps.refused


SIMPLIFIED_JSONL_FIELDS = ("topic", "body", "body_encoding", "msg_id", "uniq_key", "transaction_id",
                           "queue_offset", "store_timestamp")
SIMPLIFIED_HOSTILE = HOSTILE_VALUES + (
    "\ud800", "a\udfff", "a\x00", "\x00", "id\x00\x00", "x" * 64, "x" * 65, "é" * 32, "é" * 33, "🙂" * 16,
    "🙂" * 17, (1 << 63) - 1, -(1 << 63), 1 << 63, 1 << 31, 1_700_000_000_000 + (1 << 31), "12", " 12 ",
    "1_000", "٣", "-0", "1e3", 1e300, float("nan"), "hex", "base64", "text", "zz", "QUJD\n", "0x10")


def mutate_simplified_jsonl(rng, seed, byte_mutator) -> bytes:
    """As mutate_jsonl, over the fields `write --layout simplified` reads; sometimes many rows."""
    import json
    if rng.random() < 0.35:
        return byte_mutator.mutate(seed.data, seed.hints)
    rows = [json.loads(line) for line in seed.data.splitlines() if line.strip()]
    if rng.random() < 0.25:         # valid variations: reordered, cut, repeated, optional fields dropped
        rng.shuffle(rows)
        rows = [dict(r) for r in rows[:rng.randint(1, len(rows))] * rng.choice((1, 1, 2, 5))]
        for row in rows:
            if rng.random() < 0.3:
                row.pop(rng.choice(("msg_id", "uniq_key", "transaction_id", "queue_offset", "store_timestamp")), None)
        return b"".join(json.dumps(r, ensure_ascii=False).encode("utf-8") + b"\n" for r in rows)
    for _ in range(rng.randint(1, 4)):
        row = rng.choice(rows)
        if rng.random() < 0.15:
            row.pop(rng.choice(SIMPLIFIED_JSONL_FIELDS), None)
        else:
            row[rng.choice(SIMPLIFIED_JSONL_FIELDS)] = rng.choice(SIMPLIFIED_HOSTILE)
    if rng.random() < 0.1:
        rows.append(rng.choice([[], 5, "row", None]))
    if rng.random() < 0.05:
        rows = rows * rng.choice((20, 30, 120))           # past the 204 units of consumerQueue.txt
    return b"".join(json.dumps(r, ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass") + b"\n"
                    for r in rows)


def run_simplified_jsonl(data: bytes, seed, scratch: Path) -> int:
    """`write --layout simplified --from FILE`: the CLI's row reader into the writer (in memory) for
    every input; for one input in 8 the files written to a directory, read back and verified (what
    the writer accepted must read back as written and verify without errors)."""
    import shutil
    import zlib
    from formats import simplified as sf
    from rmqtool.cli.cmd_write import _rows
    from rmqtool.simplified import ops
    from rmqtool.simplified.verify import verify
    from rmqtool.simplified.writer import build, write_store
    src = scratch / "simplified-rows.jsonl"
    _write(src, data)

    def now():
        return 1_700_000_000_000
    steps = Steps()
    built = steps(lambda: build((row for _, row in _rows(str(src))), now_ms=now))
    if built is None:
        return steps.refused
    commitlog, cq, index, summary = built
    check((len(commitlog), len(cq), len(index)) == (sf.COMMITLOG_FILE_SIZE, sf.CONSUMER_QUEUE_FILE_SIZE,
                                                     sf.INDEX_FILE_SIZE), "files not pre-sized")
    at = 0
    for r in summary:
        check(r["position"] == at and r["size"] == sf.article_total_len(r["body_size"]), "records not back to back")
        at += r["size"]
    if zlib.crc32(data) % 8 == 0:
        out = scratch / "simplified-written"
        shutil.rmtree(out, ignore_errors=True)
        written = steps(write_store, out, (row for _, row in _rows(str(src))), force=True, now_ms=now)
        if written is not None:
            # (msgId and transactionId default to random UUIDs: only the queue's bytes are fixed)
            check((out / sf.CONSUMER_QUEUE_NAME).read_bytes() == cq, "write_store wrote another queue than build")
            back = [r for r in ops.commitlog_rows(out, "hex") if r["kind"] == "MESSAGE"]
            check([(r["position"], r["msg_id"], r["topic"], r["queue_offset"], r["body_size"]) for r in back]
                  == [(r["position"], r["msg_id"], r["topic"], r["queue_offset"], r["body_size"]) for r in written],
                  "written records do not read back as written")
            findings, totals = verify(out)
            check(totals["errors"] == 0, "verify finds errors in what the writer wrote: "
                                         + "; ".join(f"{f.check}: {f.message}" for f in findings[:3]))
            for p in out.rglob("*"):
                check(p.parent == out and p.name in sf.FILE_NAMES, f"unexpected file written: {p}")
    return steps.refused


# --- native core -------------------------------------------------------------------------------
def _both_paths(fn):
    """fn(core) with the native core and with the numpy path: ("ok", value) or ("refused", message)."""
    from rmqtool.kernels import native
    out = []
    for core in (native.core, None):
        try:
            out.append(("ok", fn(core)))
        except ValueError as exc:
            out.append(("refused", str(exc)))
    return out


def _check_index_entries(data: bytes, rng) -> None:
    """putKey's entries from the input's bytes read as key hashes, old slot values and timestamps
    (any values, as a damaged IndexFile or CommitLog holds): the native core equals numpy; an
    output of the wrong size is refused before the slot table is touched."""
    from formats.indexfile import INDEX_HEADER_DTYPE
    from rmqtool.broker.dispatch import _index_entry_layout, append_index_keys
    from rmqtool.kernels import native
    words = np.frombuffer(data[:len(data) // 4 * 4], ">i4")
    n_slots = rng.randrange(1, 9)
    slots_old, hashes = words[:n_slots], words[n_slots:n_slots + 64].astype(rng.choice([np.int32, np.int64]))
    count = rng.choice([0, 1, rng.randrange(0, 1 << 20)])
    begin = rng.choice([0, -1, 1_700_000_000_000, int(words[0]) << 20 if len(words) else 7])
    phy = np.arange(len(hashes), dtype=np.int64) * 97
    ts = 1_700_000_000_000 + np.arange(len(hashes), dtype=np.int64) * 333
    if rng.random() < 0.3:              # timestamps from the input: any value, differences that wrap
        ts = (hashes.astype(np.int64) << rng.randrange(0, 40)) * 1000
    results = []
    for core in (native.core, None):
        header = np.zeros(1, INDEX_HEADER_DTYPE)
        header["index_count"] = count
        header["begin_timestamp"] = begin
        slots = np.zeros(n_slots, np.int32)
        slots[:len(slots_old)] = slots_old
        new = append_index_keys(header, slots, (1 << 20) + 128, hashes, phy, ts, core=core)
        results.append((new.tobytes(), slots.tobytes(), header.tobytes()))
    check(results[0] == results[1], "index entries differ between the native core and numpy")
    if len(hashes):
        layout = _index_entry_layout()
        table = np.zeros(n_slots, np.int32)
        one = np.zeros(1, np.int64)
        try:
            native.core.index_entries(hashes[:1], one, one, table, 1, 0, layout,
                                      np.zeros(int(layout[0]) + rng.choice([-1, 1]), np.uint8))
            check(False, "index_entries took an output of the wrong size")
        except ValueError:
            check(not table.any(), "index_entries wrote before refusing its output")


def run_native(data: bytes, seed, scratch: Path) -> int:
    """The native core against the numpy path: on arbitrary spans of the input (inside, empty,
    straddling or outside it) and on every batch of the input walked as a CommitLog file, equal
    answers or the same refusal; the native loops never read outside the buffer (CI runs this
    target's tests under AddressSanitizer)."""
    import random
    import zlib
    from rmqtool.kernels import javahash, native
    from rmqtool.kernels.crc import crc32_spans
    from rmqtool.records.scan import RecordBatch, walk_store
    if native.core is None:         # nothing to compare; where the core is required that is a failure
        if os.environ.get("RMQTOOL_REQUIRE_NATIVE") == "1":
            raise AssertionError(f"RMQTOOL_REQUIRE_NATIVE=1 but the native core is not in use: {native.path}")
        return 0
    buf = np.frombuffer(data, np.uint8)
    size = len(data)
    rng = random.Random(zlib.crc32(data))
    n = rng.randrange(0, 48)
    starts = np.array([rng.randrange(-2, size + 3) for _ in range(n)], np.int64)
    lengths = np.array([rng.choice([0, 1, rng.randrange(0, 64), rng.randrange(-2, size + 3)]) for _ in range(n)],
                       np.int64)
    native_crc, numpy_crc = _both_paths(lambda core: crc32_spans(buf, starts, lengths, core=core).tolist())
    check(native_crc == numpy_crc, f"crc32_spans differ: {native_crc} != {numpy_crc}")
    inside = (starts >= 0) & (lengths >= 0) & (starts <= size - lengths)
    check((native_crc[0] == "ok") == bool(inside.all()), "crc32_spans refusal != a span outside the buffer")
    hashes = np.empty(n, np.uint32)
    high = np.empty(n, np.uint8)
    try:
        native.core.java_hash_spans(buf, starts, lengths, hashes, high)
        check(bool(inside.all()), "java_hash_spans took a span outside the buffer")
    except ValueError:
        check(not inside.all(), "java_hash_spans refused spans inside the buffer")
    short = inside & (lengths <= 256)        # long spans: the numpy reference is slow (a pow per byte)
    s, ln = starts[short], lengths[short]
    a, b = _both_paths(lambda core: [x.tolist() for x in javahash.span_hashes(buf, s, ln, core=core)])
    check(a == b, "span_hashes differ between the native core and numpy")
    _check_index_entries(data, rng)
    # the chain of whole MESSAGE records from the start, up to a random limit
    from rmqtool.records.scan import _message_run
    limit = rng.choice([size, rng.randrange(-1, size + 2)])
    (_, a), (_, b) = _both_paths(lambda core: [x.tolist() if hasattr(x, "tolist") else x
                                               for x in _message_run(data, limit, core=core)])
    check(a == b, f"message_run differs: native {a} numpy {b}")
    # the same bytes as a DLedger data window: entries taken in C, then judged by the loop
    from rmqtool.records.scan import _walk_entries
    base = rng.choice([0, 1, rng.randrange(0, 1 << 20)])
    file_size = base + size + rng.randrange(0, 9)

    def entries(core):
        starts, stop, resume = _walk_entries(data, base, 0, file_size, base + limit, core=core)
        return list(starts), stop and vars(stop), resume
    (_, a), (_, b) = _both_paths(entries)
    check(a == b, f"entry walk differs: native {a} scalar {b}")
    # the same bytes walked as a CommitLog file: body CRCs and topic hashes of every batch
    _, store = _one_file_store(scratch / "native", seed, data)
    steps = Steps()

    def walk():
        for item in walk_store(store, check_crc=False):
            if isinstance(item, RecordBatch):
                bs, bl = item.body_start, np.maximum(item.body_len, 0)
                x, y = _both_paths(lambda core: crc32_spans(item.buf, bs, bl, core=core).tolist())
                check(x == y and x[0] == "ok", "body CRCs differ between the native core and numpy")
                x, y = _both_paths(lambda core: [v.tolist() for v in javahash.span_hashes(
                    item.buf, item.topic_start, item.topic_len, core=core)])
                check(x == y and x[0] == "ok", "topic hashes differ between the native core and numpy")
                _check_batch_kernels(item)
    steps(walk)
    # the file scanned by the native window scan (one pass, read piece by piece) and by the reference
    path = store.commitlog.files[0].path
    chunk = rng.choice([1 << 16, rng.randrange(64, max(size, 65) + 64)])
    piece = rng.choice([None, rng.randrange(1, 4096)])
    lo = rng.choice([0, 0, rng.randrange(0, size + 1)])
    check_crc, crc_column = rng.choice(((False, False), (True, False), (False, True)))
    (_, a), (_, b) = _both_paths(lambda core: _scanned(path, seed.base, core, chunk_size=chunk, lo=lo,
                                                       piece_size=piece, check_crc=check_crc, crc_column=crc_column))
    check(a == b, f"native window scan differs from the reference (check_crc={check_crc}, crc_column={crc_column})")
    return steps.refused


def _scanned(path, base: int, core, **kwargs):
    from rmqtool.records.scan import FileScan
    scan = FileScan(path, base, core=core, **kwargs)
    batches = [{k: (str(v.dtype), v.tolist()) for k, v in batch.columns.items()} for batch in scan]
    return batches, vars(scan.end)


def _check_batch_kernels(batch) -> None:
    """Topic grouping and index keys of one batch: the native loops against numpy."""
    from rmqtool.broker.dispatch import _topic_groups, record_index_keys
    from rmqtool.kernels import javahash
    t_len = np.maximum(batch.topic_len, 0)
    t_hash, _ = javahash.span_hashes(batch.buf, batch.topic_start, t_len)
    x, y = _both_paths(lambda core: [v.tolist() if hasattr(v, "tolist") else v
                                     for v in _topic_groups(batch.buf, batch.topic_start, t_len, t_hash, core=core)])
    check(x == y, "topic groups differ between the native core and numpy")
    x, y = _both_paths(lambda core: [v.tolist() for v in record_index_keys(batch, core=core)])
    check(x == y, "index keys differ between the native core and numpy")


def _dispatched(batch, config, core):
    """``dispatch_batch`` of one batch as plain values (every field, dtypes included)."""
    import dataclasses
    from rmqtool.broker.dispatch import dispatch_batch
    d = dispatch_batch(batch, config, core=core)
    return [(str(v.dtype), v.tolist()) if isinstance(v, np.ndarray) else v
            for v in (getattr(d, f.name) for f in dataclasses.fields(d))]


def run_dispatch(data: bytes, seed, scratch: Path) -> int:
    """The one-loop native dispatch (``core.dispatch_columns``) against the numpy formulation: every
    batch of the input walked as a CommitLog file dispatched both ways (the scan's known hashes or
    none, index on or off, delay levels of any length), equal in every field; then the loop's
    columns with spans moved anywhere (inside, straddling or outside the buffer): the same answer as
    numpy for spans inside, a ValueError naming the record for a span outside, never a read there."""
    import random
    import zlib
    from rmqtool.broker.delay import DEFAULT_LEVELS_MS
    from rmqtool.broker.dispatch import DispatchConfig, RecordColumns
    from rmqtool.kernels import native
    from rmqtool.records.scan import RecordBatch, walk_store
    if native.core is None:
        if os.environ.get("RMQTOOL_REQUIRE_NATIVE") == "1":
            raise AssertionError(f"RMQTOOL_REQUIRE_NATIVE=1 but the native core is not in use: {native.path}")
        return 0
    rng = random.Random(zlib.crc32(data) ^ 0x5EED)
    _, store = _one_file_store(scratch / "dispatch", seed, data)
    steps = Steps()
    names = ("phy_offset", "size", "store_timestamp", "sys_flag", "queue_id", "queue_offset", "topic_start",
             "topic_len", "tags_start", "tags_len", "keys_start", "keys_len", "uniq_start", "uniq_len",
             "delay_start", "delay_len")

    def walk():
        for item in walk_store(store, check_crc=False):
            if not isinstance(item, RecordBatch):
                continue
            config = DispatchConfig(delay_levels_ms=list(DEFAULT_LEVELS_MS)[:rng.randrange(0, 20)],
                                    index_enabled=rng.random() < 0.8)
            batch = item
            if rng.random() < 0.3:               # no known hashes: the loop hashes the spans itself
                batch = RecordColumns(buf=item.buf, **{k: np.asarray(getattr(item, k)) for k in names})
            x, y = _both_paths(lambda core: _dispatched(batch, config, core))
            check(x == y, f"dispatch differs between the native core and numpy: {x[0]} / {y[0]}")
            # spans moved: inside the buffer both paths answer alike; outside, the loop refuses
            cols = {k: np.array(getattr(item, k), np.int64) for k in names}
            size = len(item.buf)
            for _ in range(rng.randrange(1, 4)):
                if not len(cols["size"]):
                    break
                row = rng.randrange(len(cols["size"]))
                part = rng.choice(("topic", "tags", "keys", "uniq"))
                cols[f"{part}_start"][row] = rng.choice([-1, 0, size, size + 1, rng.randrange(0, size + 1)])
                cols[f"{part}_len"][row] = rng.choice([-1, 0, 1, rng.randrange(0, 64), size, size + 1])
            moved = RecordColumns(buf=item.buf, **cols)
            try:
                got = _dispatched(moved, config, native.core)
            except ValueError as exc:
                check("outside" in str(exc), f"dispatch refused with {exc}")
                continue
            except IndexError:                  # the reference's own gathers fail on such spans too
                continue
            try:
                want = _dispatched(moved, config, None)
            except (ValueError, IndexError):
                continue                         # the reference refuses spans the loop never reads
            check(got == want, "dispatch of moved spans differs between the native core and numpy")
    steps(walk)
    return steps.refused


TARGETS = {
    "commitlog": Target("commitlog", sd.commitlog_seeds, run_commitlog),
    "native": Target("native", sd.commitlog_seeds, run_native),
    "dispatch": Target("dispatch", sd.commitlog_seeds, run_dispatch),
    "dledger": Target("dledger", sd.dledger_seeds, run_dledger),
    "timer": Target("timer", sd.timer_seeds, run_timer),
    "kinds": Target("kinds", sd.kinds_seeds, run_kinds),
    "consumequeue": Target("consumequeue", sd.consumequeue_seeds, run_consumequeue),
    "index": Target("index", sd.index_seeds, run_index),
    "checkpoint": Target("checkpoint", sd.checkpoint_seeds, run_checkpoint),
    "properties": Target("properties", sd.properties_seeds, run_properties),
    "jsonl": Target("jsonl", sd.jsonl_seeds, run_jsonl, mutate_jsonl),
    "simplified-commitlog": Target("simplified-commitlog", sd.simplified_commitlog_seeds, run_simplified_commitlog,
                                   mutate_simplified),
    "simplified-consumequeue": Target("simplified-consumequeue", sd.simplified_consumequeue_seeds,
                                      run_simplified_consumequeue, mutate_simplified),
    "simplified-index": Target("simplified-index", sd.simplified_index_seeds, run_simplified_index,
                               mutate_simplified),
    "simplified-jsonl": Target("simplified-jsonl", sd.simplified_jsonl_seeds, run_simplified_jsonl,
                               mutate_simplified_jsonl),
}
