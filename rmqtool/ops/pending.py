"""Pending work the broker keeps in its own queues (docs/format-pending.md): delayed messages not yet
delivered (``SCHEDULE_TOPIC_XXXX``) and 5.x transactions not yet resolved (``RMQ_SYS_TRANS_HALF_TOPIC``
against ``RMQ_SYS_TRANS_OP_HALF_TOPIC``).

Both read the queues as the broker serves them after the restart the recovery forecast predicts
(``ops.consumers.ServedQueue`` on ``restart_of(store)``) and the offsets the broker loads from
``config/`` (``io.brokerconfig``): ``delayOffset.json`` clamped as ``ScheduleMessageService.correctDelayOffset``
does, and the check group's committed offsets in ``consumerOffset.json``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from formats import commitlog as cl
from rmqtool.broker.delay import store_delay_levels, tags_code_of
from rmqtool.broker.queuekinds import parse_java_long
from rmqtool.broker.transactions import CHECK_GROUP, op_half_offsets
from rmqtool.io.brokerconfig import committed_offsets, delay_offsets
from rmqtool.output.system_topics import (PROPERTY_PRODUCER_GROUP, PROPERTY_TRANSACTION_CHECK_TIMES,
                                          PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET, TRANS_HALF_TOPIC,
                                          TRANS_OP_HALF_TOPIC, system_fields)

DELAYED_COLUMNS = ["delay_level", "queue_offset", "phy_offset", "real_topic", "real_queue_id", "keys", "uniq_key",
                   "store_timestamp", "due_ms", "tags", "note"]
TRANSACTION_COLUMNS = ["queue_id", "queue_offset", "phy_offset", "real_topic", "real_queue_id", "producer_group",
                       "uniq_key", "keys", "store_timestamp", "age_seconds", "check_times",
                       "prepared_queue_offset", "note"]


@dataclass
class Pending:
    """What one command found: its rows, one summary per queue, and how the config files were loaded."""
    rows: list = field(default_factory=list)
    queues: list = field(default_factory=list)
    loads: list = field(default_factory=list)


def _served(store, topic: str, queue_id: int, restart, present: set):
    from rmqtool.ops.consumers import ServedQueue
    return ServedQueue(store, topic, queue_id, restart, (topic, queue_id) in present)


def _record(reader, phy: int):
    """(topic, properties, store timestamp, body) of the message at ``phy``, None when none starts there."""
    rec = reader.read(phy)
    if rec is None:
        return None
    return rec.topic(), rec.properties(), int(rec.columns["store_timestamp"][0]), rec.body()


def _units(sq, start: int):
    """(queue offset, CommitLog offset, size, tagsCode) of every unit of ``sq`` in [start, max)."""
    if sq.view is None:
        return
    qoff, units = sq.units_array()
    keep = (qoff >= start) & (qoff < sq.max_offset)
    kept = units[keep]
    yield from zip(qoff[keep].tolist(), kept["commitlog_offset"].tolist(), kept["size"].tolist(),
                   kept["tags_code"].tolist())


# --- delayed messages ------------------------------------------------------------------------------

def schedule_levels(store, restart=None, levels_ms: list[int] | None = None) -> tuple[list[dict], object]:
    """One entry per delay level the broker knows (its ``messageDelayLevel`` table) or finds a schedule
    queue for: queue id (level - 1, ``delayLevel2QueueId``), delay, the queue's min/max after the
    restart, the offset ``delayOffset.json`` holds and the one the schedule service resumes from
    (``correctDelayOffset``: clamped into [min, max] for a level of the table that the file names; a
    level the file does not name starts at 0, and a start below min is moved to min by the first
    ``executeOnTimeUp``), and how many units wait past it. Returns (levels, how the file was loaded).
    ``levels_ms``: ``store_delay_levels(store)`` when the caller has it."""
    from rmqtool.ops.consumers import restart_of
    if restart is None:
        restart = restart_of(store)
    table, load = delay_offsets(store.config_dir)
    if levels_ms is None:
        levels_ms = store_delay_levels(store)
    present = {(r.topic, r.queue_id) for r in store.queues()}
    on_disk = {q + 1 for (t, q) in present if t == cl.SCHEDULE_TOPIC}
    out = []
    for level in sorted(set(range(1, len(levels_ms) + 1)) | on_disk):
        sq = _served(store, cl.SCHEDULE_TOPIC, level - 1, restart, present)
        in_table = level <= len(levels_ms)
        file_offset = table.get(level)
        loaded = file_offset
        if in_table and file_offset is not None:
            loaded = min(max(file_offset, sq.min_offset), sq.max_offset)
        start = max(loaded if loaded is not None else 0, sq.min_offset)
        out.append({"delay_level": level, "queue_id": level - 1,
                    "delay_ms": levels_ms[level - 1] if in_table else None, "in_table": in_table,
                    "min_offset": sq.min_offset, "max_offset": sq.max_offset, "file_offset": file_offset,
                    "offset_after_load": loaded, "start_offset": start,
                    "pending": max(sq.max_offset - start, 0), "served": sq})
    return out, load


def delayed(store, topic: str | None = None, limit: int | None = None, restart=None) -> Pending:
    """Delayed messages the schedule service has not delivered yet, level by level, oldest first:
    the units of each ``SCHEDULE_TOPIC_XXXX`` queue from the offset it resumes from to the queue's
    max. ``topic``: only messages for this real topic; ``limit``: at most this many rows."""
    from rmqtool.records.single import RecordReader
    levels_ms = store_delay_levels(store)
    levels, load = schedule_levels(store, restart, levels_ms)
    out = Pending(loads=[load])
    reader = RecordReader(store)
    try:
        for lv in levels:
            sq = lv.pop("served")
            out.queues.append(lv)
            for q, phy, size, tags_code in _units(sq, lv["start_offset"]):
                if limit is not None and len(out.rows) >= limit:
                    break
                got = _record(reader, phy)
                row = {"delay_level": lv["delay_level"], "queue_offset": q, "phy_offset": phy, "real_topic": None,
                       "real_queue_id": None, "keys": None, "uniq_key": None, "store_timestamp": None,
                       "due_ms": tags_code, "tags": None, "note": None}
                if got is None:
                    row["note"] = "no message starts at this CommitLog offset"
                else:
                    t, props, ts, body = got
                    sysf = system_fields(t, props, body)
                    row.update(real_topic=sysf["real_topic"], real_queue_id=sysf["real_queue_id"],
                               keys=props.get(cl.PROPERTY_KEYS), uniq_key=props.get(cl.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
                               store_timestamp=ts, tags=props.get(cl.PROPERTY_TAGS))
                    computed = tags_code_of(t, props, ts, levels_ms)
                    if computed != tags_code:
                        row["note"] = (f"the ConsumeQueue's due time {tags_code} is not store time + level delay "
                                       f"({computed}): the broker goes by the ConsumeQueue's")
                if topic is not None and row["real_topic"] != topic:
                    continue
                out.rows.append(row)
            sq.close()
    finally:
        reader.close()
        for lv in levels:
            if "served" in lv:
                lv.pop("served").close()
    return out


# --- transactions ----------------------------------------------------------------------------------

def _java_int(text: str) -> int:
    """``getInt`` of TransactionalMessageServiceImpl: Integer.parseInt, -1 where it throws."""
    value = parse_java_long(text, -(1 << 31), (1 << 31) - 1)
    return -1 if value is None else value


def _check_offsets(store) -> tuple[dict, list]:
    """{(topic, queue id): offset} the check group ``CID_RMQ_SYS_TRANS`` has committed, and the loads."""
    rows, loads = committed_offsets(store.config_dir)
    return {(r.topic, r.queue_id): r.offset for r in rows if r.group == CHECK_GROUP}, loads


def transactions(store, topic: str | None = None, limit: int | None = None, restart=None,
                 now_ms: int | None = None) -> Pending:
    """Half messages no op message resolves, queue by queue: each half queue from the offset the
    broker's check resumes from (``TransactionalMessageBridge.fetchConsumeOffset``: the check group's
    committed offset, the queue's min when it has none; clamped into [min, max] as the check's pull
    moves it) to its max, less every half whose queue offset an op message of the op queue with the
    same id names (``fillOpRemoveMap``), or, for a half the check put back with
    ``TRAN_PREPARED_QUEUE_OFFSET``, whose original offset one names (``checkPrepareQueueOffset``)."""
    from rmqtool.ops.consumers import restart_of
    from rmqtool.records.single import RecordReader
    if restart is None:
        restart = restart_of(store)
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    committed, loads = _check_offsets(store)
    present = {(r.topic, r.queue_id) for r in store.queues()}
    out = Pending(loads=loads)
    reader = RecordReader(store)
    try:
        for qid in sorted(q for (t, q) in present if t == TRANS_HALF_TOPIC):
            half = _served(store, TRANS_HALF_TOPIC, qid, restart, present)
            op = _served(store, TRANS_OP_HALF_TOPIC, qid, restart, present)
            try:
                named: set[int] = set()
                ops = 0
                for _, phy, _, _ in _units(op, op.min_offset):
                    got = _record(reader, phy)
                    if got is not None:
                        t, props, _, body = got
                        named.update(op_half_offsets(system_fields(t, props, body)["op_offsets"]))
                        ops += 1
                given = committed.get((TRANS_HALF_TOPIC, qid))
                start = half.min_offset if given is None else min(max(given, half.min_offset), half.max_offset)
                summary = {"queue_id": qid, "min_offset": half.min_offset, "max_offset": half.max_offset,
                           "check_offset": given, "start_offset": start,
                           "op_committed_offset": committed.get((TRANS_OP_HALF_TOPIC, qid)),
                           "op_messages": ops, "pending": 0}
                out.queues.append(summary)
                if given is not None and given < 0:
                    continue                # the check skips a queue with an illegal offset
                for q, phy, _, _ in _units(half, start):
                    if q in named:
                        continue
                    got = _record(reader, phy)
                    row = dict.fromkeys(TRANSACTION_COLUMNS)
                    row.update(queue_id=qid, queue_offset=q, phy_offset=phy)
                    if got is None:
                        row["note"] = "no message starts at this CommitLog offset"
                    else:
                        t, props, ts, body = got
                        prepared = props.get(PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET)
                        prepared = parse_java_long(prepared) if prepared is not None else None
                        if prepared is not None and prepared != -1 and prepared in named:
                            continue
                        sysf = system_fields(t, props, body)
                        checks = props.get(PROPERTY_TRANSACTION_CHECK_TIMES)
                        uniq = props.get(cl.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
                        row.update(real_topic=sysf["real_topic"], real_queue_id=sysf["real_queue_id"],
                                   producer_group=sysf["producer_group"], uniq_key=uniq,
                                   keys=props.get(cl.PROPERTY_KEYS), store_timestamp=ts,
                                   age_seconds=(now_ms - ts) / 1000,
                                   check_times=0 if checks is None else _java_int(checks),
                                   prepared_queue_offset=prepared)
                    summary["pending"] += 1
                    if topic is not None and row["real_topic"] != topic:
                        continue
                    if limit is None or len(out.rows) < limit:
                        out.rows.append(row)
            finally:
                half.close()
                op.close()
    finally:
        reader.close()
    return out
