"""Corruption corpus: mutated copies of the upstream reference stores, each defect found by verify
at the right file, byte offset and check name."""
from __future__ import annotations

import os
import struct

import numpy as np
import pytest

from conftest import load_answers
from corruptions import FILE_SIZE, HEAD, clfile, messages_in_file, patch
from formats import commitlog as cl
from formats.checkpoint import CHECKPOINT_OFFSETS
from formats.consumequeue import (CQ_UNIT_DTYPE, CQ_UNIT_OFFSETS, CQ_UNIT_SIZE, PRE_BLANK_COMMITLOG_OFFSET,
                                  PRE_BLANK_SIZE, PRE_BLANK_TAGS_CODE)
from formats.indexfile import INDEX_ENTRY_DTYPE, INDEX_HEADER_OFFSETS, entry_position, slot_position
from formats.derive import field_offsets
from formats.indexfile import IndexEntry
from rmqtool.io.indexfile import IndexFileReader
from rmqtool.io.store import Store
from rmqtool.ops.verify import VerifyOptions, verify

ENTRY = field_offsets(IndexEntry)


def read(path, offset: int, n: int) -> bytes:
    with open(path, "rb") as fh:
        fh.seek(offset)
        return fh.read(n)


def run(root, level="deep", **kw):
    return verify(Store(root), VerifyOptions(level=level, **kw))


def hits(report, check: str) -> list[tuple[str, int]]:
    return [(os.path.basename(f.file), f.offset) for f in report.findings if f.check == check]


def assert_found(report, check: str, file, offset: int, severity: str = "error"):
    got = [f for f in report.findings if f.check == check]
    where = [(os.path.basename(f.file or ""), f.offset, f.severity) for f in got]
    assert (os.path.basename(str(file)), offset, severity) in where, (check, where,
                                                                      [(f.check, f.offset) for f in report.findings])


# --- commitlog ------------------------------------------------------------------------------
def test_body_bit_flip_is_found_deep_only(store_copy):
    root = store_copy("basic")
    m = next(m for m in messages_in_file("basic", 5) if m["bodyLength"] > 20)
    base = 5 * FILE_SIZE
    pos = m["phyOffset"] - base
    body_at = pos + cl.body_position(m["sysFlag"]) + 7
    byte = read(clfile(root, base), body_at, 1)[0]
    patch(clfile(root, base), body_at, bytes([byte ^ 0x10]))
    deep = run(root)
    assert_found(deep, "commitlog.body-crc", clfile(root, base), pos)
    assert deep.exit_code() == 1
    shallow = run(root, "shallow")
    assert not hits(shallow, "commitlog.body-crc") and shallow.exit_code() == 0
    # the broker's recovery walk (CRC on) stops there only if it starts at or before that file
    assert deep.forecast["valid_end"] == 3728338


