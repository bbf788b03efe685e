"""ConsumeQueueExt (4.x enableConsumeQueueExt, docs/format-cq-ext.md): the unit layout and address
rules, the reader, info/dump/verify on fixtures/cq-ext.tar.gz, write --cq-ext, and rebuild's refusal."""
from __future__ import annotations

import json
import struct
import tarfile
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from conftest import run_cli
from formats.consumequeue_ext import (CqExtUnitHeader, EXT_ADDRESS_MAX, EXT_END_BLANK_LENGTH, EXT_HEADER_OFFSETS,
                                      EXT_UNIT_MIN_SIZE, LONG_MIN, ext_address, ext_offset, is_ext_address)
from rmqtool.io.consumequeue_ext import ExtProblem, ExtQueue, parse_unit

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "cq-ext.tar.gz"
CQ_TAGS_AT = 12


@pytest.fixture
def ext_store(tmp_path) -> Path:
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / "cq-ext"


def _jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _findings(root, *extra) -> list[dict]:
    r = run_cli("verify", root, "-f", "jsonl", *extra)
    return [row for row in _jsonl(r.out) if row.get("type") == "finding"]


def _cq_units(root: Path, topic: str, qid: int) -> list[dict]:
    r = run_cli("dump", "consumequeue", root, "--topic", topic, "--queue", qid, "-f", "jsonl")
    assert r.code == 0, r.err
    return [u for u in _jsonl(r.out) if u["kind"] == "UNIT"]


# --- layout and address rules ------------------------------------------------------------------
def test_unit_layout_round_trip():
    raw = CqExtUnitHeader.build({"size": 22, "tags_code": -5, "store_timestamp": 1717200000123, "bitmap_size": 2})
    assert len(raw) == EXT_UNIT_MIN_SIZE == 20
    assert EXT_HEADER_OFFSETS == {"size": 0, "tags_code": 2, "store_timestamp": 10, "bitmap_size": 18}
    assert raw == struct.pack(">hqqh", 22, -5, 1717200000123, 2)
    u = parse_unit(raw + b"\x81\x02", "f", 40, 1064)
    assert (u.size, u.tags_code, u.store_timestamp, u.bitmap_size, u.bitmap) == (22, -5, 1717200000123, 2, b"\x81\x02")
    assert (u.path, u.position, u.offset) == ("f", 40, 1064)
    assert parse_unit(struct.pack(">h", -1) + bytes(30)) is None      # fullFillToEnd's end mark
    assert parse_unit(bytes(32)) is None                               # never written
    with pytest.raises(ExtProblem):
        parse_unit(struct.pack(">hqqh", 25, 0, 0, 2) + b"ab")          # size != 20 + bitmap size
    with pytest.raises(ExtProblem):
        parse_unit(struct.pack(">hqqh", 22, 0, 0, 2) + b"a")           # cut by the end of the file


def test_address_rules():
    assert EXT_ADDRESS_MAX == -2147483649 and LONG_MIN == -(1 << 63)
    assert is_ext_address(EXT_ADDRESS_MAX) and not is_ext_address(EXT_ADDRESS_MAX + 1)
    assert not is_ext_address(-(1 << 31))            # the smallest TAGS hash is never an address
    assert ext_address(0) == LONG_MIN and ext_offset(LONG_MIN) == 0
    assert ext_offset(ext_address(50331648 + 20)) == 50331668


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80))
def test_unit_parser_never_fails_otherwise(data):
    """Any bytes: a unit whose size agrees with its bitmap, the end (None), or ExtProblem."""
    try:
        u = parse_unit(data)
    except ExtProblem:
        return
    if u is not None:
        assert u.consistent and u.size <= len(data) and len(u.bitmap) == u.bitmap_size


