"""ConsumeQueue verification: layout and unit validity (shallow), units <-> records (deep).

A queue's units are read into flat arrays and checked one queue at a time; for the deep
join they are routed (``unit_rows``) to the chunk of records holding their offset, where
the join is one sorted search (``kernels.search``) over the records' commitlog offsets.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from formats import commitlog as cl
from formats.consumequeue_ext import EXT_ADDRESS_MAX
from formats.consumequeue import (CQ_UNIT_OFFSETS, CQ_UNIT_SIZE, PRE_BLANK_COMMITLOG_OFFSET,
                                  PRE_BLANK_SIZE, PRE_BLANK_TAGS_CODE)
from rmqtool.broker.dispatch import goes_to_consumequeue
from rmqtool.io.consumequeue import read_unit_file, valid_units
from rmqtool.ops.verify.findings import FindingSink
from rmqtool.ops.verify.records import RecordTable
from rmqtool.wording import agree, counted

_MIN_MESSAGE = cl.message_length(cl.MESSAGE_MAGIC_V1, 0, 0, 0, 0)


@dataclass
class QueueUnits:
    """Valid units of one queue (pre-blank sentinels excluded) with where each lives."""
    topic: str
    queue_id: int
    paths: list[str]
    offset: np.ndarray        # commitlog offset
    size: np.ndarray
    tags: np.ndarray
    qoff: np.ndarray          # queue offset (unit index)
    file_idx: np.ndarray
    position: np.ndarray      # byte position in its file
    min_qoff: int             # first queue offset the queue holds (after pre-blank / expiry)
    end_qoff: int             # next queue offset to be written
    #: the ext units its addresses resolve to, by queue offset (``consumequeue_ext.ExtResolved``,
    #: from ``ext_unit_checks``); None without ConsumeQueueExt
    ext: object | None = None

    def where(self, j: int) -> tuple[str, int]:
        return self.paths[int(self.file_idx[j])], int(self.position[j])


def read_queue(store, ref, sink: FindingSink) -> QueueUnits:
    """Read every unit of a queue, report layout, gaps and misplaced sentinels."""
    q = store.queue(ref.topic, ref.queue_id)
    for p in q.problems:
        check = {"file-size": "cq.file-size", "contiguity": "cq.contiguity"}.get(p.check, "cq.names")
        sink.add(check, p.path, 0 if p.check == "contiguity" else None, p.message, p.severity, excerpt=False)
    parts, paths = [], []
    for i, seg in enumerate(q.files):
        paths.append(str(seg.path))
        units, size = read_unit_file(seg.path, q.file_size)
        usable = size // CQ_UNIT_SIZE * CQ_UNIT_SIZE
        if usable != size:
            sink.add("cq.file-size", seg.path, usable,
                     f"{size} bytes is not a whole number of {CQ_UNIT_SIZE}-byte units")
        parts.append((i, seg.start, units))
    empty = np.zeros(0, np.int64)
    if not parts:
        return QueueUnits(ref.topic, ref.queue_id, paths, empty, empty, empty, empty, empty, empty, 0, 0)
    offs = np.concatenate([u["commitlog_offset"].astype(np.int64) for _, _, u in parts])
    sizes = np.concatenate([u["size"].astype(np.int64) for _, _, u in parts])
    tags = np.concatenate([u["tags_code"].astype(np.int64) for _, _, u in parts])
    fidx = np.concatenate([np.full(len(u), i, np.int32) for i, _, u in parts])
    pos = np.concatenate([np.arange(len(u), dtype=np.int64) * CQ_UNIT_SIZE for _, _, u in parts])
    qoff = np.concatenate([(start + np.arange(len(u), dtype=np.int64) * CQ_UNIT_SIZE) // CQ_UNIT_SIZE
                           for _, start, u in parts])
    valid = valid_units(offs, sizes)
    invalid = np.flatnonzero(~valid)
    end = int(invalid[0]) if len(invalid) else len(offs)
    if end < len(offs) and valid[end:].any():
        later = end + int(np.flatnonzero(valid[end:])[0])
        n_later = int(valid[end:].sum())
        sink.add("cq.gap", paths[fidx[end]], int(pos[end]),
                 f"{ref.topic}/{ref.queue_id}: unit at queue offset {int(qoff[end])} is invalid (offset "
                 f"{int(offs[end])}, size {int(sizes[end])}) but {counted(n_later, 'valid unit')} {agree(n_later, 'follows', 'follow')}, the next at "
                 f"queue offset {int(qoff[later])}; the broker stops reading at the hole", excerpt_len=CQ_UNIT_SIZE)
    sentinel = ((offs == PRE_BLANK_COMMITLOG_OFFSET) & (sizes == PRE_BLANK_SIZE) & (tags == PRE_BLANK_TAGS_CODE))
    sentinel[end:] = False
    # sentinels are legal only as a prefix of the first file
    first_real = np.flatnonzero(~sentinel[:end])
    prefix = int(first_real[0]) if len(first_real) else end
    after_real = np.arange(end) >= prefix
    for j in np.flatnonzero(sentinel[:end] & after_real):
        sink.add("cq.filler", paths[fidx[j]], int(pos[j]),
                 f"{ref.topic}/{ref.queue_id}: filler unit (the pre-blank sentinel) at queue offset {int(qoff[j])} "
                 "between real units: no message there, the broker skips it on pull "
                 "(rebuild --skip-corrupt writes one for each queue offset lost in a skipped range)",
                 excerpt_len=CQ_UNIT_SIZE)
    for j in np.flatnonzero(sentinel[:end] & ~after_real & (fidx[:end] != 0)):
        sink.add("cq.pre-blank", paths[fidx[j]], int(pos[j]),
                 f"{ref.topic}/{ref.queue_id}: pre-blank sentinel at queue offset {int(qoff[j])} outside the first file",
                 excerpt_len=CQ_UNIT_SIZE)
    keep = np.arange(end)
    keep = keep[~sentinel[:end]]
    end_qoff = int(qoff[end - 1]) + 1 if end else (q.files[0].start // CQ_UNIT_SIZE)
    min_qoff = int(qoff[prefix]) if prefix < end else end_qoff
    return QueueUnits(ref.topic, ref.queue_id, paths, offs[keep], sizes[keep], tags[keep], qoff[keep],
                      fidx[keep], pos[keep], min_qoff, end_qoff)


def shallow_unit_checks(qu: QueueUnits, store, valid_end: int, sink: FindingSink, live: bool) -> int:
    """Unit sizes, order, targets inside the CommitLog; returns the number of expired units."""
    name = f"{qu.topic}/{qu.queue_id}"
    cl_min = store.commitlog.min_offset
    file_size = store.commitlog.file_size or (1 << 62)
    bad_size = np.flatnonzero((qu.size < _MIN_MESSAGE) | (qu.size > file_size))
    for j in bad_size:
        path, pos = qu.where(j)
        sink.add("cq.unit-size", path, pos, f"{name}: unit at queue offset {int(qu.qoff[j])} has size "
                 f"{int(qu.size[j])}, outside [{_MIN_MESSAGE}, {file_size}]", excerpt_len=CQ_UNIT_SIZE)
    if len(qu.offset) > 1:
        for j in np.flatnonzero(qu.offset[1:] <= qu.offset[:-1]) + 1:
            path, pos = qu.where(j)
            sink.add("cq.order", path, pos, f"{name}: unit at queue offset {int(qu.qoff[j])} points at "
                     f"{int(qu.offset[j])}, not after the previous unit's {int(qu.offset[j - 1])}",
                     excerpt_len=CQ_UNIT_SIZE)
    expired = qu.offset < cl_min
    n_expired = int(expired.sum())
    if n_expired:
        j = int(np.flatnonzero(expired)[-1])
        path, pos = qu.where(j)
        sink.add("cq.expired", path, pos, f"{name}: {counted(n_expired, 'unit')} {agree(n_expired, 'points', 'point')} below the CommitLog min "
                 f"offset {cl_min} (expired data)", excerpt=False)
    beyond = np.flatnonzero(qu.offset + qu.size > valid_end)
    if len(beyond):
        j = int(beyond[0])
        path, pos = qu.where(j)
        sink.add("cq.beyond-end", path, pos,
                 f"{name}: {counted(len(beyond), 'unit')} from queue offset {int(qu.qoff[j])} {agree(len(beyond), 'points', 'point')} at or past the "
                 f"CommitLog's valid end {valid_end} (first: {int(qu.offset[j])})",
                 "info" if live else None, excerpt_len=CQ_UNIT_SIZE)
    # records never straddle files
    if store.commitlog.file_size:
        straddle = np.flatnonzero((qu.offset // file_size) != ((qu.offset + qu.size - 1) // file_size))
        straddle = straddle[qu.offset[straddle] >= cl_min]
        for j in straddle:
            path, pos = qu.where(j)
            sink.add("cq.unit-target", path, pos, f"{name}: unit at queue offset {int(qu.qoff[j])} "
                     f"({int(qu.offset[j])}+{int(qu.size[j])}) crosses a CommitLog file boundary",
                     excerpt_len=CQ_UNIT_SIZE)
    return n_expired


def deep_unit_checks(qu: QueueUnits, table: RecordTable, store, valid_end: int, sink: FindingSink,
                     found: np.ndarray) -> None:
    """Every unit -> a record start with this size/topic/queue/offset/tagsCode; marks ``found``."""
    name = f"{qu.topic}/{qu.queue_id}"
    live_units = np.flatnonzero(qu.offset >= store.commitlog.min_offset)
    if not len(live_units):
        return
    offs = qu.offset[live_units]
    exact, inside = table.locate(offs)
    c = table.cols
    tid = table.topics.lookup(qu.topic)
    for k in np.flatnonzero(exact < 0):
        j = int(live_units[k])
        path, pos = qu.where(j)
        if qu.offset[j] + qu.size[j] > valid_end and inside[k] < 0:
            continue              # past the valid end: reported once as cq.beyond-end
        if inside[k] >= 0:
            r = int(inside[k])
            what = (f"points into the middle of the record at {int(c['phy'][r])} "
                    f"(+{int(qu.offset[j] - c['phy'][r])} bytes)")
        elif store.commitlog.locate(int(qu.offset[j])) is None:
            what = "points at an offset no CommitLog file holds"
        else:
            what = "points where no record was found"
        sink.add("cq.unit-target", path, pos, f"{name}: unit at queue offset {int(qu.qoff[j])} "
                 f"(commitlog offset {int(qu.offset[j])}) {what}", excerpt_len=CQ_UNIT_SIZE)
    hit = np.flatnonzero(exact >= 0)
    if not len(hit):
        return
    j = live_units[hit]
    r = exact[hit]
    size_ok = c["size"][r] == qu.size[j]
    topic_ok = c["topic_id"][r] == tid
    qid_ok = c["queue_id"][r] == qu.queue_id
    qoff_ok = c["queue_offset"][r] == qu.qoff[j]
    tx = c["tx"][r]
    type_ok = goes_to_consumequeue(tx)
    good = size_ok & topic_ok & qid_ok & qoff_ok & type_ok
    found[r[good]] = True
    for k in np.flatnonzero(~good):
        jj, rr = int(j[k]), int(r[k])
        path, pos = qu.where(jj)
        why = []
        if not size_ok[k]:
            sink.add("cq.unit-size", path, pos + CQ_UNIT_OFFSETS["size"], f"{name}: unit at queue offset {int(qu.qoff[jj])} has size "
                     f"{int(qu.size[jj])}, the record at {int(c['phy'][rr])} has TOTALSIZE {int(c['size'][rr])}",
                     excerpt_len=4)
        if not topic_ok[k] or not qid_ok[k]:
            why.append(f"record is in {table.topics.names[int(c['topic_id'][rr])]}/{int(c['queue_id'][rr])}")
        if not qoff_ok[k]:
            why.append(f"record QUEUEOFFSET {int(c['queue_offset'][rr])} != {int(qu.qoff[jj])}")
        if not type_ok[k]:
            why.append(f"record transaction type {int(tx[k])} is never dispatched")
        if why:
            sink.add("cq.unit-record", path, pos, f"{name}: unit at queue offset {int(qu.qoff[jj])} -> record "
                     f"at {int(c['phy'][rr])}: " + "; ".join(why), excerpt_len=CQ_UNIT_SIZE)
    if "tags_code" in c:
        t_unit = qu.tags[j]
        t_rec = c["tags_code"][r]
        bad = np.flatnonzero(good & (t_unit != t_rec) & (t_unit > EXT_ADDRESS_MAX))
        for k in bad:
            jj, rr = int(j[k]), int(r[k])
            path, pos = qu.where(jj)
            sink.add("cq.tags-code", path, pos + CQ_UNIT_OFFSETS["tags_code"], f"{name}: unit at queue offset {int(qu.qoff[jj])} has "
                     f"tagsCode {int(t_unit[k])}, the record at {int(c['phy'][rr])} gives {int(t_rec[k])}",
                     excerpt_len=8)
    if qu.ext:
        from rmqtool.ops.verify.consumequeue_ext import deep_ext_checks
        deep_ext_checks(qu, j, r, good, table, sink)


def missing_units(table: RecordTable, found: np.ndarray, min_qoffs: dict, dispatch_from: int, valid_end: int,
                  sink: FindingSink, selected) -> list[int]:
    """Dispatchable records without a unit: below the dispatch frontier a hole (``cq.missing``,
    unless the queue's older files expired: ``min_qoffs[(topic, queue)]``); returns the rest,
    the records not dispatched yet (``not_dispatched_finding`` reports them once)."""
    c = table.cols
    if not len(table):
        return []
    tx = c["tx"]
    dispatchable = (goes_to_consumequeue(tx) & ~c["carved"]
                    & (c["phy"] + c["size"] <= valid_end) & selected)
    miss = np.flatnonzero(dispatchable & ~found)
    pending = []
    at = 0
    for i in miss:
        i = int(i)
        topic = table.topics.names[int(c["topic_id"][i])]
        qid = int(c["queue_id"][i])
        qoff = int(c["queue_offset"][i])
        path, pos = table.where(i)
        if int(c["phy"][i]) >= dispatch_from:
            pending.append(i)
            continue
        min_qoff = min_qoffs.get((topic, qid))
        if min_qoff is not None and qoff < min_qoff:
            continue          # the queue's older files expired
        sink.add("cq.missing", path, pos + at,
                 f"record at {pos} ({topic}/{qid} queue offset {qoff}) is below the dispatch frontier "
                 f"{dispatch_from} but its ConsumeQueue has no unit for it")
    return pending


def not_dispatched_finding(pending, dispatch_from: int, sink: FindingSink) -> None:
    """One ``cq.not-dispatched`` for every record past the frontier (``forecast.Pending``)."""
    if pending.count:
        path, pos, phy = pending.first
        sink.add("cq.not-dispatched", path, pos,
                 f"{counted(pending.count, 'record')} from commitlog offset {phy} {agree(pending.count, 'is', 'are')} past the dispatch "
                 f"frontier {dispatch_from}: not dispatched yet (the broker dispatches them at restart)",
                 excerpt=False)


#: a unit as routed to the record chunk holding its CommitLog offset: the ``QueueUnits``
#: columns and the number of its queue
UNIT_ROW = np.dtype([("offset", np.int64), ("size", np.int64), ("tags", np.int64), ("qoff", np.int64),
                     ("position", np.int64), ("file_idx", np.int32), ("queue", np.int32)])


def unit_rows(qu: QueueUnits, queue_no: int) -> np.ndarray:
    rows = np.zeros(len(qu.offset), UNIT_ROW)
    for name, col in (("offset", qu.offset), ("size", qu.size), ("tags", qu.tags), ("qoff", qu.qoff),
                      ("position", qu.position), ("file_idx", qu.file_idx)):
        rows[name] = col
    rows["queue"] = queue_no
    return rows


def queue_part(qu: QueueUnits, rows: np.ndarray) -> QueueUnits:
    """The units of queue ``qu`` given as routed ``rows`` (one chunk's share of them)."""
    return QueueUnits(qu.topic, qu.queue_id, qu.paths, rows["offset"], rows["size"], rows["tags"], rows["qoff"],
                      rows["file_idx"], rows["position"], qu.min_qoff, qu.end_qoff, qu.ext)
