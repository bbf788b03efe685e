"""A DLedger-mode store (upstream-written, fixtures/reference/dledger.tar.gz) read as a CommitLog:
every record where upstream says it is, and every command that reads a CommitLog working on
it: dump, locate, the queries, export, deep verify, a byte-identical rebuild; write refuses;
damage planted in an entry header is found at its file and offset."""
from __future__ import annotations

import base64
import gzip
import hashlib
import json
import struct
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import REFERENCE, dledger_copy, dledger_store, run_cli, run_cli_process
from formats import dledger as dl
from rmqtool.io.store import Store
from rmqtool.output.schema import record_to_dict
from rmqtool.records.scan import FileEnd, RecordBatch, _walk_entries, walk_store


@lru_cache(maxsize=None)
def answers() -> dict:
    with gzip.open(REFERENCE / "answers" / "dledger.json.gz", "rt", encoding="utf-8") as fh:
        return json.load(fh)


def _records(root) -> list[dict]:
    out = []
    for item in walk_store(Store(root), check_crc=True):
        if isinstance(item, RecordBatch):
            out.extend(record_to_dict(item, i, body="raw") for i in range(len(item)))
    return out


def test_the_store_root_reads_the_member_data_files():
    store = Store(dledger_store())
    assert store.dledger
    assert [d.name for d in store.commitlog_dirs] == ["data"] and store.commitlog_dirs[0].parent.name == "dledger-n0"
    assert [f.name for f in store.commitlog.files] == [f["name"] for f in answers()["dledger"]["dataFiles"]]


def test_every_record_is_where_upstream_says():
    got = _records(dledger_store())
    want = answers()["messages"]
    entries = {e["index"]: e for e in answers()["dledger"]["entries"]}
    assert len(got) == len(want) == 400
    for r, m in zip(got, want):
        assert r["phy_offset"] == m["phyOffset"] == entries[m["dledgerIndex"]]["messagePhyOffset"]
        assert (r["topic"], r["queue_id"], r["queue_offset"]) == (m["topic"], m["queueId"], m["queueOffset"])
        assert (r["keys"], r["uniq_key"], r["tags"]) == (m["keys"], m["uniqKey"], m["tags"])
        assert (r["store_timestamp"], r["body_crc"], r["size"]) == (m["storeTimestamp"], m["bodyCRC"], m["size"])
        assert hashlib.sha1(base64.b64decode(r["body"])).hexdigest() == m["bodySha1"]


def test_rebuild_is_byte_identical_to_the_brokers_queues_and_index(tmp_path):
    root = dledger_store()
    r = run_cli("rebuild", "all", root, "--output", tmp_path / "out", "-f", "json")
    assert r.code == 0, r.err
    for rel in sorted(p.relative_to(root / "consumequeue") for p in (root / "consumequeue").rglob("*") if p.is_file()):
        assert (tmp_path / "out" / "consumequeue" / rel).read_bytes() == (root / "consumequeue" / rel).read_bytes(), rel
    ours = sorted((tmp_path / "out" / "index").iterdir())
    theirs = sorted((root / "index").iterdir())
    assert [p.read_bytes() for p in ours] == [p.read_bytes() for p in theirs]


def test_deep_verify_is_clean():
    r = run_cli("verify", dledger_store(), "--level", "deep", "-f", "json")
    report = json.loads(r.out)
    assert r.code == 0, report["findings"]
    assert report["summary"]["commitlog"]["records"] == 400


def test_queries_dump_and_locate_answer_as_upstream():
    root = dledger_store()
    a = answers()
    whole = [q for q in a["keyQueries"] if q["maxNum"] >= 64 and q["begin"] == 0 and q["end"] == (1 << 63) - 1]
    assert len(whole) >= 10
    for q in whole:
        r = run_cli("query-key", root, q["key"], "--topic", q["topic"], "-f", "json")
        want = sorted(q["storeQueryMessage"]["phyOffsets"])
        got = sorted(x["phy_offset"] for x in json.loads(r.out)) if r.code == 0 else []
        assert got == want, q
    m = a["messages"][7]
    r = run_cli("query-id", root, m["offsetMsgId"], "-f", "json")
    assert r.code == 0 and json.loads(r.out)[0]["records"][0]["phy_offset"] == m["phyOffset"]
    r = run_cli("query-queue", root, m["topic"], m["queueId"], "--offset", m["queueOffset"], "--count", 1, "-f", "json")
    assert r.code == 0 and json.loads(r.out)[0]["phy_offset"] == m["phyOffset"]
    dump = run_cli("dump", "commitlog", root, "-f", "jsonl")
    rows = dump.jsonl()
    assert [x["phy_offset"] for x in rows if x["kind"] == "MESSAGE"] == [x["phyOffset"] for x in a["messages"]]
    blanks = [x for x in rows if x["kind"] == "BLANK"]             # the DLedger blank ending each full file
    assert [x["phy_offset"] % Store(root).commitlog.file_size + x["size"] for x in blanks] == [98304, 98304]
    assert {x["magic"] for x in blanks} == {"0xFFFFFFFF"}
    assert [(x["kind"], x["phy_offset"]) for x in rows if x["kind"] not in ("MESSAGE", "BLANK")] == [
        ("END", answers()["dledger"]["writePos"])]
    inside = m["phyOffset"] + 10
    loc = json.loads(run_cli("locate", root, inside, "-f", "json").out)[0]
    assert loc["record"]["start"] == m["phyOffset"]


