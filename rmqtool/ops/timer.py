"""The timer store as rows (dump), the pending timers (query-timer, info) and its checks (verify).

Pending: the units of every wheel slot at or after the checkpoint's read time (the dequeue
pointer), each slot's chain walked from its last unit back; a delete unit (magic DELETE, its
message carrying ``TIMER_DEL_UNIQKEY``) cancels the message of that UNIQ_KEY in its slot, as the
dequeue does. docs/format-timer.md.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from formats import commitlog as cl
from formats import timer as tf
from rmqtool.errors import RefusedError, UsageError
from rmqtool.io.timerstore import Chain, LogEnd, TimerStore, Unit
from rmqtool.records.single import RecordReader


def timer_store(store, precision_ms: int | None = None) -> TimerStore:
    ts = TimerStore.of(store, precision_ms)
    if ts is None:
        raise UsageError("not a timer store: no timerwheel or timerlog/ (the broker's timerWheelEnable=false?)",
                         store.root)
    return ts


def timerlog_rows(ts: TimerStore) -> Iterator[dict]:
    for item in ts.walk_log():
        if isinstance(item, Unit):
            yield {"kind": "UNIT", "file": item.path, **item.as_dict()}
        else:
            yield {"kind": "END", "file": item.path, "position": item.position, "end": item.kind,
                   "detail": item.detail or None}


def timerwheel_rows(ts: TimerStore) -> Iterator[dict]:
    for s in ts.slots():
        yield {"kind": "SLOT", "file": str(ts.wheel_path), "position": s.index * tf.SLOT_SIZE, **s.as_dict()}


def timercheck_rows(ts: TimerStore) -> Iterator[dict]:
    cp = ts.checkpoint()
    if cp is None:
        raise UsageError("no config/timercheck", ts.root)
    yield {"file": str(ts.checkpoint_path), "precision_ms": ts.precision_ms(), **cp}


def _message(reader: RecordReader, unit: Unit) -> dict:
    rec = reader.read(unit.offset_py)
    if rec is None:
        return {"record": None}
    props = rec.properties()
    return {"record": rec, "topic": rec.topic(), "props": props,
            "uniq_key": props.get(cl.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)}


def is_delete(unit: Unit) -> bool:
    """The dequeue's delete request: a DELETE unit that is not rolling (a rolling one is re-enqueued)."""
    return bool(unit.magic & tf.MAGIC_DELETE) and not unit.magic & tf.MAGIC_ROLL


def _pending_in_slot(slot, chain: Chain, reader: RecordReader) -> list[dict]:
    msgs = [(u, _message(reader, u)) for u in chain.units]
    cancelled = {m["props"].get(tf.PROPERTY_TIMER_DEL_UNIQKEY) for u, m in msgs
                 if is_delete(u) and m["record"] is not None}
    out = []
    for u, m in reversed(msgs):                         # oldest first, as enqueued
        if is_delete(u):
            continue
        rec, props = m["record"], m.get("props", {})
        if rec is not None and m["uniq_key"] in cancelled:
            continue
        out.append({
            "slot_index": slot.index, "due_ms": slot.time_ms, "roll": bool(u.magic & tf.MAGIC_ROLL),
            "timer_out_ms": _int(props.get(tf.PROPERTY_TIMER_OUT_MS)),
            "roll_times": _int(props.get(tf.PROPERTY_TIMER_ROLL_TIMES)) or 0,
            "real_topic": props.get(cl.PROPERTY_REAL_TOPIC), "real_queue_id": _int(props.get(cl.PROPERTY_REAL_QUEUE_ID)),
            "uniq_key": m.get("uniq_key"), "keys": props.get(cl.PROPERTY_KEYS), "tags": props.get(cl.PROPERTY_TAGS),
            "enqueue_time_ms": u.enqueue_time_ms, "timer_log_pos": u.pos,
            "phy_offset": u.offset_py, "size": u.size_py,
            "store_timestamp": int(rec.store_timestamp[0]) if rec is not None else None,
            "note": None if rec is not None else "no record at the unit's CommitLog offset",
        })
    return out


def _int(text) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def pending_timers(store, ts: TimerStore, due_before: int | None = None, topic: str | None = None,
                   key: str | None = None) -> Iterator[dict]:
    """Every timer message still waiting: its slot, due time, roll, the record that carries it."""
    cp = ts.checkpoint()
    read_from = cp["last_read_time_ms"] if cp else 0
    reader = RecordReader(store)
    try:
        for slot in sorted(ts.slots(), key=lambda s: s.time_ms):
            if slot.time_ms < read_from or (due_before is not None and slot.time_ms >= due_before):
                continue
            for row in _pending_in_slot(slot, ts.chain(slot), reader):
                if topic is not None and row["real_topic"] != topic:
                    continue
                if key is not None and key != row["uniq_key"] and key not in cl.split_keys(row["keys"]):
                    continue
                yield row
    finally:
        reader.close()