@settings(max_examples=200, deadline=None)
@given(st.integers(-(1 << 63), (1 << 63) - 1), st.integers(-(1 << 63), (1 << 63) - 1), st.binary(max_size=40))
def test_unit_round_trip(tags, ts, bitmap):
    raw = CqExtUnitHeader.build({"size": 20 + len(bitmap), "tags_code": tags, "store_timestamp": ts,
                                 "bitmap_size": len(bitmap)}) + bitmap
    u = parse_unit(raw + b"\xff\xff")
    assert (u.size, u.tags_code, u.store_timestamp, u.bitmap) == (20 + len(bitmap), tags, ts, bitmap)


# --- the writer against the upstream rules ---------------------------------------------------------
def test_ext_builder_follows_put(tmp_path):
    """ConsumeQueueExt.put: units back to back; a unit that does not fit in size - pos - 4 ends the
    file with short -1 at the write position and goes to the next file (named base + size); the
    address is file base + position + Long.MIN_VALUE."""
    from rmqtool.broker.cqbuild import ExtBuilder
    b = ExtBuilder(64, tmp_path)
    addrs = [b.put("T", 0, 100 + k, 1000 + k) for k in range(4)]
    assert [ext_offset(a) for a in addrs] == [0, 20, 40, 64]
    first = (tmp_path / "T" / "0" / f"{0:020d}").read_bytes()
    assert len(first) == 64
    assert first[60:62] == b"\xff\xff" and first[62:] == b"\0\0"
    assert struct.unpack_from(">hqqh", first, 20) == (20, 101, 1001, 0)
    second = (tmp_path / "T" / "0" / f"{64:020d}").read_bytes()
    assert struct.unpack_from(">hqqh", second, 0) == (20, 103, 1003, 0)
    # a bitmap: size 20 + its bytes; a unit larger than a short fails (the CQ unit keeps its tagsCode)
    a = b.put("T", 0, 7, 8, b"\x01\x02")
    assert ext_offset(a) == 84 and struct.unpack_from(">h", (tmp_path / "T" / "0" / f"{64:020d}").read_bytes(), 20)[0] == 22
    assert b.put("T", 0, 7, 8, bytes(0x8000)) is None
    assert EXT_END_BLANK_LENGTH == 4


def test_written_store_matches_rules(ext_store):
    """Every CQ unit of the fixture holds an address whose ext unit carries the record's dispatcher
    tagsCode (a delayed message's deliver time included) and store time."""
    r = run_cli("dump", "commitlog", ext_store, "-f", "jsonl", "--body", "none")
    records = {row["phy_offset"]: row for row in _jsonl(r.out) if row.get("kind") == "MESSAGE"}
    r = run_cli("dump", "consumequeue", ext_store, "-f", "jsonl")
    units = [u for u in _jsonl(r.out) if u["kind"] == "UNIT"]
    assert len(units) > 200
    assert all(is_ext_address(u["ext_address"]) and u.get("ext_problem") is None for u in units)
    schedule = [u for u in units if u["topic"] == "SCHEDULE_TOPIC_XXXX"]
    assert schedule
    for u in schedule:             # tagsCode = deliver time, store time + the level's delay
        assert u["tags_code"] > records[u["commitlog_offset"]]["store_timestamp"]
    for u in units:
        assert u["store_timestamp"] == records[u["commitlog_offset"]]["store_timestamp"]
        assert u["filter_bitmap"] == ""


# --- info, dump, verify on the fixture ----------------------------------------------------------
def test_info_shows_ext(ext_store):
    r = run_cli("info", ext_store, "-f", "json")
    assert r.code == 0, r.err
    info = json.loads(r.out)
    info = info[0] if isinstance(info, list) else info
    x = info["consumequeue_ext"]
    assert x["file_size"] == 256 and x["queues"] == 43 and x["files"] >= 43
    assert "consumequeue_ext:" in run_cli("info", ext_store).err          # the text: stderr when piped