def test_export_holds_every_message(tmp_path):
    pytest.importorskip("pyarrow")
    r = run_cli("export", dledger_store(), "--to", tmp_path / "x", "-f", "jsonl")
    assert r.code == 0, r.err
    rows = [json.loads(line) for f in (tmp_path / "x").rglob("*.jsonl") for line in f.read_text().splitlines()]
    assert sorted(x["phy_offset"] for x in rows) == [m["phyOffset"] for m in answers()["messages"]]


def test_write_refuses_a_dledger_store(tmp_path):
    root = dledger_copy(tmp_path / "s")
    before = sorted(p.name for p in root.iterdir())
    r = run_cli_process("write", root, "--synthetic", 3)
    assert r.returncode == 3 and "DLedger-mode store" in r.stderr, r.stderr
    assert sorted(p.name for p in root.iterdir()) == before


def _entry(i: int) -> dict:
    return answers()["dledger"]["entries"][i]


def _plant(root, entry: dict, field: str, value: int) -> tuple[str, int]:
    """Overwrite one header field of the entry; (data file, in-file position of the entry)."""
    size = Store(root).commitlog.file_size
    base = entry["pos"] // size * size
    path = root / "dledger-n0" / "data" / f"{base:020d}"
    at = entry["pos"] - base + dl.ENTRY_HEADER_OFFSETS[field]
    fmt = ">i" if dl.EntryHeader.subcons[list(dl.ENTRY_HEADER_OFFSETS).index(field)].sizeof() == 4 else ">q"
    with open(path, "r+b") as fh:
        fh.seek(at)
        fh.write(struct.pack(fmt, value))
    return str(path), entry["pos"] - base


@pytest.mark.parametrize("field,value,check", [
    ("magic", 7, "dledger.magic"),
    ("pos", 12345, "dledger.pos"),
    ("body_length", 5, "dledger.body"),
    ("size", 20, "dledger.size"),
])
def test_damage_in_an_entry_header_is_found_at_its_file_and_offset(tmp_path, field, value, check):
    root = dledger_copy(tmp_path / "s")
    path, position = _plant(root, _entry(150), field, value)
    r = run_cli("verify", root, "-f", "json")
    assert r.code == 1
    found = [f for f in json.loads(r.out)["findings"] if f["check"] == check]
    assert found and found[0]["file"] == path and found[0]["offset"] == position, json.loads(r.out)["findings"]
    dry = run_cli("rebuild", "consumequeue", root, "--dry-run")
    assert dry.code == 0 and f"stops at {path}@{position}" in dry.out and "400 now -> 150 after" in dry.out
    refused = run_cli("rebuild", "consumequeue", root, "--output", tmp_path / "out")
    assert refused.code == 3 and not any((tmp_path / "out").rglob("*"))   # it would shrink the queues


def test_resync_past_a_damaged_header_finds_the_next_entry(tmp_path):
    root = dledger_copy(tmp_path / "s")
    _plant(root, _entry(150), "magic", 7)
    r = run_cli("verify", root, "--level", "deep", "-f", "json")
    findings = json.loads(r.out)["findings"]
    size = Store(root).commitlog.file_size
    stop = next(f for f in findings if f["check"] == "dledger.magic")
    assert f"resync found a plausible record at {_entry(151)['pos'] % size}" in stop["message"]   # the next entry
    carved = next(f for f in findings if f["check"] == "commitlog.carved")
    assert carved["offset"] == _entry(151)["messagePhyOffset"] % size                            # its record


def _header(magic, size, index, term, pos, body_length) -> bytes:
    return dl.EntryHeader.build(dict(magic=magic, size=size, index=index, term=term, pos=pos, channel=0,
                                     chain_crc=0, body_crc=0, body_length=body_length))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600), st.integers(0, 5), st.integers(0, 700))