def timer_summary(store, ts: TimerStore) -> dict:
    """``info``'s timer section: the checkpoint, precision, log and the pending timers by due time."""
    rows = list(pending_timers(store, ts))
    ends = [e for e in ts.walk_log() if isinstance(e, LogEnd)]
    return {
        "precision_ms": ts.precision_ms(), "checkpoint": ts.checkpoint(),
        "timer_log_files": len(ts.log_files()), "timer_log_end": ts.log_end(),
        "timer_log_damage": [{"file": e.path, "position": e.position, "detail": e.detail}
                             for e in ends if e.kind == "corrupt"],
        "pending": len(rows), "rolling": sum(1 for r in rows if r["roll"]),
        "first_due_ms": min((r["due_ms"] for r in rows), default=None),
        "last_due_ms": max((r["due_ms"] for r in rows), default=None),
    }


@dataclass
class WheelRebuild:
    target: str
    output: str | None
    dry_run: bool
    units: int
    slots: int
    differing_slots: int                 # slots whose 32 bytes differ from the current wheel's
    precision_ms: int
    backup: str | None = None
    recovered: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"kind": "timerwheel", **self.__dict__}


#: ``rebuild timerwheel``'s ``--output`` names a file
WHEEL_BUILT_ELSEWHERE = "the wheel into a local file with --output FILE"


def rebuild_timerwheel(store, output: Path | None = None, dry_run: bool = False, precision_ms: int | None = None,
                       confirm=None) -> WheelRebuild:
    """``build_timerwheel`` under the store's writer lock (``storelock.rebuild_lock``)."""
    from rmqtool.io.storelock import rebuild_lock
    with rebuild_lock(store, "rmqtool rebuild timerwheel", dry_run, output, WHEEL_BUILT_ELSEWHERE):
        return build_timerwheel(store, output, dry_run, precision_ms, confirm)


def build_timerwheel(store, output: Path | None = None, dry_run: bool = False, precision_ms: int | None = None,
                     confirm=None) -> WheelRebuild:
    """Regenerate ``timerwheel`` from the timer log (``broker.timerwheel``): byte-identical to the
    broker's when the log holds every unit since the wheel was new. Built beside the wheel (or into
    ``output``), fsynced, swapped in with the old wheel kept as a dated backup (``io.install``).
    The caller holds the store's writer lock (``rebuild_timerwheel``, ``ops.rebuild.rebuild_all``)."""
    from rmqtool.broker.timerwheel import wheel_slots
    from rmqtool.io import install as inst, ownership
    ts = timer_store(store, precision_ms)
    from rmqtool.io.storelock import refuse_in_place_on_object_storage
    refuse_in_place_on_object_storage(store, output, dry_run, WHEEL_BUILT_ELSEWHERE)
    if output is None and not dry_run and store.is_live():
        raise RefusedError("a running broker holds the store lock; stop it, or build elsewhere with --output",
                           store.lock_path)
    units = [u for u in ts.walk_log() if isinstance(u, Unit)]
    precision = ts.precision_ms()
    slots = wheel_slots(units, precision)
    current = {s.index: s for s in ts.slots()} if ts.wheel_path.is_file() else {}
    differing = sum(1 for i, v in slots.items()
                    if i not in current or (current[i].time_ms // precision, current[i].first_pos, current[i].last_pos,
                                            current[i].num, current[i].magic) != v)
    differing += sum(1 for i in current if i not in slots)
    result = WheelRebuild(str(ts.wheel_path), str(output) if output else None, dry_run, len(units), len(slots),
                          differing, precision)
    if dry_run:
        return result
    target = Path(output) if output is not None else ts.wheel_path
    if output is not None and target.exists():
        raise RefusedError("the output exists; rmqtool writes only new files", target)
    if output is None:
        result.recovered = inst.recover_leftovers(target)
        if confirm is not None and not confirm(result):
            return result
    build = target.with_name(f"{target.name}{inst.TMP_MARK}{inst.utc_stamp()}") if output is None else target
    fd = os.open(build, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        if output is None:                                  # owned like the wheel it replaces, from the start
            ownership.inherit(build, like=target, fd=fd)
        os.ftruncate(fd, tf.WHEEL_FILE_SIZE)               # the broker's full length, holes where slots are empty
        for index, slot in sorted(slots.items()):
            inst.pwrite_all(fd, tf.SLOT_STRUCT.pack(*slot), index * tf.SLOT_SIZE)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(build)
        raise
    os.close(fd)
    if output is None:
        done = inst.install(target, build)
        result.backup = done.backup
    return result