def test_dump_consumequeue_ext_lists_units(ext_store):
    r = run_cli("dump", "consumequeue-ext", ext_store, "--topic", "MixedTopic", "--queue", "0", "-f", "jsonl")
    assert r.code == 0, r.err
    rows = _jsonl(r.out)
    units = [u for u in rows if u["kind"] == "EXT_UNIT"]
    ends = [u for u in rows if u["kind"] == "END"]
    assert len(units) == 20 and len(ends) == 2          # 12 units fit a 256-byte file: two files
    assert ends[0]["position"] == 240
    assert [u["ext_offset"] for u in units] == [k * 20 for k in range(12)] + [256 + k * 20 for k in range(8)]
    assert all(u["ext_address"] == ext_address(u["ext_offset"]) for u in units)
    cq = _cq_units(ext_store, "MixedTopic", 0)
    assert [u["ext_address"] for u in cq] == [u["ext_address"] for u in units]
    assert [u["tags_code"] for u in cq] == [u["tags_code"] for u in units]
    for fmt in ("json", "csv", "tsv", "table"):
        assert run_cli("dump", "consumequeue-ext", ext_store, "-f", fmt, "--limit", "3").code == 0
    assert run_cli("dump", "consumequeue-ext", FIXTURE.parent / "reference" / "basic").code == 2


def test_dump_one_cq_file_resolves(ext_store):
    f = ext_store / "consumequeue" / "MixedTopic" / "0" / f"{0:020d}"
    rows = _jsonl(run_cli("dump", "consumequeue", f, "-f", "jsonl").out)
    assert rows[0]["ext_file"].endswith(f"consumequeue_ext/MixedTopic/0/{0:020d}") and rows[0]["ext_position"] == 0


def test_verify_clean(ext_store):
    r = run_cli("verify", ext_store, "--level", "deep")
    assert r.code == 0, r.out + r.err


def _flip(path: Path, pos: int, xor: int) -> None:
    b = bytearray(path.read_bytes())
    b[pos] ^= xor
    path.write_bytes(bytes(b))


@pytest.mark.parametrize("level", ["shallow", "deep"])
def test_flipped_address_found_at_cq_file_offset(ext_store, level):
    cq = ext_store / "consumequeue" / "MixedTopic" / "1" / f"{0:020d}"
    at = 3 * 20 + CQ_TAGS_AT
    _flip(cq, at + 7, 0x14)                 # unit 3's address now names another unit's start (or none)
    found = [f for f in _findings(ext_store, "--level", level) if f["check"].startswith("cqext.")]
    assert [(f["check"], f["file"], f["offset"]) for f in found] == [("cqext.address", str(cq), at)]


def test_address_inside_a_unit_and_past_end(ext_store):
    cq = ext_store / "consumequeue" / "MixedTopic" / "2" / f"{0:020d}"
    _flip(cq, 1 * 20 + CQ_TAGS_AT + 7, 0x02)             # +2 bytes: inside a unit
    _flip(cq, 2 * 20 + CQ_TAGS_AT + 6, 0x10)             # +4096: in no file
    found = {(f["check"], f["offset"]) for f in _findings(ext_store) if f["check"].startswith("cqext.")}
    assert ("cqext.address", 32) in found and ("cqext.address", 52) in found


def test_ext_unit_tags_mismatch_deep(ext_store):
    ext = ext_store / "consumequeue_ext" / "MixedTopic" / "3" / f"{0:020d}"
    _flip(ext, 4 * 20 + EXT_HEADER_OFFSETS["tags_code"] + 7, 0x01)
    _flip(ext, 5 * 20 + EXT_HEADER_OFFSETS["store_timestamp"] + 7, 0x01)
    found = [f for f in _findings(ext_store, "--level", "deep") if f["check"].startswith("cqext.")]
    cq = str(ext_store / "consumequeue" / "MixedTopic" / "3" / f"{0:020d}")
    assert [(f["check"], f["file"], f["offset"]) for f in found] == [
        ("cqext.unit-record", cq, 4 * 20 + CQ_TAGS_AT), ("cqext.unit-record", cq, 5 * 20 + CQ_TAGS_AT)]
    assert "tagsCode" in found[0]["message"] and "store time" in found[1]["message"]
    assert not [f for f in _findings(ext_store) if f["check"].startswith("cqext.")]   # shallow: addresses fine