def test_entry_walk_never_raises_and_stays_inside(data, cut, hi):
    """Arbitrary bytes (and a real entry spliced in front) walked as a DLedger data file: the
    walk returns record starts inside the window, each behind a header naming its own pos."""
    real = (dledger_store() / "dledger-n0" / "data" / f"{0:020d}").read_bytes()[:_entry(0)["size"]]
    for window in (data, real + data, real[:len(real) - cut] + data):
        starts, stop, resume = _walk_entries(window, 0, 0, len(window), min(hi, len(window)) or len(window))
        assert stop is None or isinstance(stop, FileEnd)
        for s in starts:
            assert dl.ENTRY_BODY_OFFSET <= s <= len(window)
            h = dl.EntryHeader.parse(window[s - dl.ENTRY_BODY_OFFSET:s])
            assert h.magic == dl.ENTRY_MAGIC and h.pos == s - dl.ENTRY_BODY_OFFSET and s - 48 + h.size <= len(window)
        if resume is not None:
            assert 0 <= resume <= len(window)


def _plant_unit(root, index: int, field: str, value: int) -> None:
    path = root / "dledger-n0" / "index" / f"{0:020d}"
    offsets = {name: off for name, off in zip(dl.INDEX_UNIT_DTYPE.names,
                                               (dl.INDEX_UNIT_DTYPE.fields[n][1] for n in dl.INDEX_UNIT_DTYPE.names))}
    fmt = ">q" if dl.INDEX_UNIT_DTYPE.fields[field][0].itemsize == 8 else ">i"
    with open(path, "r+b") as fh:
        fh.seek(index * dl.INDEX_UNIT_SIZE + offsets[field])
        fh.write(struct.pack(fmt, value))


def _findings(root, check: str) -> list[dict]:
    r = run_cli("verify", root, "-f", "json")
    return [f for f in json.loads(r.out)["findings"] if f["check"] == check]


def test_entry_index_gap_and_term_going_back(tmp_path):
    root = dledger_copy(tmp_path / "s")
    path, position = _plant(root, _entry(200), "index", 7777)
    gap = _findings(root, "dledger.index-gap")
    assert [(f["file"], f["offset"]) for f in gap][:1] == [(path, position)]     # 7777 after 199
    root2 = dledger_copy(tmp_path / "t")
    _plant(root2, _entry(199), "term", 5)
    path, position = _plant(root2, _entry(200), "term", 0)                       # unchanged: 0 after 5
    term = _findings(root2, "dledger.term")
    assert [(f["file"], f["offset"]) for f in term] == [(path, position)]
    cross = _findings(root2, "dledger.index-file")                              # unit 199 still says term 0
    assert len(cross) == 1 and "entry 199" in cross[0]["message"]


def test_entry_index_file_disagreement_and_checkpoint_ahead(tmp_path):
    root = dledger_copy(tmp_path / "s")
    _plant_unit(root, 250, "pos", 12345)
    cross = _findings(root, "dledger.index-file")
    size = Store(root).commitlog.file_size
    assert [(f["offset"], "pos 12345" in f["message"]) for f in cross] == [(_entry(250)["pos"] % size, True)]
    (root / "dledger-n0" / "checkpoint").write_text("committedIndex=500\nendIndex=500\n")
    ahead = _findings(root, "dledger.checkpoint")
    assert len(ahead) == 1 and "500" in ahead[0]["message"] and ahead[0]["severity"] == "warning"


def test_several_members_are_named_and_one_can_be_picked(tmp_path):
    root = dledger_copy(tmp_path / "s")
    import subprocess
    subprocess.run(["cp", "-a", "--sparse=always", str(root / "dledger-n0"), str(root / "dledger-n1")], check=True)
    r = run_cli("verify", root)
    assert r.code == 2 and "several DLedger members (dledger-n0, dledger-n1)" in r.err
    r = run_cli("verify", root, "--commitlog-dirs", root / "dledger-n1" / "data", "-f", "json")
    assert r.code == 0 and json.loads(r.out)["summary"]["commitlog"]["records"] == 400


def _info(root) -> dict:
    r = run_cli("info", root, "-f", "json")
    assert r.code == 0, r.err
    return json.loads(r.out)[0]


def _forecast(root) -> dict:
    return json.loads(run_cli("verify", root, "-f", "json").out)["forecast"]


def test_recovery_of_the_reference_member_ends_where_upstreams_did():
    """Upstream's answers were taken after a fresh member recovered this store."""
    rec = _info(dledger_store())["dledger"]["recovery"]
    d = answers()["dledger"]
    assert (rec["end"], rec["last_entry"], rec["last_term"]) == (d["writePos"], d["ledgerEndIndex"], d["ledgerEndTerm"])
    assert (rec["first_entry"], rec["index_rewritten_from"], rec["exits"]) == (d["ledgerBeginIndex"], None, False)


