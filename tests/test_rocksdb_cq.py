"""A 5.x store whose ConsumeQueue is a RocksDB database (upstream-written, fixtures/reference/rocksdb-cq):
read without writing a byte of the store, every unit as upstream's store answered, the usual commands
and checks on it, refusals to write it, and damage in its entries found and named."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import load_answers, reference_store, run_cli
from formats import rocksdb_cq as rf

pytest.importorskip("rocksdict", reason="the rocksdb extra (rocksdict) is not installed")
STORE = "rocksdb-cq"


def _state(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns, p.read_bytes())
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def store(tmp_path):
    root = tmp_path / "s"
    shutil.copytree(reference_store(STORE), root)
    return root


def test_every_unit_as_upstream_answered_and_nothing_written(store):
    before = _state(store)
    rows = [json.loads(line) for line in run_cli("dump", "consumequeue", store, "-f", "jsonl").out.splitlines()]
    got: dict = {}
    for r in rows:
        if r["kind"] == "UNIT":
            got.setdefault((r["topic"], r["queue_id"]), []).append(
                [r["queue_offset"], r["commitlog_offset"], r["size"], r["tags_code"]])
    want = {(q["topic"], q["queueId"]): q["entries"] for q in load_answers(STORE)["consumeQueues"]}
    assert got == want and sum(map(len, got.values())) == 450
    # every row names the database its unit comes from (not the private view it is read through)
    assert {(r["file"], r["position"]) for r in rows} == {(str(store / "consumequeue"), None)}
    for args in (["info"], ["verify", "--level", "deep"], ["query-queue", "RocksTopic", "1", "--offset", "3"],
                 ["locate", "--topic", "RocksAudit", "--queue", "0", "--queue-offset", "5"]):
        r = run_cli(*args[:1], store, *args[1:])
        assert r.code == 0, (args, r.err)
    assert _state(store) == before            # no file added, changed or touched


def test_queries_and_verify_on_the_rocksdb_queues(store):
    info = json.loads(run_cli("info", store, "-f", "json").out)[0]
    assert info["rocksdb_consumequeue"]["units"] == 450 and info["rocksdb_consumequeue"]["read_only"]
    answers = {(q["topic"], q["queueId"]): q for q in load_answers(STORE)["consumeQueues"]}
    q = answers[("RocksTopic", 1)]
    rows = [json.loads(line) for line in
            run_cli("query-queue", store, "RocksTopic", "1", "--offset", "3", "--count", "2", "-f", "jsonl").out.splitlines()]
    assert [r["phy_offset"] for r in rows] == [e[1] for e in q["entries"][3:5]]
    rep = json.loads(run_cli("verify", store, "--level", "deep", "-f", "json").out)
    assert rep["exit_code"] == 0 and rep["summary"]["rocksdb_consumequeue"]["units"] == 450


def test_writers_refuse_and_output_rebuilds_the_file_form(store, tmp_path):
    before = _state(store)
    r = run_cli("rebuild", "consumequeue", store, "--yes")
    assert r.code == 3 and "RocksDB" in r.err
    r = run_cli("write", store, "--synthetic", 5)
    assert r.code == 3 and "RocksDB" in r.err
    assert _state(store) == before
    out = tmp_path / "cq"
    assert run_cli("rebuild", "consumequeue", store, "--output", out).code == 0
    answers = {(q["topic"], q["queueId"]): q["entries"] for q in load_answers(STORE)["consumeQueues"]}
    for (topic, qid), entries in answers.items():
        data = b"".join(p.read_bytes() for p in sorted((out / topic / str(qid)).iterdir()))
        units = [(int.from_bytes(data[i:i + 8], "big"), int.from_bytes(data[i + 8:i + 12], "big"))
                 for i in range(0, len(entries) * 20, 20)]
        assert units == [(e[1], e[2]) for e in entries], (topic, qid)


def _edit(root: Path, fn) -> None:
    from rocksdict import AccessType, Options, Rdict
    db = root / "consumequeue"
    cfs = Rdict.list_cf(str(db))
    h = Rdict(str(db), options=Options(raw_mode=True), access_type=AccessType.read_write(),
              column_families={cf: Options(raw_mode=True) for cf in cfs if cf != "default"})
    try:
        fn(h)
    finally:
        h.close()
    for stray in ("rocksdict-config.json",):
        if (db / stray).exists():
            os.unlink(db / stray)


def test_damaged_entries_are_found_and_named(store):
    def damage(h):
        key = rf.UnitKey.build(dict(topic_length=10, topic=b"RocksAudit", queue_id=1, queue_offset=7))
        value = bytearray(h[key])
        value[8:12] = (1).to_bytes(4, "big")                 # size 1
        h[key] = bytes(value)
        h[b"\x00\x00\x00\x03\x01abc"] = b"junk"              # not a unit
        off = h.get_column_family(rf.OFFSET_CF)
        okey = rf.OffsetKey.build(dict(topic_length=10, topic=b"RocksTopic", which=rf.MAX, queue_id=2))
        off[okey] = rf.OffsetValue.build(dict(commitlog_offset=1, queue_offset=999))
    _edit(store, damage)
    rep = json.loads(run_cli("verify", store, "--level", "deep", "-f", "json").out)
    by = {}
    for f in rep["findings"]:
        by.setdefault(f["check"], []).append(f["message"])
    assert any("RocksAudit/1: unit at queue offset 7" in m for m in by["cq.unit-size"])
    assert len(by["cq.rocksdb-entry"]) == 1 and "0000000301616263" in by["cq.rocksdb-entry"][0]
    last = next(q["entries"][-1] for q in load_answers(STORE)["consumeQueues"]
                if (q["topic"], q["queueId"]) == ("RocksTopic", 2))
    assert by["cq.rocksdb-offset"] == [f"RocksTopic/2: the offset table's max is commitlog offset 1 at queue offset "
                                       f"999, the last unit is {last[1]} at {last[0]}"]


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=64), st.binary(max_size=40))
def test_entry_decoders_never_raise(key, value):
    """Keys and values of any bytes: a unit / offset tuple, or a reason it is not one."""
    from rmqtool.io.rocksdb_cq import decode_offset, decode_unit
    for decode in (decode_unit, decode_offset):
        got = decode(key, value)
        assert isinstance(got, (str, tuple))
    real = rf.UnitKey.build(dict(topic_length=3, topic=b"abc", queue_id=2, queue_offset=5))
    got = decode_unit(real, value)
    assert isinstance(got, str) or (got[:3] == ("abc", 2, 5) and len(value) == rf.UNIT_VALUE_SIZE)


def test_compare_queues_holds_rocksdb_against_the_file_form(store, tmp_path):
    """The dual-write check: the RocksDB queues against file queues rebuilt from the CommitLog."""
    out = tmp_path / "cq"
    assert run_cli("rebuild", "consumequeue", store, "--output", out).code == 0
    r = run_cli("compare", store, out, "--queues", "-f", "json")
    assert r.code == 0, r.out
    c = json.loads(r.out)[0]
    assert c["identical"] and c["units_a"] == c["units_b"] == 450 and c["same_queues"] == 9
    victim = sorted((out / "RocksTopic" / "2").iterdir())[0]
    data = bytearray(victim.read_bytes())
    data[10 * 20 + 8:10 * 20 + 12] = (7).to_bytes(4, "big")          # unit 10's size
    victim.write_bytes(bytes(data))
    r = run_cli("compare", store, out, "--queues", "-f", "json")
    c = json.loads(r.out)[0]
    assert r.code == 1 and c["differing"] == 1
    assert (c["diffs"][0]["topic"], c["diffs"][0]["queue_id"], c["diffs"][0]["first_queue_offset"]) == ("RocksTopic", 2, 10)
    assert c["diffs"][0]["b"][1] == 7


def test_a_fifo_in_the_database_is_refused_naming_it(store):
    """A FIFO among the database's files is neither skipped as if absent nor read (which would
    hang): every command that opens the database refuses (exit 3) naming it."""
    db = store / "consumequeue"
    sst = next(p for p in sorted(db.iterdir()) if p.suffix == ".sst")
    sst.unlink()
    os.mkfifo(sst)
    r = run_cli("dump", "consumequeue", store, "-f", "jsonl")
    assert r.code == 3 and f"{sst}: is a FIFO, not a regular file" in r.err, r.err