def test_bad_ext_unit_size(ext_store):
    ext = ext_store / "consumequeue_ext" / "MixedTopic" / "0" / f"{256:020d}"
    _flip(ext, 2 * 20 + 1, 0x03)                          # size 20 -> 23, bitmap size still 0
    found = {(f["check"], f["file"], f["offset"]) for f in _findings(ext_store)}
    assert ("cqext.unit-size", str(ext), 40) in found
    r = run_cli("dump", "consumequeue-ext", ext_store, "--topic", "MixedTopic", "--queue", "0")
    assert r.code == 1 and f"damaged: {ext}@40: " in r.err           # a finding: the walk goes on


def test_missing_ext_files(ext_store):
    import shutil
    shutil.rmtree(ext_store / "consumequeue_ext" / "MixedTopic" / "17")
    found = [f for f in _findings(ext_store) if f["check"] == "cqext.address"]
    assert len(found) == 1 and found[0]["file"].endswith("consumequeue/MixedTopic/17/" + f"{0:020d}")


# --- write into an ext store, rebuild refusal ----------------------------------------------------
def test_write_appends_to_ext_store(ext_store):
    before = {u["ext_address"] for u in _cq_units(ext_store, "MixedTopic", 0)}
    row = {"topic": "MixedTopic", "queue_id": 0, "body": "aGVsbG8=", "properties": {"TAGS": "TagZ"}}
    r = run_cli("write", ext_store, "--from", "-", "-f", "json", stdin=json.dumps(row) + "\n")
    assert r.code == 0, r.err
    units = _cq_units(ext_store, "MixedTopic", 0)
    assert len(units) == 21 and units[-1]["tags_code"] == 2598944     # "TagZ".hashCode()
    assert units[-1]["ext_address"] == ext_address(256 + 8 * 20) and units[-1]["ext_address"] not in before
    assert run_cli("verify", ext_store, "--level", "deep").code == 0


def _tree(d: Path) -> dict:
    return {p.relative_to(d): p.read_bytes() for p in d.rglob("*") if p.is_file()}


def test_rebuild_all_output_is_byte_identical(ext_store, tmp_path):
    r = run_cli("rebuild", "all", ext_store, "--output", tmp_path / "out", "-f", "json")
    assert r.code == 0, r.err
    assert _tree(tmp_path / "out" / "consumequeue") == _tree(ext_store / "consumequeue")
    assert _tree(tmp_path / "out" / "consumequeue_ext") == _tree(ext_store / "consumequeue_ext")
    assert json.loads(r.out)[0]["geometry"]["cq_ext_units"] == 278


def test_rebuild_all_dry_run_plans_the_ext_units(ext_store):
    snapshot = _tree(ext_store)
    r = run_cli("rebuild", "all", ext_store, "--dry-run")
    assert r.code == 0, r.err
    assert "consumequeue_ext: 278 ext units would be put in 256-byte files" in r.out
    assert _tree(ext_store) == snapshot


def test_rebuild_all_in_place_repairs_a_flipped_address(ext_store):
    before_cq, before_ext = _tree(ext_store / "consumequeue"), _tree(ext_store / "consumequeue_ext")
    _flip(ext_store / "consumequeue" / "MixedTopic" / "1" / f"{0:020d}", CQ_TAGS_AT + 7, 0x14)   # its first unit
    _flip(ext_store / "consumequeue" / "MixedTopic" / "2" / f"{0:020d}", 3 * 20 + CQ_TAGS_AT + 7, 0x28)
    assert run_cli("verify", ext_store).code == 1
    r = run_cli("rebuild", "all", ext_store, "--yes")
    assert r.code == 0, r.err
    assert "consumequeue_ext: 278 ext units" in r.out
    assert _tree(ext_store / "consumequeue") == before_cq and _tree(ext_store / "consumequeue_ext") == before_ext
    assert run_cli("verify", ext_store, "--level", "deep").code == 0


