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
    _check_against_the_log(ts, slots, cp, sink)
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


def _check_against_the_log(ts: TimerStore, slots, cp, sink) -> None:
    """Every pending slot (at or after the read time) as the enqueue of the timer log's units leaves it
    (``broker.timerwheel``): a slot lost or changed is a wheel the dequeue would read wrong."""
    from rmqtool.broker.timerwheel import wheel_slots
    precision = ts.precision_ms()
    read_from = cp["last_read_time_ms"] if cp else 0
    want = {i: v for i, v in wheel_slots((u for u in ts.walk_log() if isinstance(u, Unit)), precision).items()
            if v[0] * precision >= read_from}
    have = {s.index: (s.time_ms // precision, s.first_pos, s.last_pos, s.num, s.magic) for s in slots}
    for index, v in sorted(want.items()):
        if have.get(index) != v:
            got = have.get(index)
            sink.add("timer.wheel", ts.wheel_path, index * tf.SLOT_SIZE,
                     f"slot {index} ({v[0] * precision}) holds {'nothing' if got is None else got}, the timer log's "
                     f"units put (time/precision, first, last, num, magic) = {v} there; `rmqtool rebuild timerwheel` "
                     "regenerates it", excerpt_len=tf.SLOT_SIZE)
