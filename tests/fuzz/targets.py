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


def run_commitlog(data: bytes, seed, scratch: Path) -> int:
    from rmqtool.dispatch import dispatch_batch
    from rmqtool.scan import RecordBatch, find_record_start, walk_store
    from rmqtool.segments import Segment, SegmentQueue
    d = scratch / "commitlog"
    d.mkdir(exist_ok=True)
    path = d / f"{seed.base:020d}"
    _write(path, data)
    size = len(data)
    store = _OneFileStore(SegmentQueue("commitlog", [Segment(path, seed.base, size)], max(size, 1)))
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
                    rec = item.record(i, body="text")
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


# --- consume queue ---------------------------------------------------------------------------
def run_consumequeue(data: bytes, seed, scratch: Path) -> int:
    from rmqtool.consumequeue import read_units
    from rmqtool.dump import _queue_rows
    from rmqtool.segments import SegmentQueue
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
    from rmqtool.dump import index_rows
    from rmqtool.indexfile import DEFAULT_GEOMETRY, IndexFileReader, IndexGeometry, resolve_geometry
    from rmqtool.query.indexwalk import IndexSet
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
    from rmqtool.checkpoint import read_checkpoint
    from rmqtool.dump import checkpoint_rows
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
    from rmqtool.scan import EXTRACTED_PROPERTIES, extract_properties
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
    for r, (s, n) in enumerate(zip(starts.tolist(), lens.tolist())):
        want = cl.decode_properties(data[s - pad:s - pad + n]) if n > 0 else {}
        for name, key in EXTRACTED_PROPERTIES.items():
            ln = int(out[f"{name}_len"][r])
            got = None if ln < 0 else buf[int(out[f"{name}_start"][r]):][:ln].tobytes().decode("utf-8", "replace")
            check(got == want.get(key), f"extract_properties {key}={got!r} but decode_properties "
                                        f"{want.get(key)!r} (record {r})")
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
    from rmqtool.encode import encode
    from rmqtool.writer import Geometry, UniqKeyGenerator, fields_from_row, group_batches, write_rows
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


TARGETS = {
    "commitlog": Target("commitlog", sd.commitlog_seeds, run_commitlog),
    "consumequeue": Target("consumequeue", sd.consumequeue_seeds, run_consumequeue),
    "index": Target("index", sd.index_seeds, run_index),
    "checkpoint": Target("checkpoint", sd.checkpoint_seeds, run_checkpoint),
    "properties": Target("properties", sd.properties_seeds, run_properties),
    "jsonl": Target("jsonl", sd.jsonl_seeds, run_jsonl, mutate_jsonl),
}