def test_rebuild_all_reports_and_leaves_no_ext_build(ext_store):
    """What a crash left beside consumequeue_ext/ is recovered and said, as beside consumequeue/; a
    rebuild refused after the ext build was made leaves none behind."""
    (ext_store / "consumequeue_ext.rmqtool-tmp-20260101T000000Z").mkdir()
    r = run_cli("rebuild", "all", ext_store, "--dry-run", "--cq-file-size", "7")
    assert r.code == 2 and "--cq-file-size 7" in r.err, r.err
    r = run_cli("rebuild", "all", ext_store, "--yes", "--cq-file-size", "7")
    assert r.code == 2, r.err
    assert [p.name for p in ext_store.iterdir() if ".rmqtool-tmp-" in p.name] == []
    (ext_store / "consumequeue_ext.rmqtool-tmp-20260101T000000Z").mkdir()
    r = run_cli("rebuild", "all", ext_store, "--yes", "-f", "json")
    assert r.code == 0, r.err
    assert any("consumequeue_ext.rmqtool-tmp-20260101T000000Z" in note
               for note in json.loads(r.out)[0]["recovered"]), r.out


def test_rebuild_consumequeue_refuses_ext_store(ext_store):
    snapshot = _tree(ext_store / "consumequeue")
    r = run_cli("rebuild", "consumequeue", ext_store, "--yes")
    assert r.code == 3 and str(ext_store / "consumequeue_ext") in r.err and "rebuild all" in r.err
    assert _tree(ext_store / "consumequeue") == snapshot


def _give_bitmap(ext_store: Path) -> Path:
    """MixedTopic/17 holds one unit: give it an 8-byte filter bitmap (its address stays 0)."""
    f = ext_store / "consumequeue_ext" / "MixedTopic" / "17" / f"{0:020d}"
    b = bytearray(f.read_bytes())
    _, tags, ts, _ = struct.unpack_from(">hqqh", b, 0)
    b[0:28] = struct.pack(">hqqh", 28, tags, ts, 8) + b"\x01" * 8
    f.write_bytes(bytes(b))
    return f


def test_rebuild_refuses_filter_bitmaps(ext_store, tmp_path):
    f = _give_bitmap(ext_store)
    assert run_cli("verify", ext_store, "--level", "deep").code == 0      # a bitmap is legal
    snapshot = _tree(ext_store)
    for extra in (["--yes"], ["--output", tmp_path / "out"]):
        r = run_cli("rebuild", "all", ext_store, *extra)
        assert r.code == 3 and str(f) in r.err and "--drop-filter-bitmaps" in r.err, r.err
    assert _tree(ext_store) == snapshot and not (tmp_path / "out" / "consumequeue").exists()
    r = run_cli("rebuild", "all", ext_store, "--output", tmp_path / "out2", "--drop-filter-bitmaps")
    assert r.code == 0, r.err
    new, old = _tree(tmp_path / "out2" / "consumequeue_ext"), _tree(ext_store / "consumequeue_ext")
    rel = f.relative_to(ext_store / "consumequeue_ext")
    assert {k for k in new if new[k] != old.get(k)} == {rel}
    assert new[rel][:20] == old[rel][:2].replace(b"\x00\x1c", b"\x00\x14") + old[rel][2:18] + b"\0\0"
    assert _tree(tmp_path / "out2" / "consumequeue") == _tree(ext_store / "consumequeue")


