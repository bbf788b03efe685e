"""The 5.x timer store (upstream-written, fixtures/reference/timer.tar.gz): every timer log unit,
wheel slot, chain and checkpoint value as upstream read them; the pending timers; verify clean,
and damage planted in units, slots and the checkpoint found at its file and offset."""
from __future__ import annotations

import json
import struct
from functools import lru_cache

from hypothesis import given, settings, strategies as st

from conftest import load_answers, run_cli, timer_copy, timer_store_root
from formats import timer as tf
from rmqtool.io.store import Store
from rmqtool.io.timerstore import LogEnd, TimerStore, Unit, _file_units


@lru_cache(maxsize=None)
def answers() -> dict:
    return load_answers("timer")["timer"]


def _jsonl(*args) -> list[dict]:
    r = run_cli(*args, "-f", "jsonl")
    assert r.code == 0, r.err
    return [json.loads(line) for line in r.out.splitlines()]


def test_every_timer_log_unit_is_where_upstream_read_it():
    rows = [r for r in _jsonl("dump", "timerlog", timer_store_root()) if r["kind"] == "UNIT"]
    want = answers()["timerLogUnits"]
    assert len(rows) == len(want) == 39
    for r, u in zip(rows, want):
        assert (r["pos"], r["size"], r["prev_pos"], r["magic"], r["enqueue_time_ms"], r["slot_time_ms"]) == \
            (u["pos"], u["size"], u["prevPos"], u["magic"], u["enqueueTimeMs"], u["delayedTimeMs"])
        assert (r["offset_py"], r["size_py"], r["real_topic_hash"], r["reserved"]) == \
            (u["offsetPy"], u["sizePy"], u["realTopicHash"], u["reserved"])
    ends = [r for r in _jsonl("dump", "timerlog", timer_store_root()) if r["kind"] == "END"]
    first = answers()["timerLogFiles"][0]
    assert (ends[0]["end"], ends[0]["position"]) == ("blank", first["blankAt"])


def test_wheel_slots_chains_and_checkpoint_as_upstream():
    ts = TimerStore(timer_store_root())
    assert ts.precision_ms() == answers()["precisionMs"]
    slots = {s.index: s for s in ts.slots()}
    for p in answers()["pendingSlots"]:
        s = slots[p["slotIndex"]]
        assert (s.time_ms, s.first_pos, s.last_pos, s.num, s.magic) == \
            (p["timeMs"], p["firstPos"], p["lastPos"], p["num"], p["magic"])
        assert [u.pos for u in ts.chain(s).units] == p["chainFromLastPos"]
    cp = ts.checkpoint()
    want = answers()["timerCheckpointFile"]
    assert (cp["last_read_time_ms"], cp["last_timer_log_flush_pos"], cp["last_timer_queue_offset"],
            cp["master_timer_queue_offset"], cp["data_version_counter"]) == \
        (want["lastReadTimeMs"], want["lastTimerLogFlushPos"], want["lastTimerQueueOffset"],
         want["masterTimerQueueOffset"], want["dataVersion"]["counter"])


def test_pending_timers_leave_out_the_cancelled_one():
    rows = _jsonl("query-timer", timer_store_root())
    slots = answers()["pendingSlots"]
    assert len(slots) == 20 and len(rows) == 19            # 20 pending puts, one cancelled
    units = {u["pos"]: u for u in answers()["timerLogUnits"]}
    cancel = next(u for u in units.values() if u["magic"] & tf.MAGIC_DELETE)
    assert cancel["msgTimerDelUniqKey"] not in {r["uniq_key"] for r in rows}
    for r in rows:
        u = units[r["timer_log_pos"]]
        assert (r["phy_offset"], r["uniq_key"], r["real_topic"], r["due_ms"]) == \
            (u["offsetPy"], u["msgUniqKey"], u["msgRealTopic"], u["delayedTimeMs"])
        assert r["timer_out_ms"] == int(u["msgTimerOutMs"])
    early = sorted(r["due_ms"] for r in rows)[5]
    assert len(_jsonl("query-timer", timer_store_root(), "--due-before", str(early))) == 5
    one = rows[3]
    assert [r["uniq_key"] for r in _jsonl("query-timer", timer_store_root(), "--key", one["uniq_key"])] == \
        [one["uniq_key"]]
    r = run_cli("query-timer", timer_store_root(), "--topic", "NoSuchTopic")
    assert r.code == 1


def test_info_and_verify_on_the_timer_store():
    info = json.loads(run_cli("info", timer_store_root(), "-f", "json").out)[0]
    assert info["timer"]["pending"] == 19 and info["timer"]["precision_ms"] == 500
    rep = json.loads(run_cli("verify", timer_store_root(), "--level", "deep", "-f", "json").out)
    assert rep["exit_code"] == 0 and rep["findings"] == [] and rep["summary"]["timer"]["timer_log_units"] == 39


def _findings(root, check):
    rep = json.loads(run_cli("verify", root, "-f", "json").out)
    return [(f["file"], f["offset"]) for f in rep["findings"] if f["check"] == check]


def _patch(path, at, fmt, value):
    with open(path, "r+b") as fh:
        fh.seek(at)
        fh.write(struct.pack(fmt, value))


