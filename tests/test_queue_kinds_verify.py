"""verify on a store with light queues and BatchConsumeQueues (upstream-written,
fixtures/reference/propcrc-lmq-batchcq): clean as written, and damage planted in a light
queue's unit or a BatchConsumeQueue unit is found at its file and byte offset."""
from __future__ import annotations

import json
import shutil
import struct

import pytest

from conftest import reference_store, run_cli
from formats.consumequeue import BCQ_UNIT_OFFSETS, BCQ_UNIT_SIZE, CQ_UNIT_OFFSETS, CQ_UNIT_SIZE

STORE = "propcrc-lmq-batchcq"


def _verify(root, *args) -> dict:
    r = run_cli("verify", root, "--level", "deep", "-f", "json", *args)
    return json.loads(r.out)


def test_the_upstream_store_verifies_clean_with_every_engine():
    rep = _verify(reference_store(STORE))
    assert rep["exit_code"] == 0 and rep["findings"] == [], rep["findings"][:5]
    assert _verify(reference_store(STORE), "--jobs", "2")["findings"] == []


def _patch(path, at: int, fmt: str, value: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(at)
        fh.write(struct.pack(fmt, value))


@pytest.fixture
def store(tmp_path):
    root = tmp_path / "s"
    shutil.copytree(reference_store(STORE), root)
    return root


def test_a_light_queue_unit_pointing_at_a_record_that_does_not_name_it(store):
    path = store / "consumequeue" / "%LMQ%user-a" / "0" / f"{0:020d}"
    crc_unit = (store / "consumequeue" / "CrcTopic" / "0" / f"{0:020d}").read_bytes()[:CQ_UNIT_SIZE]
    with open(path, "r+b") as fh:             # unit 3 now points at a plain CrcTopic record
        fh.seek(3 * CQ_UNIT_SIZE)
        fh.write(crc_unit[:12])
    found = [f for f in _verify(store)["findings"] if f["check"] == "lmq.unit-record"]
    assert [(f["file"], f["offset"]) for f in found] == [(str(path), 3 * CQ_UNIT_SIZE)]
    assert "CrcTopic/0" in found[0]["message"] and "names no light queue" in found[0]["message"]


def test_a_light_queue_unit_with_a_wrong_tags_code(store):
    path = store / "consumequeue" / "%LMQ%room-1" / "0" / f"{0:020d}"
    _patch(path, 5 * CQ_UNIT_SIZE + CQ_UNIT_OFFSETS["tags_code"], ">q", 12345)
    found = [f for f in _verify(store)["findings"] if f["check"] == "lmq.unit-record"]
    assert [(f["file"], f["offset"]) for f in found] == [(str(path), 5 * CQ_UNIT_SIZE)]
    assert "tagsCode 12345" in found[0]["message"]


def test_batch_queue_units_with_a_wrong_base_or_a_lost_unit(store):
    path = store / "batchconsumequeue" / "BatchCqTopic" / "1" / f"{0:020d}"
    _patch(path, 4 * BCQ_UNIT_SIZE + BCQ_UNIT_OFFSETS["msg_base_offset"], ">q", 999)
    findings = _verify(store)["findings"]
    base = [(f["file"], f["offset"]) for f in findings if f["check"] == "bcq.base-offset"]
    assert base[:1] == [(str(path), 4 * BCQ_UNIT_SIZE + BCQ_UNIT_OFFSETS["msg_base_offset"])]
    record = [f for f in findings if f["check"] == "bcq.unit-record"]
    assert [(f["file"], f["offset"]) for f in record] == [(str(path), 4 * BCQ_UNIT_SIZE)]
    assert "base offset/count 999/" in record[0]["message"]


def test_a_record_of_a_batch_topic_without_its_unit(store):
    path = store / "batchconsumequeue" / "BatchCqTopic" / "0" / f"{0:020d}"
    data = path.read_bytes()
    first = struct.unpack_from(">q", data, 0)[0]
    _patch(path, BCQ_UNIT_OFFSETS["commitlog_offset"], ">q", first + 1)     # unit 0 now points nowhere
    findings = _verify(store)["findings"]
    assert any(f["check"] == "bcq.unit-record" and f["file"] == str(path) and f["offset"] == 0 for f in findings)
    missing = [f for f in findings if f["check"] == "bcq.missing"]
    assert len(missing) == 1 and missing[0]["offset"] == first % 98304


def test_dump_shows_batch_units_as_upstream_reads_them():
    from conftest import load_answers
    want = {(q["topic"], q["queueId"]): [list(e) for e in q["entries"]]
            for q in load_answers(STORE)["consumeQueues"] if q.get("cqType") == "BatchCQ"}
    r = run_cli("dump", "consumequeue", reference_store(STORE), "--topic", "BatchCqTopic", "-f", "jsonl")
    got: dict = {}
    for row in map(json.loads, r.out.splitlines()):
        got.setdefault((row["topic"], row["queue_id"]), []).append(
            [row["queue_offset"], row["commitlog_offset"], row["size"], row["tags_code"], row["batch_size"],
             row["compacted_offset"]])
    assert got == want and sum(map(len, got.values())) == 52


def test_batch_topics_come_from_topics_json_too(tmp_path):
    from rmqtool.broker.queuekinds import detect
    from rmqtool.io.store import Store
    root = tmp_path / "s"
    shutil.copytree(reference_store("basic"), root)
    (root / "config").mkdir(exist_ok=True)
    (root / "config" / "topics.json").write_text(json.dumps({"topicConfigTable": {
        "OrderTopic": {"topicName": "OrderTopic", "attributes": {"queue.type": "BatchCQ"}},
        "TopicTest": {"topicName": "TopicTest", "attributes": {"queue.type": "SimpleCQ"}},
        "odd": 5}}))
    kinds = detect(Store(root))
    assert kinds.batch_cq_topics == {"OrderTopic"} and "topics.json" in kinds.source
    assert not detect(Store(reference_store("basic"))).batch_cq_topics


def test_export_and_dump_carry_the_kind_fields(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    root = reference_store(STORE)
    dumped = {r["phy_offset"]: r for r in map(json.loads, run_cli("dump", "commitlog", root, "-f", "jsonl").out.splitlines())
              if r["kind"] == "MESSAGE"}
    assert run_cli("export", root, "--to", tmp_path / "x").code == 0
    import pyarrow.dataset as ds
    table = ds.dataset(tmp_path / "x", format="parquet", partitioning="hive").to_table(
        columns=["phy_offset", "inner_num", "inner_base", "lmq_queues", "timer_out_ms"])
    rows = table.to_pylist()
    assert len(rows) == len(dumped) == 352
    for r in rows:
        d = dumped[r["phy_offset"]]
        assert (r["inner_num"], r["inner_base"], r["lmq_queues"]) == (d["inner_num"], d["inner_base"], d["lmq_queues"])
    assert sum(r["inner_num"] is not None for r in rows) == 52 and sum(r["lmq_queues"] is not None for r in rows) == 120
    assert all(d["inner_num"] == int(d["properties"]["INNER_NUM"]) for d in dumped.values() if d["inner_num"] is not None)
    del pq