def test_ext_builder_start_keeps_the_older_bytes(tmp_path):
    from rmqtool.broker.cqbuild import ExtBuilder
    old = tmp_path / "old"
    old.mkdir()
    (old / f"{256:020d}").write_bytes(bytes(range(44)) + bytes(212))
    b = ExtBuilder(256, tmp_path / "new")
    b.start("T", 0, 300, old)
    assert ext_offset(b.put("T", 0, 5, 6)) == 300
    data = (tmp_path / "new" / "T" / "0" / f"{256:020d}").read_bytes()
    assert data[:44] == bytes(range(44)) and struct.unpack_from(">hqqh", data, 44) == (20, 5, 6, 0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 12), min_size=1, max_size=60), st.sampled_from([64, 100, 256]))
def test_reader_finds_what_the_builder_put(tmp_path_factory, bitmaps, file_size):
    """Units of any bitmap sizes, rolled over small files: the reader's index (its block walk over
    runs of plain units) gives every address put returned, each resolving to its unit."""
    from rmqtool.broker.cqbuild import ExtBuilder
    root = tmp_path_factory.mktemp("ext")
    b = ExtBuilder(file_size, root)
    put = [(b.put("T", 0, k, 1000 + k, bytes([k]) * n), k, n) for k, n in enumerate(bitmaps)]
    q = ExtQueue(root / "T" / "0", file_size)
    got = [ext_offset(a) for a, _, _ in put if a is not None]
    assert q.unit_offsets().tolist() == got
    assert [u.offset for u in q.units()] == got
    for a, k, n in put:
        if a is not None:
            u = q.get(a)
            assert (u.tags_code, u.store_timestamp, u.bitmap) == (k, 1000 + k, bytes([k]) * n)
    q.close()


def test_fifo_in_ext_queue_is_refused_naming_it(ext_store):
    """An ext file that is a FIFO is never opened for reading nor skipped: each command that reads
    the queue refuses (exit 3) naming it, as for every other store file (docs/hostile-files.md)."""
    import os
    f = ext_store / "consumequeue_ext" / "MixedTopic" / "1" / f"{256:020d}"
    f.unlink()
    os.mkfifo(f)
    for args in (("verify", ext_store), ("dump", "consumequeue-ext", ext_store, "--topic", "MixedTopic",
                                          "--queue", "1", "-f", "jsonl")):
        r = run_cli(*args)
        assert r.code == 3 and f"{f}: is a FIFO, not a regular file" in r.err, (args, r.err)


def test_write_undo_restores_ext_files(ext_store):
    ext_dir = ext_store / "consumequeue_ext"
    before = {p.relative_to(ext_dir): p.read_bytes() for p in ext_dir.rglob("*") if p.is_file()}
    rows = "".join(json.dumps({"topic": "MixedTopic", "queue_id": 0, "body": "aGk=",
                               "properties": {"TAGS": f"T{k}"}}) + "\n" for k in range(10))
    r = run_cli("write", ext_store, "--from", "-", "-f", "json", stdin=rows)
    assert r.code == 0, r.err
    backup = json.loads(r.out)[0]["backup"]
    assert {p.relative_to(ext_dir): p.read_bytes() for p in ext_dir.rglob("*") if p.is_file()} != before
    r = run_cli("write", ext_store, "--undo", backup)
    assert r.code == 0, r.err
    assert {p.relative_to(ext_dir): p.read_bytes() for p in ext_dir.rglob("*") if p.is_file()} == before


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 70), min_size=1, max_size=6), st.sampled_from([64, 100, 256]), st.integers(0, 200))
def test_put_many_equals_put_one_by_one(tmp_path_factory, runs, file_size, start):
    """The fast path (``put_many``: a file's run of 20-byte units at once) writes the same bytes and
    returns the same addresses as ``put`` unit by unit, across file ends and from any start."""
    import numpy as np
    from rmqtool.broker.cqbuild import ExtBuilder
    roots = [tmp_path_factory.mktemp("many"), tmp_path_factory.mktemp("one")]
    many, one = ExtBuilder(file_size, roots[0]), ExtBuilder(file_size, roots[1])
    many.start("T", 0, start), one.start("T", 0, start)
    k = 0
    for n in runs:
        tags = np.arange(k, k + n, dtype=np.int64) - 7
        ts = np.arange(k, k + n, dtype=np.int64) * 1000
        got = many.put_many("T", 0, tags, ts).tolist()
        assert got == [one.put("T", 0, int(t), int(s)) for t, s in zip(tags, ts)]
        k += n
    many.finish(), one.finish()
    assert _tree(roots[0]) == _tree(roots[1])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(
    st.builds(lambda t, s: CqExtUnitHeader.build({"size": 20, "tags_code": t, "store_timestamp": s,
                                                  "bitmap_size": 0}),
              st.integers(-(1 << 63), (1 << 63) - 1), st.integers(-(1 << 63), (1 << 63) - 1)),
    st.builds(lambda b: CqExtUnitHeader.build({"size": 20 + len(b), "tags_code": 1, "store_timestamp": 2,
                                               "bitmap_size": len(b)}) + b, st.binary(min_size=1, max_size=9)),
    st.binary(max_size=24)), max_size=12), st.booleans())