def test_damage_in_units_slots_and_checkpoint_is_found(tmp_path):
    root = timer_copy(tmp_path / "s")
    log0 = root / "timerlog" / f"{0:020d}"
    _patch(log0, 5 * tf.UNIT_SIZE + tf.UNIT_OFFSETS["offset_py"], ">q", 12345)
    assert _findings(root, "timer.unit-record") == [(str(log0), 5 * tf.UNIT_SIZE)]
    root2 = timer_copy(tmp_path / "t")
    _patch(root2 / "timerlog" / f"{0:020d}", 7 * tf.UNIT_SIZE, ">i", 99)
    assert _findings(root2, "timer.unit") == [(str(root2 / "timerlog" / f"{0:020d}"), 7 * tf.UNIT_SIZE)]
    root3 = timer_copy(tmp_path / "u")
    slot = next(s for s in TimerStore(root3).slots() if s.num >= 3)
    last = TimerStore(root3).unit_at(slot.last_pos)
    size = TimerStore(root3).log_file_size
    base = (last.pos // size) * size
    _patch(root3 / "timerlog" / f"{base:020d}", last.pos - base + tf.UNIT_OFFSETS["prev_pos"], ">q", slot.last_pos)
    wheel = str(root3 / "timerwheel")
    assert (wheel, slot.index * tf.SLOT_SIZE) in _findings(root3, "timer.slot-chain")   # a loop, ended
    root4 = timer_copy(tmp_path / "v")
    _patch(root4 / "config" / "timercheck", 8, ">q", 10 ** 6)
    assert _findings(root4, "timer.checkpoint") == [(str(root4 / "config" / "timercheck"), 8)]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.integers(0, 6))
def test_timer_log_walk_never_raises_and_stays_inside(data, units):
    """Arbitrary bytes after some real units: units are whole, inside the file, and one end is named."""
    real = (timer_store_root() / "timerlog" / f"{0:020d}").read_bytes()[:units * tf.UNIT_SIZE]
    items = list(_file_units("f", 0, real + data))
    ends = [i for i in items if isinstance(i, LogEnd)]
    assert len(ends) == 1 and items[-1] is ends[0]
    for u in items[:-1]:
        assert isinstance(u, Unit) and u.position + tf.UNIT_SIZE <= len(real + data) and u.size == tf.UNIT_SIZE


def test_a_store_without_timers_is_named(tmp_path):
    from conftest import reference_store
    r = run_cli("query-timer", reference_store("basic"))
    assert r.code == 2 and "not a timer store" in r.err
    assert "timer" not in json.loads(run_cli("info", reference_store("basic"), "-f", "json").out)[0]
    assert Store(reference_store("basic"))                 # untouched


def test_rebuild_timerwheel_is_byte_identical_and_repairs_a_damaged_wheel(tmp_path):
    out = tmp_path / "wheel"
    assert run_cli("rebuild", "timerwheel", timer_store_root(), "--output", out).code == 0
    assert out.read_bytes() == (timer_store_root() / "timerwheel").read_bytes()
    root = timer_copy(tmp_path / "s")
    ts = TimerStore(root)
    pending = [s for s in ts.slots() if s.time_ms >= ts.checkpoint()["last_read_time_ms"]]
    _patch(root / "timerwheel", pending[2].index * tf.SLOT_SIZE, ">q", 0)            # a pending slot lost
    _patch(root / "timerwheel", pending[2].index * tf.SLOT_SIZE + 16, ">q", 0)
    assert (str(root / "timerwheel"), pending[2].index * tf.SLOT_SIZE) in _findings(root, "timer.wheel")
    dry = json.loads(run_cli("rebuild", "timerwheel", root, "--dry-run", "-f", "json").out)[0]
    assert dry["differing_slots"] == 1
    r = run_cli("rebuild", "timerwheel", root, "--yes", "-f", "json")
    assert r.code == 0, r.err
    assert (root / "timerwheel").read_bytes() == (timer_store_root() / "timerwheel").read_bytes()
    backup = json.loads(r.out)[0]["backup"]
    assert backup and (tmp_path / "s" / backup.rsplit("/", 1)[-1]).exists()
    assert _findings(root, "timer.wheel") == []


def test_rebuild_timerwheel_killed_mid_install_leaves_a_whole_wheel(tmp_path):
    import os
    import subprocess
    import sys
    for step in ("built", "journal", "exchanged", "moved"):
        root = timer_copy(tmp_path / step)
        _patch(root / "timerwheel", 0, ">q", 5)                     # something to repair
        damaged = (root / "timerwheel").read_bytes()
        env = dict(os.environ, RMQTOOL_CRASH_AT=step)
        p = subprocess.run([sys.executable, "-m", "rmqtool", "rebuild", "timerwheel", str(root), "--yes"],
                           env=env, capture_output=True)
        assert p.returncode != 0, step
        assert (root / "timerwheel").read_bytes() in (damaged, (timer_store_root() / "timerwheel").read_bytes())
        assert run_cli("rebuild", "timerwheel", root, "--yes").code == 0, step          # recovers, then rebuilds
        assert (root / "timerwheel").read_bytes() == (timer_store_root() / "timerwheel").read_bytes(), step
        assert not [p.name for p in root.iterdir() if "rmqtool-tmp" in p.name or p.name.endswith(".journal")]


def test_dump_carries_the_timer_due_time():
    units = {u["offsetPy"]: u for u in answers()["timerLogUnits"]}
    rows = [r for r in _jsonl("dump", "commitlog", timer_store_root()) if r["kind"] == "MESSAGE"]
    parked = [r for r in rows if r["phy_offset"] in units]
    assert len(parked) == 39
    for r in parked:
        want = units[r["phy_offset"]]["msgTimerOutMs"]
        assert r["timer_out_ms"] == (int(want) if want is not None else None)
