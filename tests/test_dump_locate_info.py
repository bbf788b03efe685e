"""dump / locate / info from the CLI, against upstream's answers; bad input gives exit 2, one line."""
import json
import os

import numpy as np
import pytest

from conftest import dledger_store, load_answers, reference_store, run_cli
from formats.indexfile import IndexEntry, IndexHeader, entry_position


@pytest.mark.parametrize("name", ["basic", "mixed", "crashed"])
def test_dump_commitlog_jsonl_every_field_matches_upstream(name):
    """The CLI's own JSONL (not just the scanner underneath) against upstream's decoded messages."""
    from test_scan import FIELD_MAP
    answers = load_answers(name)
    res = run_cli("dump", "commitlog", reference_store(name), "--format", "jsonl", "--body", "base64")
    assert res.code == 0, res.err
    recs = [r for r in res.jsonl() if r["kind"] == "MESSAGE"]
    assert len(recs) == len(answers["messages"]) == answers["commitlog"]["messageCount"]
    for rec, msg in zip(recs, answers["messages"]):
        for theirs, ours in FIELD_MAP.items():
            assert rec[ours] == msg[theirs], (msg["phyOffset"], ours)
        size = answers["config"]["mappedFileSizeCommitLog"]
        assert os.path.basename(rec["file"]) == f"{msg['phyOffset'] // size * size:020d}"
        assert rec["position"] == msg["phyOffset"] % size


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


def test_dump_consumequeue_of_crashed_store_as_shipped():
    """Upstream's load()+recover() of the crashed CQ files, before any commitlog recovery."""
    before = load_answers("crashed")["recovery"]["consumeQueuesBefore"]
    rows = run_cli("dump", "consumequeue", reference_store("crashed"), "-f", "jsonl").jsonl()
    ends = {(r["topic"], r["queue_id"]): r["queue_offset"] for r in rows if r["kind"] == "END"}
    units = {}
    for r in rows:
        if r["kind"] in ("UNIT", "PRE_BLANK"):
            units[(r["topic"], r["queue_id"])] = units.get((r["topic"], r["queue_id"]), 0) + 1
    assert ends == {(q["topic"], q["queueId"]): q["maxOffsetInQueue"] for q in before}
    assert units == {(q["topic"], q["queueId"]): q["maxOffsetInQueue"] - q["minOffsetInQueue"] for q in before}
    assert max(r["commitlog_offset"] + r["size"] for r in rows if r["kind"] == "UNIT") == \
        load_answers("crashed")["recovery"]["maxPhyOffsetInConsumeQueueBefore"]


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


@pytest.mark.parametrize("name", ["basic", "mixed", "crashed"])
def test_locate_every_message_offset(name):
    """First and last byte of every message, and every BLANK, land in upstream's file layout."""
    answers = load_answers(name)
    size = answers["config"]["mappedFileSizeCommitLog"]
    from rmqtool.ops.locate import locate_offset
    from rmqtool.io.store import Store
    s = Store(reference_store(name))
    for m in answers["messages"]:
        for probe in (m["phyOffset"], m["phyOffset"] + m["size"] - 1):
            r = locate_offset(s, probe)
            assert os.path.basename(r["file"]) == f"{probe // size * size:020d}"
            assert r["position"] == probe % size
            assert r["kind"] == "MESSAGE", (probe, r)
            assert r["record"]["start"] == m["phyOffset"] and r["record"]["size"] == m["size"]
            assert r["record"]["offset_msg_id"] == m["offsetMsgId"]
    for f in answers["commitlog"]["files"]:
        if f["blankMagicAt"] is None:
            continue
        for probe in (f["blankMagicAt"], f["fromOffset"] + size - 1):
            r = locate_offset(s, probe)
            assert os.path.basename(r["file"]) == f["name"] and r["kind"] == "BLANK", (probe, r)
            assert (r["record"]["start"], r["record"]["size"]) == (f["blankMagicAt"], f["blankLength"])