def test_index_walk_equals_the_construct_parse(tmp_path_factory, pieces, tail_zero):
    """The reader's index (``_scan``: runs of plain units a block at a time) and ``headers_at``
    (a gather with the derived dtype) agree with the formats/ declaration parsed unit by unit
    (``CqExtUnitHeader.parse`` along the size fields), on any bytes: the units, the data end and
    the unit that stops the walk."""
    import construct as cs
    data = b"".join(pieces) + (bytes(2) if tail_zero else b"")
    if not data:
        return
    d = tmp_path_factory.mktemp("scan")
    (d / f"{0:020d}").write_bytes(data)
    want, pos, problem = [], 0, False
    while pos + 2 <= len(data):
        size = cs.Int16sb.parse(data[pos:pos + 2])
        if size <= 0:
            break
        try:
            h = CqExtUnitHeader.parse(data[pos:pos + 20])
        except cs.StreamError:
            problem = True
            break
        if size < 20 or h.bitmap_size < 0 or size != 20 + h.bitmap_size or pos + size > len(data):
            problem = True
            break
        want.append((pos, h.tags_code, h.store_timestamp))
        pos += size
    q = ExtQueue(d, len(data))
    seg = q.segments.files[0]
    end, starts, stop, _ = q._index(seg)
    assert (end, starts.tolist(), stop is not None) == (pos, [w[0] for w in want], problem)
    _, at, tags, ts = q.headers_at(starts)
    assert list(zip(at.tolist(), tags.tolist(), ts.tolist())) == want
    try:
        assert [(u.position, u.tags_code, u.store_timestamp) for u in q.file_units(seg)] == want
        assert not problem
    except ExtProblem:
        assert problem


def test_store_times_read_in_windows_equal_the_records(ext_store):
    """``ExtRebuild._store_times`` (a window per run of records, gathered) gives each record's
    STORETIMESTAMP as the record decoder does, in any order of offsets."""
    import numpy as np
    from rmqtool.io.store import Store
    from rmqtool.ops.rebuild_ext import ExtRebuild
    r = run_cli("dump", "commitlog", ext_store, "-f", "jsonl", "--body", "none")
    records = [row for row in _jsonl(r.out) if row.get("kind") == "MESSAGE"]
    phys = np.array([row["phy_offset"] for row in records], np.int64)
    shuffle = np.random.default_rng(7).permutation(len(phys))
    x = ExtRebuild(Store(ext_store), None, dry_run=True)
    x._ts_file = None
    try:
        got = x._store_times(phys[shuffle])
        one = x._store_time(int(phys[-1]))
    finally:
        if x._ts_file is not None:
            x._ts_file[1].close()
    assert got.tolist() == [records[k]["store_timestamp"] for k in shuffle.tolist()]
    assert one == records[-1]["store_timestamp"]