def _synthetic_member(root, messages=2500):
    from test_dledger_write import GEOMETRY
    r = run_cli("write", root, "--synthetic", messages, "--layout", "dledger", "--body-size", "100-3000", *GEOMETRY)
    assert r.code == 0, r.err
    return Store(root).commitlog.files


def _first_header(seg) -> dict:
    return dict(dl.EntryHeader.parse(open(seg.path, "rb").read(dl.ENTRY_HEADER_SIZE)))


def test_recovery_starts_at_the_third_to_last_file_or_the_newest_older_one_that_matches_its_index(tmp_path):
    root = tmp_path / "s"
    files = _synthetic_member(root)
    assert len(files) > 5
    starts = lambda: (_info(root)["recovery"]["start_file"], _forecast(root)["start_file"])  # noqa: E731
    assert starts() == (files[-3].name, files[-3].name)
    for back in (3, 4):                       # the file's first entry disagrees with its index unit
        _plant_unit(root, _first_header(files[-back])["index"], "term", 9)
        assert starts() == (files[-back - 1].name, files[-back - 1].name)
    rec = _info(root)["dledger"]["recovery"]
    assert rec["first_entry"] == _first_header(files[-5])["index"]
    assert rec["index_rewritten_from"] == _first_header(files[-4])["index"]     # the first unit that disagrees
    assert rec["end"] == _info(root)["commitlog"]["valid_end"] and not rec["exits"]


def test_recovery_ends_at_an_index_gap_or_a_falling_term(tmp_path):
    root = dledger_copy(tmp_path / "s")
    path, position = _plant(root, _entry(200), "index", 7777)
    fc = _forecast(root)
    assert fc["valid_end"] == _entry(200)["pos"] and fc["end_file"] == path and fc["end_position"] == position
    assert "7777 follows 199" in fc["end_detail"]
    assert fc["dledger_recovery"]["last_entry"] == 199 and fc["dledger_recovery"]["entries"] == 200
    truncated = sum(t["units"] for t in fc["consume_queues_truncated"])
    assert truncated == 200                 # every unit of entries 200-399 is cut from its queue
    root2 = dledger_copy(tmp_path / "t")
    _plant(root2, _entry(299), "term", 5)
    fc = _forecast(root2)
    assert fc["valid_end"] == _entry(300)["pos"] and "term 0 after term 5" in fc["end_detail"]
    assert fc["dledger_recovery"]["index_rewritten_from"] == 299      # its unit still says term 0


def test_a_member_whose_walk_ends_more_than_a_file_before_the_last_exits(tmp_path):
    root = tmp_path / "s"
    files = _synthetic_member(root)
    head = _first_header(files[-3])
    second = head["pos"] + head["size"]     # the second entry of the third-to-last file
    with open(files[-3].path, "r+b") as fh:
        fh.seek(second - files[-3].start)
        fh.write(struct.pack(">i", 7))
    fc = _forecast(root)
    assert fc["valid_end"] == second and fc["dledger_recovery"]["exits"]
    assert fc["commitlog_files_deleted"] == [] and fc["consume_queues_truncated"] == []
    r = run_cli("verify", root)
    assert "the member EXITS instead of truncating" in r.err      # the forecast text: stderr when piped


@settings(max_examples=150, deadline=None)
@given(st.lists(st.binary(min_size=0, max_size=700), min_size=1, max_size=3), st.integers(0, 399))
def test_recovery_model_never_raises_and_ends_inside_the_data(tmp_path_factory, pieces, entry):
    """Real entries with arbitrary bytes spliced over them (several data files): the model of the
    member's recovery returns an end inside the files, at an entry boundary it walked."""
    from rmqtool.broker.dledger_recovery import dledger_recovery
    root = dledger_copy(tmp_path_factory.mktemp("d") / "s")
    files = Store(root).commitlog.files
    for k, piece in enumerate(pieces):
        seg = files[k % len(files)]
        at = (_entry(entry)["pos"] + 97 * k) % seg.size
        with open(seg.path, "r+b") as fh:
            fh.seek(at)
            fh.write(piece[:max(0, seg.size - at)])
    rec = dledger_recovery(Store(root))
    assert files[0].start <= rec.start_offset <= rec.end <= files[-1].start + Store(root).commitlog.file_size
    assert rec.entries >= 0 and (rec.last_entry is None) == (rec.entries == 0)