@pytest.mark.parametrize("name", ["basic", "mixed", "crashed", "dledger"])
def test_locate_chain_walk_equals_the_bulk_walk(name, tmp_path):
    """The first megabyte's ``struct`` chain (``locate_offset``'s default) answers exactly what the
    bulk walk (``chain_bytes=0``) answers: at every record's first, second and last byte, in the
    BLANKs, past the data, and on a copy with a record damaged mid-file."""
    import shutil
    import struct
    from formats import commitlog as cl
    from rmqtool.io.store import Store
    from rmqtool.ops.locate import locate_offset
    from rmqtool.ops.dump import RecordFilter, commitlog_rows
    root = dledger_store() if name == "dledger" else reference_store(name)
    store = Store(root)
    rows = list(commitlog_rows(store, RecordFilter()))
    probes = {p for r in rows for p in (r["phy_offset"], r["phy_offset"] + 1, r["phy_offset"] + r["size"] - 1)}
    probes |= {seg.start + seg.size - 1 for seg in store.commitlog.files}
    for probe in sorted(probes):
        assert locate_offset(store, probe) == locate_offset(store, probe, chain_bytes=0), probe
    if name != "basic":
        return
    copy = tmp_path / "damaged"
    shutil.copytree(root, copy)
    seg = store.commitlog.files[1]
    messages = [r for r in rows if r["kind"] == "MESSAGE" and seg.start <= r["phy_offset"] < seg.start + seg.size]
    bad = messages[len(messages) // 2]
    with open(copy / "commitlog" / seg.path.name, "r+b") as fh:
        fh.seek(bad["position"] + cl.MESSAGE_HEAD_OFFSETS["magic"])
        fh.write(struct.pack(">I", 0x12345678))
    damaged = Store(copy)
    for r in messages:
        for probe in (r["phy_offset"], r["phy_offset"] + r["size"] - 1):
            assert locate_offset(damaged, probe) == locate_offset(damaged, probe, chain_bytes=0), probe


def test_locate_cli_answers_match_upstream_layout():
    answers = load_answers("mixed")
    size = answers["config"]["mappedFileSizeCommitLog"]
    for m in answers["messages"][::60]:
        res = run_cli("locate", reference_store("mixed"), m["phyOffset"] + 3, "-f", "jsonl")
        assert res.code == 0, res.err
        r = res.jsonl()[0]
        assert os.path.basename(r["file"]) == f"{m['phyOffset'] // size * size:020d}"
        assert (r["position"], r["record"]["start"], r["record"]["size"]) == (
            (m["phyOffset"] + 3) % size, m["phyOffset"], m["size"])
    end = answers["commitlog"]["maxPhyOffset"]
    assert run_cli("locate", reference_store("mixed"), 10 ** 12, "-f", "jsonl").code == 1
    past = run_cli("locate", reference_store("mixed"), end + 5, "-f", "jsonl")
    assert past.code == 1 and past.jsonl()[0]["kind"] == "PAST_END" and past.jsonl()[0]["found"] is False


def test_locate_queue_offset_points_at_its_record():
    res = run_cli("locate", reference_store("basic"), "--topic", "OrderTopic", "--queue", "0",
                  "--queue-offset", "45", "-f", "jsonl").jsonl()[0]
    entry = load_answers("basic")["consumeQueues"][0]["entries"][45]
    assert res["unit"]["commitlog_offset"] == entry[1] and res["points_at_record_start"]
    assert res["file"].endswith("00000000000000000800") and res["position"] == 100


def test_info_reports_geometry_and_recovery():
    info = json.loads(run_cli("info", reference_store("crashed"), "-f", "json").out)[0]
    assert info["commitlog"]["valid_end"] == 2349532
    assert info["abort"] and info["recovery"]["mode"] == "abnormal"
    assert (info["index"]["hash_slots"], info["index"]["index_entries"]) == (61, 350)
    basic = json.loads(run_cli("info", reference_store("basic"), "-f", "json").out)[0]
    assert basic["commitlog"]["valid_end"] == load_answers("basic")["commitlog"]["maxPhyOffset"]
    by_queue = {(q["topic"], q["queue_id"]): q for q in basic["queues"]}
    for q in load_answers("basic")["consumeQueues"]:
        mine = by_queue[(q["topic"], q["queueId"])]
        assert (mine["min_offset"], mine["max_offset"], mine["max_phy_offset"]) == (
            q["getMinOffsetInQueue"], q["getMaxOffsetInQueue"], q["maxPhysicOffset"])


def _assert_one_line_error(res, path_part):
    assert res.code == 2, (res.out, res.err)
    lines = [l for l in res.err.splitlines() if l.strip() and not l.startswith('{"error"')]   # -f json: its twin
    assert len(lines) == 1 and lines[0].startswith("error: ") and path_part in lines[0], res.err
    assert "Traceback" not in res.err


def _assert_one_damage_line(res, path_part):
    """A dump that went on past a damaged file: exit 1 (a finding), one ``damaged:`` line naming it."""
    assert res.code == 1, (res.out, res.err)
    lines = [l for l in res.err.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("damaged: ") and path_part in lines[0], res.err
    assert "Traceback" not in res.err and "error" not in res.err


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
    _assert_one_damage_line(res, f"{p.name}@0")                 # the rows are printed, then one damage line
    rows = res.jsonl()
    assert rows[-1]["kind"] == "END" and rows[-1]["end"] in ("corrupt", "torn") and rows[-1]["position"] == 0


def test_dump_commitlog_prints_rows_before_damage_then_fails(tmp_path):
    """A corrupt record mid-store: every row up to it (and past it, in later files), then exit 1
    naming the file and position; a clean store and a --limit that stops before it exit 0."""
    import struct
    from formats import commitlog as cl
    store = _copy("basic", tmp_path)
    answers = load_answers("basic")
    m = [x for x in answers["messages"] if 3 * 98304 <= x["phyOffset"] < 4 * 98304][7]
    path = store / "commitlog" / f"{3 * 98304:020d}"
    pos = m["phyOffset"] - 3 * 98304
    with open(path, "r+b") as fh:
        fh.seek(pos + cl.MESSAGE_HEAD_OFFSETS["magic"])
        fh.write(struct.pack(">I", 0x12345678))
    res = run_cli("dump", "commitlog", store, "-f", "jsonl", "--body", "none")
    _assert_one_damage_line(res, f"{path.name}@{pos}")
    rows = [r for r in res.jsonl() if r["kind"] == "MESSAGE"]
    assert m["phyOffset"] not in {r["phy_offset"] for r in rows}
    assert len(rows) > answers["commitlog"]["messageCount"] * 0.9
    assert run_cli("dump", "commitlog", store, "-f", "jsonl", "--limit", "5").code == 0
    assert run_cli("dump", "commitlog", reference_store("crashed"), "-f", "jsonl").code == 0
    # a filter on topic, queue or time still shows where a walk stopped on damage, and fails
    first = answers["messages"][0]
    for flt in (["--begin", str(first["storeTimestamp"])], ["--topic", first["topic"]], ["--queue", "0"]):
        res = run_cli("dump", "commitlog", store, "-f", "jsonl", "--body", "none", *flt)
        _assert_one_damage_line(res, f"{path.name}@{pos}")
        ends = [r for r in res.jsonl() if r["kind"] == "END"]
        assert [(r["end"], r["position"]) for r in ends if r["file"] == str(path)] == [("corrupt", pos)], flt
        assert not [r for r in res.jsonl() if r["kind"] == "BLANK"], flt      # clean ends follow the filter


def _copy(name, tmp_path):
    import shutil
    dest = tmp_path / name
    shutil.copytree(reference_store(name), dest)
    return dest


def test_bad_input_classes_give_one_line_with_path_and_offset(tmp_path):
    """truncated file, random bytes, wrong size, empty directory, not a store: exit 2, one line."""
    empty = tmp_path / "empty"
    empty.mkdir()
    not_a_store = tmp_path / "random.bin"
    not_a_store.write_bytes(np.random.default_rng(2).bytes(3000))
    for target in (empty, not_a_store, tmp_path / "missing"):
        for args in (["info"], ["verify"], ["query-key", "k"], ["query-id", "k"], ["locate", "5"],
                     ["dump", "commitlog"], ["dump", "index"], ["rebuild", "index", "--dry-run"]):
            cmd = [*args[:2], target, *args[2:]] if args[0] in ("dump", "rebuild") else [args[0], target,
                                                                                         *args[1:]]
            if target == not_a_store and args[0] == "dump":
                continue                              # dump takes single files: below
            _assert_one_line_error(run_cli(*cmd), target.name)
    store = _copy("basic", tmp_path)
    index = sorted((store / "index").iterdir())[4]
    os.truncate(index, 5000)                                                # truncated: wrong size
    _assert_one_damage_line(run_cli("dump", "index", store, "-f", "jsonl"), f"{index.name}@5000")
    _assert_one_line_error(run_cli("dump", "index", index, "--index-slots", "61", "--index-entries", "350"),
                           f"{index.name}@5000")
    index.write_bytes(np.random.default_rng(3).bytes(30))                   # random bytes, too short
    _assert_one_line_error(run_cli("dump", "index", index, "--index-slots", "61", "--index-entries", "350"),
                           f"{index.name}@30")
    cp = store / "checkpoint"
    cp.write_bytes(np.random.default_rng(4).bytes(17))
    _assert_one_line_error(run_cli("dump", "checkpoint", store), "checkpoint@17")
    cq = store / "consumequeue" / "TopicTest" / "0" / "not-a-cq-name"
    cq.write_bytes(bytes(40))
    _assert_one_line_error(run_cli("dump", "consumequeue", cq), "not-a-cq-name")


def test_dump_consumequeue_wrong_size_file_prints_units_then_fails(tmp_path):
    """A CQ file cut inside a unit: its whole units, an END row inside that file, then exit 1
    naming the file and its size (single file and store alike)."""
    store = _copy("basic", tmp_path)
    cq = store / "consumequeue" / "TopicTest" / "0" / "00000000000000000000"
    os.truncate(cq, 790)
    for target in (cq, store):
        res = run_cli("dump", "consumequeue", target, "-f", "jsonl", *([] if target == cq else
                                                                       ["--topic", "TopicTest", "--queue", "0"]))
        _assert_one_damage_line(res, f"{cq.name}@790")
        rows = res.jsonl()
        assert [r["queue_offset"] for r in rows if r["kind"] == "UNIT"] == list(range(39))
        end = rows[-1]
        assert end["kind"] == "END" and os.path.basename(end["file"]) == cq.name and end["position"] == 780
    assert run_cli("dump", "consumequeue", reference_store("basic"), "-f", "jsonl").code == 0


def test_dump_index_goes_on_past_damaged_files(tmp_path):
    """Two damaged index files among intact ones: every intact file's header and entries are
    dumped (the damaged ones' too, up to the damage), one ``damaged:`` line names each damaged
    file and offset, and the exit is 1 (a finding), as a dump of the whole store."""
    store = _copy("basic", tmp_path)
    files = sorted((store / "index").iterdir())
    whole = run_cli("dump", "index", store, "-f", "jsonl")
    assert whole.code == 0, whole.err
    os.truncate(files[2], 5000)                  # truncated inside its entries
    os.truncate(files[5], 20)                    # shorter than its header
    res = run_cli("dump", "index", store, "-f", "jsonl")
    assert res.code == 1, res.err
    lines = res.err.splitlines()
    assert lines == [f"damaged: {files[2]}@5000: index file is 5000 bytes, its geometry needs "
                     f"{files[0].stat().st_size} (truncated or wrong size)",
                     f"damaged: {files[5]}@20: index file is 20 bytes, shorter than its header"], res.err
    rows = res.jsonl()
    assert [r["file"] for r in rows if r["kind"] == "HEADER"] == [str(f) for f in files if f != files[5]]
    intact = [r for r in whole.jsonl() if r["file"] not in (str(files[2]), str(files[5]))]
    assert [r for r in rows if r["file"] not in (str(files[2]), str(files[5]))] == intact
    assert any(r["file"] == str(files[2]) and r["kind"] == "ENTRY" for r in rows)


def test_dump_commitlog_and_consumequeue_report_every_damaged_file(tmp_path):
    """Damage in two files of one walk: both named, one line each, exit 1."""
    store = _copy("basic", tmp_path)
    cqs = sorted((store / "consumequeue" / "TopicTest").glob("*/00000000000000000000"))
    os.truncate(cqs[0], 790)
    os.truncate(cqs[1], 395)
    res = run_cli("dump", "consumequeue", store, "-f", "jsonl")
    assert res.code == 1, res.err
    lines = sorted(res.err.splitlines())
    assert [ln.split(": ")[1] for ln in lines] == [f"{cqs[0]}@790", f"{cqs[1]}@395"], res.err
    assert all("the whole units it holds were printed" in ln for ln in lines)
    logs = sorted((store / "commitlog").iterdir())
    for k in (1, 3):
        with open(logs[k], "r+b") as fh:          # the first record's magic
            fh.seek(4)
            fh.write(b"\x12\x34\x56\x78")
    res = run_cli("dump", "commitlog", store, "-f", "jsonl")
    assert res.code == 1, res.err
    assert [ln.split(": ")[1] for ln in res.err.splitlines()] == [f"{logs[1]}@0", f"{logs[3]}@0"], res.err
    assert {r["file"] for r in res.jsonl() if r["kind"] == "MESSAGE"} >= {str(logs[2]), str(logs[4])}
