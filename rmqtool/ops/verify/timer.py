"""verify's checks of a 5.x timer store (docs/format-timer.md): the timer log's units (each one
pointing at the parked message it was written for), the wheel's slots and their chains
(bounded and loop-safe: every step goes back in the log), the timer checkpoint against both."""
from __future__ import annotations

from formats import timer as tf
from rmqtool.io.timerstore import LogEnd, TimerStore, Unit
from rmqtool.records.single import RecordReader


def check_timer_store(store, sink, valid_end: int) -> dict | None:
    """Findings into ``sink``; returns the summary (None: no timer store)."""
    ts = TimerStore.of(store)
    if ts is None:
        return None
    units = 0
    reader = RecordReader(store)
    try:
        for item in ts.walk_log():
            if isinstance(item, LogEnd):
                if item.kind == "corrupt":
                    sink.add("timer.unit", item.path, item.position, f"timer log walk stops: {item.detail}")
                elif item.kind == "blank" and item.detail:
                    sink.add("timer.unit", item.path, item.position, f"timer log filler: {item.detail}")
                continue
            units += 1
            _check_unit(item, reader, sink, valid_end)
    finally:
        reader.close()
    slots = ts.slots()
    log_end = ts.log_end()
    for s in slots:
        at = s.index * tf.SLOT_SIZE
        if s.time_ms > 0 and tf.slot_index(s.time_ms, ts.precision_ms()) != s.index:
            sink.add("timer.slot", ts.wheel_path, at, f"slot {s.index} holds time {s.time_ms}, which belongs in slot "
                     f"{tf.slot_index(s.time_ms, ts.precision_ms())}", excerpt_len=tf.SLOT_SIZE)
            continue
        if not (0 <= s.first_pos <= s.last_pos < log_end):
            sink.add("timer.slot", ts.wheel_path, at, f"slot {s.index}: first/last unit {s.first_pos}/{s.last_pos} "
                     f"outside the timer log [0, {log_end})", excerpt_len=tf.SLOT_SIZE)
            continue
        chain = ts.chain(s)
        if chain.problem:
            sink.add("timer.slot-chain", ts.wheel_path, at, f"slot {s.index} ({s.time_ms}): {chain.problem}",
                     excerpt_len=tf.SLOT_SIZE)
    cp = ts.checkpoint()
    if cp is not None and cp["last_timer_log_flush_pos"] > log_end:
        sink.add("timer.checkpoint", ts.checkpoint_path, 8, f"lastTimerLogFlushPos {cp['last_timer_log_flush_pos']} "
                 f"is past the timer log's end {log_end}", excerpt_len=8)
    return {"timer_log_units": units, "wheel_slots": len(slots), "precision_ms": ts.precision_ms()}


def _check_unit(u: Unit, reader: RecordReader, sink, valid_end: int) -> None:
    if u.offset_py + u.size_py > valid_end:
        return                              # past the CommitLog's valid end: recovery truncates it
    rec = reader.read(u.offset_py)
    why = None
    if rec is None:
        why = "no record starts there"
    elif int(rec.size[0]) != u.size_py:
        why = f"the record is {int(rec.size[0])} bytes, the unit says {u.size_py}"
    elif rec.topic() != tf.TIMER_TOPIC:
        why = f"the record is in {rec.topic()}, not {tf.TIMER_TOPIC}"
    if why:
        sink.add("timer.unit-record", u.path, u.position, f"unit at timer log position {u.pos} -> CommitLog offset "
                 f"{u.offset_py}: {why}", excerpt_len=tf.UNIT_SIZE)