def test_bad_magic_is_found_and_the_rest_is_carved(store_copy):
    root = store_copy("basic")
    msgs = messages_in_file("basic", 3)
    m = msgs[len(msgs) // 2]
    base = 3 * FILE_SIZE
    pos = m["phyOffset"] - base
    patch(clfile(root, base), pos + HEAD["magic"], struct.pack(">I", 0x12345678))
    rep = run(root)
    assert_found(rep, "commitlog.magic", clfile(root, base), pos)
    nxt = msgs[len(msgs) // 2 + 1]["phyOffset"] - base
    assert_found(rep, "commitlog.carved", clfile(root, base), nxt, "warning")
    assert rep.summary["commitlog"]["carved_records"] == len(msgs) - len(msgs) // 2 - 1
    # carved records still match their CQ units: only the broken record's own unit is reported
    assert len(hits(rep, "cq.unit-target")) == 1
    excerpt = next(f.excerpt for f in rep.findings if f.check == "commitlog.magic")
    assert "[" in excerpt and "12345678" in excerpt


@pytest.mark.parametrize("value", [10 ** 9, -5])
def test_total_size_too_large_or_negative(store_copy, value):
    root = store_copy("basic")
    m = messages_in_file("basic", 2)[10]
    base = 2 * FILE_SIZE
    pos = m["phyOffset"] - base
    patch(clfile(root, base), pos + HEAD["total_size"], struct.pack(">i", value))
    rep = run(root, "shallow")
    assert_found(rep, "commitlog.total-size", clfile(root, base), pos)
    assert rep.exit_code() == 1


def test_stored_offset_differs_from_position(store_copy):
    root = store_copy("basic")
    m = messages_in_file("basic", 4)[3]
    base = 4 * FILE_SIZE
    pos = m["phyOffset"] - base
    patch(clfile(root, base), pos + HEAD["physical_offset"], struct.pack(">q", m["phyOffset"] + 1))
    rep = run(root)
    assert_found(rep, "commitlog.phy-offset", clfile(root, base), pos + HEAD["physical_offset"])


def test_torn_tail(store_copy):
    root = store_copy("crashed")
    last = load_answers("crashed")["messages"][-1]
    base = last["phyOffset"] // FILE_SIZE * FILE_SIZE
    pos = last["phyOffset"] - base
    patch(clfile(root, base), pos + 60, bytes(last["size"] - 60))    # header written, body pages lost
    rep = run(root)
    assert_found(rep, "commitlog.torn-tail", clfile(root, base), pos)
    assert rep.forecast["valid_end"] == last["phyOffset"]


def test_blank_size_wrong(store_copy):
    root = store_copy("basic")
    f = load_answers("basic")["commitlog"]["files"][1]
    blank = f["blankMagicAt"] - f["fromOffset"]
    patch(clfile(root, f["fromOffset"]), blank, struct.pack(">i", f["blankLength"] - 4))
    rep = run(root, "shallow")
    assert_found(rep, "commitlog.blank-size", clfile(root, f["fromOffset"]), blank)


def test_garbage_after_blank_is_a_warning(store_copy):
    root = store_copy("basic")
    f = next(f for f in load_answers("basic")["commitlog"]["files"] if f["blankLength"] and f["blankLength"] > 200)
    at = f["blankMagicAt"] - f["fromOffset"] + 100
    patch(clfile(root, f["fromOffset"]), at, b"\xab" * 16)
    rep = run(root, "shallow")
    assert_found(rep, "commitlog.after-blank", clfile(root, f["fromOffset"]), at, "warning")
    assert rep.exit_code() == 0 and rep.exit_code("warning") == 1


def test_missing_middle_file(store_copy):
    root = store_copy("basic")
    os.remove(clfile(root, 5 * FILE_SIZE))
    rep = run(root)
    assert_found(rep, "commitlog.contiguity", clfile(root, 6 * FILE_SIZE), 0)
    msgs = messages_in_file("basic", 5)
    # the units of the lost records point at a file that is gone
    assert any("no CommitLog file holds" in f.message for f in rep.findings if f.check == "cq.unit-target")
    assert len(msgs) > 0 and rep.exit_code() == 1


def test_wrong_file_size(store_copy):
    root = store_copy("basic")
    path = clfile(root, 7 * FILE_SIZE)
    os.truncate(path, FILE_SIZE - 1000)
    rep = run(root, "shallow")
    assert_found(rep, "commitlog.file-size", path, FILE_SIZE - 1000)


# --- consume queues ----------------------------------------------------------------------------
def cq_path(root, topic: str, qid: int, start: int = 0):
    return root / "consumequeue" / topic / str(qid) / f"{start:020d}"


def unit(path, k: int) -> np.void:
    return np.frombuffer(read(path, k * CQ_UNIT_SIZE, CQ_UNIT_SIZE), CQ_UNIT_DTYPE)[0]


def test_cq_unit_into_the_middle_of_a_record(store_copy):
    root = store_copy("basic")
    path = cq_path(root, "TopicTest", 0)
    u = unit(path, 5)
    patch(path, 5 * CQ_UNIT_SIZE + CQ_UNIT_OFFSETS["commitlog_offset"], struct.pack(">q", int(u["commitlog_offset"]) + 8))
    rep = run(root)
    assert_found(rep, "cq.unit-target", path, 5 * CQ_UNIT_SIZE)
    assert any("middle of the record" in f.message for f in rep.findings if f.check == "cq.unit-target")
    # the record itself now lacks its unit
    assert hits(rep, "cq.missing")


def test_cq_unit_with_wrong_size(store_copy):
    root = store_copy("basic")
    path = cq_path(root, "OrderTopic", 2)
    u = unit(path, 9)
    patch(path, 9 * CQ_UNIT_SIZE + CQ_UNIT_OFFSETS["size"], struct.pack(">i", int(u["size"]) + 4))
    rep = run(root)
    assert_found(rep, "cq.unit-size", path, 9 * CQ_UNIT_SIZE + CQ_UNIT_OFFSETS["size"])


def test_cq_gap(store_copy):
    root = store_copy("basic")
    path = cq_path(root, "pay_events.v1", 1)
    patch(path, 12 * CQ_UNIT_SIZE, bytes(CQ_UNIT_SIZE))
    rep = run(root, "shallow")
    assert_found(rep, "cq.gap", path, 12 * CQ_UNIT_SIZE)


def test_cq_tags_code(store_copy):
    root = store_copy("basic")
    path = cq_path(root, "TopicTest", 1)
    u = unit(path, 3)
    patch(path, 3 * CQ_UNIT_SIZE + CQ_UNIT_OFFSETS["tags_code"], struct.pack(">q", int(u["tags_code"]) + 1))
    rep = run(root)
    assert_found(rep, "cq.tags-code", path, 3 * CQ_UNIT_SIZE + CQ_UNIT_OFFSETS["tags_code"])


def test_pre_blank_sentinel_prefix_is_not_an_error(store_copy):
    """Expire commitlog file 0 and give one queue the broker's pre-blank prefix for the lost records."""
    root = store_copy("basic")
    os.remove(clfile(root, 0))
    path = cq_path(root, "TopicTest", 0)
    units = np.frombuffer(read(path, 0, os.path.getsize(path)), CQ_UNIT_DTYPE).copy()
    expired = int(np.count_nonzero((units["size"] > 0) & (units["commitlog_offset"] < FILE_SIZE)))
    assert 0 < expired < len(units)
    units["commitlog_offset"][:expired] = PRE_BLANK_COMMITLOG_OFFSET
    units["size"][:expired] = PRE_BLANK_SIZE
    units["tags_code"][:expired] = PRE_BLANK_TAGS_CODE
    patch(path, 0, units.tobytes())
    rep = run(root)
    assert rep.sink.total("error") == 0, [(f.check, f.message) for f in rep.findings]
    assert rep.exit_code() == 0
    # ... a sentinel after real units is a filler (a queue offset with no message: a warning)
    patch(path, (expired + 3) * CQ_UNIT_SIZE, units[:1].tobytes())
    rep = run(root, "shallow")
    assert_found(rep, "cq.filler", path, (expired + 3) * CQ_UNIT_SIZE, "warning")


# --- index ----------------------------------------------------------------------------------------
def index_file(root, i: int):
    return sorted((root / "index").iterdir())[i]


def reader(root, i: int):
    store = Store(root)
    return IndexFileReader(index_file(root, i), store.index_geometry), store.index_geometry.hash_slots


def test_index_chain_loop(store_copy):
    root = store_copy("basic")
    r, S = reader(root, 3)
    n = r.header().index_count
    e = n // 2
    r.close()
    at = entry_position(S, e) + ENTRY["prev_index"]
    patch(index_file(root, 3), at, struct.pack(">i", e))
    rep = run(root, "shallow")
    assert_found(rep, "index.chain-loop", index_file(root, 3), at)


def test_index_slot_past_index_count(store_copy):
    root = store_copy("basic")
    r, S = reader(root, 2)
    count = r.header().index_count
    slots = r.slots()
    r.close()
    s = int(np.flatnonzero(slots > 0)[0])
    patch(index_file(root, 2), slot_position(S, s), struct.pack(">i", count + 7))
    rep = run(root, "shallow")
    assert_found(rep, "index.slot-range", index_file(root, 2), slot_position(S, s))


def test_index_header_count_mismatch(store_copy):
    root = store_copy("basic")
    r, S = reader(root, 4)
    h = r.header()
    r.close()
    at = INDEX_HEADER_OFFSETS["hash_slot_count"]
    patch(index_file(root, 4), at, struct.pack(">i", h.hash_slot_count + 3))
    rep = run(root, "shallow")
    assert_found(rep, "index.header-count", index_file(root, 4), at)
    # indexCount lowered: entries remain past it
    patch(index_file(root, 4), at, struct.pack(">i", h.hash_slot_count))
    patch(index_file(root, 4), INDEX_HEADER_OFFSETS["index_count"], struct.pack(">i", h.index_count - 5))
    rep = run(root, "shallow")
    assert_found(rep, "index.header-count", index_file(root, 4), entry_position(S, h.index_count - 5))


def test_index_entry_pointing_at_a_record_with_other_keys(store_copy):
    root = store_copy("basic")
    r, S = reader(root, 6)
    entries = r.entries()
    r.close()
    e = 20
    own = int(entries[e]["phy_offset"])
    other = next(int(x["phy_offset"]) for x in entries[1:] if int(x["phy_offset"]) != own
                 and int(x["key_hash"]) != int(entries[e]["key_hash"]))
    patch(index_file(root, 6), entry_position(S, e) + ENTRY["phy_offset"], struct.pack(">q", other))
    rep = run(root)
    assert_found(rep, "index.entry-key", index_file(root, 6), entry_position(S, e))


def test_truncated_index_file(store_copy):
    root = store_copy("basic")
    path = index_file(root, 5)
    os.truncate(path, 5000)
    rep = run(root)
    assert_found(rep, "index.file-size", path, 5000)
    assert rep.exit_code() == 1


# --- checkpoint -------------------------------------------------------------------------------------
def test_checkpoint_ahead_of_the_data(store_copy):
    root = store_copy("basic")
    newest = max(m["storeTimestamp"] for m in load_answers("basic")["messages"])
    patch(root / "checkpoint", CHECKPOINT_OFFSETS["physic_msg_timestamp"], struct.pack(">q", newest + 86_400_000))
    rep = run(root, "shallow")
    assert_found(rep, "checkpoint.ahead", root / "checkpoint", CHECKPOINT_OFFSETS["physic_msg_timestamp"])


def test_resync_never_raises_on_random_garbage(store_copy):
    """Overwrite records in the middle of a file with noise: findings, no exception, later records carved."""
    root = store_copy("mixed")
    msgs = messages_in_file("mixed", 2)
    base = 2 * FILE_SIZE
    first = msgs[len(msgs) // 3]
    pos = first["phyOffset"] - base
    rng = np.random.default_rng(5)
    patch(clfile(root, base), pos + 30, rng.integers(0, 256, 3000, dtype=np.uint8).tobytes())
    rep = run(root)
    assert rep.exit_code() == 1
    structural = [f for f in rep.findings if f.check in ("commitlog.magic", "commitlog.length",
                                                         "commitlog.total-size", "commitlog.torn-tail")]
    assert any(f.file.endswith(f"{base:020d}") and f.offset == pos for f in structural), rep.findings
    after = [m for m in msgs if m["phyOffset"] - base > pos + 3030]
    if after:
        assert rep.summary["commitlog"]["carved_records"] >= len(after)
