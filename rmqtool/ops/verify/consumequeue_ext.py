"""ConsumeQueueExt verification (4.x ``enableConsumeQueueExt``, docs/format-cq-ext.md).

Shallow: the ext files' layout, every ext unit's size up to each file's data end, and every CQ
unit's ext address (inside an ext file, below its data end, at a unit's start, increasing along the
queue as the dispatch puts them). Deep: each ext unit's tagsCode and store time against the record
its CQ unit points at (the tagsCode rule is ``dispatch.record_tags_codes``, in the record table).
A wrong address is reported at the CQ unit's tagsCode field: the address is what chose the unit.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from formats.consumequeue import CQ_UNIT_OFFSETS
from formats.consumequeue_ext import EXT_HEADER_OFFSETS, ext_offset, is_ext_address
from rmqtool.io.consumequeue_ext import ExtProblem, ExtQueue, ext_file_size, ext_queues, has_ext
from rmqtool.wording import agree, counted

_TAGS_AT = CQ_UNIT_OFFSETS["tags_code"]
#: the store's ext file size, found once per ``Store`` of a run (``ext_unit_checks`` is called per
#: queue, and ``ext_file_size`` lists up to 64 queues' files)
_FILE_SIZES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _file_size(store) -> int | None:
    if store not in _FILE_SIZES:
        _FILE_SIZES[store] = ext_file_size(store.root)
    return _FILE_SIZES[store]


@dataclass
class ExtResolved:
    """The ext units a queue's addresses resolve to, by queue offset (columns, sorted by it): what
    the deep check compares with the records (about 30 bytes a unit)."""
    paths: list
    qoff: np.ndarray
    file_idx: np.ndarray
    position: np.ndarray
    tags: np.ndarray
    ts: np.ndarray

    def __len__(self) -> int:
        return len(self.qoff)

    def get(self, qoff: int):
        """(ext file, position, tagsCode, store time) of the unit at queue offset ``qoff``, or None."""
        k = int(np.searchsorted(self.qoff, qoff))
        if k >= len(self.qoff) or int(self.qoff[k]) != qoff:
            return None
        return (self.paths[int(self.file_idx[k])], int(self.position[k]), int(self.tags[k]), int(self.ts[k]))


def ext_layout_checks(store, sink, topic: str | None = None, queue_id: int | None = None) -> None:
    """Every (selected) ext queue's files (names, sizes) and units (sizes, a unit cut by its file's end)."""
    if not has_ext(store.root):
        return
    size = _file_size(store)
    for t, qid, d in ext_queues(store.root):
        if (topic is not None and t != topic) or (queue_id is not None and qid != queue_id):
            continue
        topic_name = t
        ext = ExtQueue(d, size)
        for p in ext.segments.problems:
            sink.add("cqext.file-size" if p.check == "file-size" else "cqext.names", p.path, None,
                     f"{topic_name}/{qid}: {p.message}", p.severity, excerpt=False)
        for seg in ext.segments.files:
            try:
                ext.data_end(seg)
            except ExtProblem as exc:
                sink.add("cqext.unit-size", exc.path, exc.position, f"{topic_name}/{qid}: {exc.message}; the broker's "
                         "recovery walks the size fields and reads past it", excerpt_len=EXT_HEADER_OFFSETS["bitmap_size"] + 2)


def ext_unit_checks(qu, store, sink) -> ExtResolved | None:
    """Every ext address of queue ``qu`` (``consumequeue.QueueUnits``) resolved to its unit;
    returns them by queue offset (``ExtResolved``) for the deep check (None when the queue holds
    no address)."""
    is_addr = is_ext_address(qu.tags)
    if not is_addr.any():
        return None
    name = f"{qu.topic}/{qu.queue_id}"
    size = _file_size(store)
    ext = ExtQueue.of(store.root, qu.topic, qu.queue_id, size)
    idx = np.flatnonzero(is_addr)
    if ext is None or not ext.segments.files:
        j = int(idx[0])
        path, pos = qu.where(j)
        sink.add("cqext.address", path, pos + _TAGS_AT, f"{name}: {counted(len(idx), 'unit')} {agree(len(idx), 'holds', 'hold')} ext addresses (the first at "
                 f"queue offset {int(qu.qoff[j])}) but the queue has no consumequeue_ext/ file", excerpt_len=8)
        return ExtResolved([], *(np.zeros(0, np.int64) for _ in range(5)))
    offsets = ext_offset(qu.tags[idx])
    starts = ext.unit_offsets()
    rank = np.minimum(np.searchsorted(starts, offsets), max(len(starts) - 1, 0))
    exact = (rank < len(starts)) & (starts[rank] == offsets) if len(starts) else np.zeros(len(idx), bool)
    # each CQ unit put one ext unit, in queue order: an address fits when it is the ext unit right
    # after its previous neighbour's or right before its next neighbour's
    fits = np.ones(len(idx), bool)
    if len(idx) > 1:
        step = exact[1:] & exact[:-1] & (rank[1:] == rank[:-1] + 1)
        fits = np.concatenate([[False], step]) | np.concatenate([step, [False]])
    good = exact & fits
    try:
        for k in np.flatnonzero(~good).tolist():          # each one a finding (few)
            _report(qu, ext, int(idx[k]), int(offsets[k]), bool(exact[k]), name, sink)
        fidx, pos, tags, ts = ext.headers_at(offsets[good])
    except ExtProblem as exc:
        sink.add("cqext.unit-size", exc.path, exc.position, f"{name}: {exc.message}", excerpt=False)
        return ExtResolved([], *(np.zeros(0, np.int64) for _ in range(5)))
    finally:
        ext.close()
    qoff = qu.qoff[idx[good]].astype(np.int64)
    order = np.argsort(qoff, kind="stable")
    return ExtResolved([str(seg.path) for seg in ext.segments.files], qoff[order], fidx[order].astype(np.int32),
                       pos[order], tags[order], ts[order])


def _report(qu, ext, j: int, offset: int, exact: bool, name: str, sink) -> None:
    """The finding for unit ``j``, whose address is not one the dispatch would have put there."""
    path, pos = qu.where(j)
    try:
        if exact:
            raise ExtProblem(f"ext address {int(qu.tags[j])} (offset {offset}) is not the ext unit after "
                             "its previous unit's nor the one before its next unit's: the dispatch puts one ext "
                             "unit per CQ unit, in queue order", None, None)
        ext.get(int(qu.tags[j]))
        return
    except ExtProblem as exc:
        where = f" ({exc.path}@{exc.position})" if exc.position is not None else ""
        sink.add("cqext.address", path, pos + _TAGS_AT, f"{name}: unit at queue offset {int(qu.qoff[j])}: "
                 f"{exc.message}{where}", excerpt_len=8)


def deep_ext_checks(qu, j: np.ndarray, r: np.ndarray, good: np.ndarray, table, sink) -> None:
    """Units ``j`` of ``qu`` joined to records ``r`` (``good``: the join holds): each one's ext
    unit holds the record's tagsCode and store time (S/ConsumeQueue.java:391-393@4.9.7)."""
    ext = getattr(qu, "ext", None)
    if not ext:
        return
    c = table.cols
    name = f"{qu.topic}/{qu.queue_id}"
    for k in np.flatnonzero(good & is_ext_address(qu.tags[j])):
        jj, rr = int(j[k]), int(r[k])
        got = ext.get(int(qu.qoff[jj]))
        if got is None:
            continue                 # reported by the shallow check
        epath, epos, tags, ts = got
        path, pos = qu.where(jj)
        want_tags = int(c["tags_code"][rr]) if "tags_code" in c else tags
        want_ts = int(c["store_ts"][rr])
        if tags != want_tags or ts != want_ts:
            what = []
            if tags != want_tags:
                what.append(f"tagsCode {tags}, the record gives {want_tags}")
            if ts != want_ts:
                what.append(f"store time {ts}, the record's is {want_ts}")
            sink.add("cqext.unit-record", path, pos + _TAGS_AT,
                     f"{name}: unit at queue offset {int(qu.qoff[jj])} -> ext unit {epath}@{epos} has "
                     + " and ".join(what) + f" (record at {int(c['phy'][rr])}): the address or the ext unit is wrong",
                     excerpt_len=8)
