"""dump / locate / info from the CLI, against upstream's answers; bad input gives exit 2, one line."""
import os

import numpy as np
import pytest

from conftest import load_answers, reference_store, run_cli
from formats.indexfile import IndexEntry, IndexHeader, entry_position


@pytest.mark.parametrize("name", ["basic", "mixed"])
def test_dump_consumequeue_lists_exactly_upstreams_units(name):
    answers = load_answers(name)
    rows = run_cli("dump", "consumequeue", reference_store(name), "--format", "jsonl").jsonl()
    got = {}
    for r in rows:
        if r["kind"] in ("UNIT", "PRE_BLANK"):
            got.setdefault((r["topic"], r["queue_id"]), []).append(
                [r["queue_offset"], r["commitlog_offset"], r["size"], r["tags_code"]])
    want = {(q["topic"], q["queueId"]): q["entries"] for q in answers["consumeQueues"]}
    assert got == want


@pytest.mark.parametrize("name", ["basic", "mixed", "crashed"])
def test_dump_index_headers_and_entries_match_upstream_and_construct(name):
    answers = load_answers(name)
    rows = run_cli("dump", "index", reference_store(name), "--format", "jsonl").jsonl()
    headers = [r for r in rows if r["kind"] == "HEADER"]
    keys = ["beginTimestamp", "endTimestamp", "beginPhyOffset", "endPhyOffset", "hashSlotCount", "indexCount"]
    ours = ["begin_timestamp", "end_timestamp", "begin_phy_offset", "end_phy_offset", "hash_slot_count",
            "index_count"]
    assert [[h[k] for k in ours] for h in headers] == [[f[k] for k in keys] for f in answers["indexFiles"]]
    for h in headers:            # entries read back through the construct declarations
        raw = open(h["file"], "rb").read()
        assert IndexHeader.parse(raw[:40]).index_count == h["index_count_on_disk"]
        entries = [r for r in rows if r["kind"] == "ENTRY" and r["file"] == h["file"]]
        assert len(entries) == h["index_count"] - 1  # brand-new file: 0 entries
        for r in entries:
            ref = IndexEntry.parse(raw[entry_position(61, r["entry"]):][:20])
            assert (ref.key_hash, ref.phy_offset, ref.time_diff, ref.prev_index) == (
                r["key_hash"], r["phy_offset"], r["time_diff"], r["prev_index"])


def test_dump_checkpoint_matches_upstream():
    cp = load_answers("basic")["checkpoint"]
    row = run_cli("dump", "checkpoint", reference_store("basic"), "-f", "jsonl").jsonl()[0]
    assert [row["physic_msg_timestamp"], row["logics_msg_timestamp"], row["index_msg_timestamp"],
            row["min_timestamp"], row["min_timestamp_index"]] == [
        cp["physicMsgTimestamp"], cp["logicsMsgTimestamp"], cp["indexMsgTimestamp"], cp["minTimestamp"],
        cp["minTimestampIndex"]]


def test_dump_commitlog_filters_and_blank_rows():
    store = reference_store("basic")
    rows = run_cli("dump", "commitlog", store, "-f", "jsonl", "--topic", "TopicTest", "--queue", "2").jsonl()
    want = [m["phyOffset"] for m in load_answers("basic")["messages"]
            if m["topic"] == "TopicTest" and m["queueId"] == 2]
    assert [r["phy_offset"] for r in rows] == want
    rows = run_cli("dump", "commitlog", store, "-f", "jsonl", "--to-offset", "98304").jsonl()
    assert rows[-1]["kind"] == "BLANK" and rows[-1]["phy_offset"] == 97153 and rows[-1]["size"] == 1151
    last = run_cli("dump", "commitlog", store / "commitlog" / "00000000000003637248", "-f", "jsonl").jsonl()
    assert last[-1]["kind"] == "END" and last[-1]["end"] == "zero" and last[-1]["phy_offset"] == 3728338
    assert run_cli("dump", "commitlog", store, "-f", "jsonl", "--limit", "5").out.count("\n") == 5


def test_locate_every_message_offset():
    answers = load_answers("mixed")
    size = answers["config"]["mappedFileSizeCommitLog"]
    from rmqtool.locate import locate_offset
    from rmqtool.store import Store
    s = Store(reference_store("mixed"))
    for m in answers["messages"]:
        for probe in (m["phyOffset"], m["phyOffset"] + m["size"] - 1):
            r = locate_offset(s, probe)
            assert os.path.basename(r["file"]) == f"{probe // size * size:020d}"
            assert r["position"] == probe % size
            assert r["record"]["start"] == m["phyOffset"] and r["record"]["size"] == m["size"]


def test_locate_queue_offset_points_at_its_record():
    res = run_cli("locate", reference_store("basic"), "--topic", "OrderTopic", "--queue", "0",
                  "--queue-offset", "45", "-f", "jsonl").jsonl()[0]
    entry = load_answers("basic")["consumeQueues"][0]["entries"][45]
    assert res["unit"]["commitlog_offset"] == entry[1] and res["points_at_record_start"]
    assert res["file"].endswith("00000000000000000800") and res["position"] == 100


def test_info_reports_geometry_and_recovery():
    info = run_cli("info", reference_store("crashed"), "-f", "jsonl").jsonl()[0]
    assert info["commitlog"]["valid_end"] == 2349532
    assert info["abort"] and info["recovery"]["mode"] == "abnormal"
    assert (info["index"]["hash_slots"], info["index"]["index_entries"]) == (61, 350)
    basic = run_cli("info", reference_store("basic"), "-f", "jsonl").jsonl()[0]
    assert basic["commitlog"]["valid_end"] == load_answers("basic")["commitlog"]["maxPhyOffset"]
    by_queue = {(q["topic"], q["queue_id"]): q for q in basic["queues"]}
    for q in load_answers("basic")["consumeQueues"]:
        mine = by_queue[(q["topic"], q["queueId"])]
        assert (mine["min_offset"], mine["max_offset"], mine["max_phy_offset"]) == (
            q["getMinOffsetInQueue"], q["getMaxOffsetInQueue"], q["maxPhysicOffset"])


def _assert_one_line_error(res, path_part):
    assert res.code == 2, (res.out, res.err)
    lines = [l for l in res.err.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and path_part in lines[0], res.err
    assert "Traceback" not in res.err


def test_bad_inputs_exit_2_with_one_line(tmp_path):
    _assert_one_line_error(run_cli("info", tmp_path / "nope"), "nope")
    empty = tmp_path / "empty"
    empty.mkdir()
    _assert_one_line_error(run_cli("info", empty), "empty")
    junk = tmp_path / "20240101000000000"
    junk.write_bytes(os.urandom(1000))
    _assert_one_line_error(run_cli("dump", "index", junk), "20240101000000000")
    cp = tmp_path / "checkpoint"
    cp.write_bytes(b"\x00" * 10)
    _assert_one_line_error(run_cli("dump", "checkpoint", cp), "checkpoint@10")
    res = run_cli("dump", "commitlog", reference_store("basic"), "--format", "xml")
    assert res.code == 2 and "--format" in res.err


def test_random_bytes_commitlog_reports_end_not_traceback(tmp_path):
    p = tmp_path / "00000000000000000000"
    p.write_bytes(np.random.default_rng(1).bytes(5000))
    res = run_cli("dump", "commitlog", p, "-f", "jsonl")
    assert res.code == 0
    rows = res.jsonl()
    assert rows[-1]["kind"] == "END" and rows[-1]["end"] in ("corrupt", "torn") and rows[-1]["position"] == 0
