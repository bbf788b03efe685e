"""Deep checks of the 5.x queue kinds beside the plain ConsumeQueue (``broker.queuekinds``;
docs/format-lmq-batchcq.md).

- A light queue's unit (``%LMQ%…``) points at a record of another topic that names the queue
  in its multi-dispatch properties; its size and tagsCode are the record's. The offset the
  record names can differ from the unit's position: the broker appends at the queue's end
  when earlier named offsets were never dispatched (its "logic queue order maybe wrong" case,
  as in upstream's own stores). Each unit's record is read on its own (``records.single``).
- A BatchConsumeQueue unit points at a record of its topic and queue, with the record's
  size, store time, tagsCode, base offset and inner count; consecutive units' base offsets
  follow on (base + count). Records of BatchCQ topics are dispatched there, not to a
  ConsumeQueue: ``batch_dispatched`` tells the missing-unit check which ones have a unit.
"""
from __future__ import annotations

import numpy as np

from formats import commitlog as cl
from formats.consumequeue import BCQ_UNIT_OFFSETS, BCQ_UNIT_SIZE
from rmqtool.broker.delay import store_delay_levels, tags_code_of
from rmqtool.broker.queuekinds import QueueKinds, batch_position, lmq_units
from rmqtool.io.consumequeue import read_batch_queue
from rmqtool.records.single import RecordReader


def is_light_queue(kinds: QueueKinds, topic: str) -> bool:
    return kinds.multi_dispatch and topic.startswith(cl.LMQ_TOPIC_PREFIX)


def lmq_unit_checks(qu, store, kinds: QueueKinds, valid_end: int, sink) -> None:
    """Every unit of light queue ``qu`` (``consumequeue.QueueUnits``) against the record it points at."""
    name = f"{qu.topic}/{qu.queue_id}"
    levels = store_delay_levels(store)
    reader = RecordReader(store)
    try:
        for j in np.flatnonzero(qu.offset >= store.commitlog.min_offset).tolist():
            off, size, qoff = int(qu.offset[j]), int(qu.size[j]), int(qu.qoff[j])
            if off + size > valid_end:
                continue                   # past the valid end: cq.beyond-end says it once
            path, pos = qu.where(j)
            rec = reader.read(off)
            if rec is None:
                sink.add("cq.unit-target", path, pos, f"{name}: unit at queue offset {qoff} (commitlog offset "
                         f"{off}) does not point at a record start", excerpt_len=20)
                continue
            props = rec.properties()
            targets = lmq_units(kinds, rec.topic(), int(rec.queue_id[0]), props)
            why = []
            if not any((t, q) == (qu.topic, qu.queue_id) for t, q, _ in targets):
                why.append(f"record ({rec.topic()}/{int(rec.queue_id[0])}) names "
                           f"{', '.join(f'{t}/{q}@{o}' for t, q, o in targets) or 'no light queue'}")
            if int(rec.size[0]) != size:
                why.append(f"unit size {size} != TOTALSIZE {int(rec.size[0])}")
            tags = tags_code_of(rec.topic(), props, int(rec.store_timestamp[0]), levels)
            if int(qu.tags[j]) != tags:
                why.append(f"tagsCode {int(qu.tags[j])} != {tags}")
            if why:
                sink.add("lmq.unit-record", path, pos, f"{name}: unit at queue offset {qoff} -> record at {off}: "
                         + "; ".join(why), excerpt_len=20)
    finally:
        reader.close()


def batch_unit_checks(store, ref, valid_end: int, sink) -> np.ndarray:
    """Every unit of one BatchConsumeQueue against its record; returns the units' commitlog offsets."""
    name = f"{ref.topic}/{ref.queue_id}"
    levels = store_delay_levels(store)
    reader = RecordReader(store)
    seen = []
    prev = None
    try:
        for path, _, units in read_batch_queue(store, ref):
            for k, u in enumerate(units):
                pos = k * BCQ_UNIT_SIZE
                off, size, base, num = (int(u["commitlog_offset"]), int(u["size"]), int(u["msg_base_offset"]),
                                        int(u["batch_size"]))
                seen.append(off)
                if prev is not None and base != prev:
                    sink.add("bcq.base-offset", path, pos + BCQ_UNIT_OFFSETS["msg_base_offset"],
                             f"{name}: unit base offset {base} does not follow the previous unit's end {prev}",
                             excerpt_len=8)
                prev = base + num
                if off < store.commitlog.min_offset or off + size > valid_end:
                    continue
                rec = reader.read(off)
                if rec is None:
                    sink.add("bcq.unit-record", path, pos, f"{name}: unit (commitlog offset {off}) does not point "
                             "at a record start", excerpt_len=BCQ_UNIT_SIZE)
                    continue
                props = rec.properties()
                want = batch_position(props, int(rec.queue_offset[0]))
                why = []
                if (rec.topic(), int(rec.queue_id[0])) != (ref.topic, ref.queue_id):
                    why.append(f"record is in {rec.topic()}/{int(rec.queue_id[0])}")
                if int(rec.size[0]) != size:
                    why.append(f"unit size {size} != TOTALSIZE {int(rec.size[0])}")
                if int(rec.store_timestamp[0]) != int(u["store_timestamp"]):
                    why.append(f"store time {int(u['store_timestamp'])} != {int(rec.store_timestamp[0])}")
                if want != (base, num):
                    why.append(f"base offset/count {base}/{num} != the record's {want}")
                tags = tags_code_of(rec.topic(), props, int(rec.store_timestamp[0]), levels)
                if int(u["tags_code"]) != tags:
                    why.append(f"tagsCode {int(u['tags_code'])} != {tags}")
                if why:
                    sink.add("bcq.unit-record", path, pos, f"{name}: unit at base offset {base} -> record at {off}: "
                             + "; ".join(why), excerpt_len=BCQ_UNIT_SIZE)
    finally:
        reader.close()
    return np.asarray(seen, dtype=np.int64)


def batch_dispatched(table, batch_topic_ids: np.ndarray, unit_offsets: np.ndarray) -> np.ndarray:
    """Per record of ``table``: in a BatchCQ topic and holding a BatchConsumeQueue unit."""
    c = table.cols
    in_batch = np.isin(c["topic_id"], batch_topic_ids)
    if not in_batch.any() or not len(unit_offsets):
        return np.zeros(len(table), dtype=bool)
    at = np.searchsorted(unit_offsets, c["phy"])
    hit = at < len(unit_offsets)
    hit[hit] = unit_offsets[at[hit]] == c["phy"][hit]
    return in_batch & hit


def missing_batch_units(table, has_unit: np.ndarray, batch_topic_ids: np.ndarray, dispatch_from: int,
                        valid_end: int, sink, selected) -> None:
    """Records of BatchCQ topics below the dispatch frontier without a BatchConsumeQueue unit."""
    from rmqtool.broker.transactions import goes_to_consumequeue
    c = table.cols
    miss = np.flatnonzero(np.isin(c["topic_id"], batch_topic_ids) & ~has_unit & goes_to_consumequeue(c["tx"])
                          & ~c["carved"] & (c["phy"] + c["size"] <= valid_end) & (c["phy"] < dispatch_from)
                          & selected)
    for i in miss.tolist():
        path, pos = table.where(i)
        sink.add("bcq.missing", path, pos, f"record at {pos} ({table.topics.names[int(c['topic_id'][i])]}/"
                 f"{int(c['queue_id'][i])}) is below the dispatch frontier {dispatch_from} but its "
                 "BatchConsumeQueue has no unit for it")
