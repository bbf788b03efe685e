"""Checks for a simplified store: findings, never exceptions, for anything inside the files.

The 56 zero bytes after each record are the article's layout, not a finding; index
entries holding the offset after their record are its writer's convention, accepted
as well as entries holding the record's start.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from formats import simplified as fmt
from rmqtool.errors import RmqError
from rmqtool.simplified import SimplifiedStore
from rmqtool.simplified.reader import (END_CORRUPT, END_TORN, CommitLog, decode_string, read_commitlog,
                                       read_consumer_queue, read_index)
from rmqtool.ops.verify.findings import ERROR, INFO, WARNING, Finding

# check name -> (severity, meaning)
CHECKS: dict[str, tuple[str, str]] = {
    "simplified.missing-file": (WARNING, "commitLog.txt, consumerQueue.txt or index.txt is absent"),
    "simplified.unreadable": (ERROR, "a file could not be read at all"),
    "simplified.total-len": (ERROR, "msgTotalLen negative, below the record's fields, or bodySize overflows it"),
    "simplified.torn": (ERROR, "the last record runs past the end of commitLog.txt"),
    "simplified.length-formula": (WARNING, "msgTotalLen != 8+64+64+8+8+bodyLen+64+64 (the article's formula)"),
    "simplified.gap": (WARNING, "non-zero bytes in the gap after a record's commitLogOffset field"),
    "simplified.commit-log-offset": (ERROR, "stored commitLogOffset != the record's position"),
    "simplified.queue-offset": (WARNING, "queueOffset not continuous (0, 1, 2, ...) per topic"),
    "simplified.stale-tail": (WARNING, "non-zero bytes after the end of the data in commitLog.txt"),
    "simplified.cq-target": (ERROR, "unit's commitLogOffset is not the start of a record"),
    "simplified.cq-length": (ERROR, "unit's msgLength != msgTotalLen of its record"),
    "simplified.cq-stale": (ERROR, "non-zero units after the first all-zero unit (a hole in the queue)"),
    "simplified.cq-trailing": (WARNING, "non-zero bytes after the last whole unit"),
    "simplified.cq-missing": (WARNING, "record that no unit points at"),
    "simplified.index-header": (ERROR, "indexCount / hashSlotCount / begin-end fields disagree with the entries"),
    "simplified.slot-range": (ERROR, "slot value is not an entry hashed to that slot"),
    "simplified.entry-target": (ERROR, "entry's phyOffset is neither the start nor the end of a record"),
    "simplified.entry-key": (ERROR, "the record at the entry's phyOffset has a msgId of another hash"),
    "simplified.time-diff": (ERROR, "negative timeDiff"),
    "simplified.prev-index": (WARNING, "prevIndex != 0 (the article never chains)"),
    "simplified.slot-overwritten": (INFO, "entry whose slot a later key overwrote (found only by scanning)"),
    "simplified.index-missing": (WARNING, "record whose msgId has no index entry"),
}


class _Sink:
    def __init__(self, limit: int | None):
        self.limit, self.findings, self.counts = limit, [], defaultdict(int)

    def add(self, check: str, file, offset, message: str, severity: str | None = None) -> None:
        self.counts[check] += 1
        if self.limit is None or self.counts[check] <= self.limit:
            self.findings.append(Finding(severity or CHECKS[check][0], check, None if file is None else str(file),
                                         None if offset is None else int(offset), message))


def verify(path, limit: int | None = 1000) -> tuple[list[Finding], dict]:
    """Findings (at most ``limit`` per check) and a summary with counts per check."""
    store = SimplifiedStore.open(path)
    sink = _Sink(limit)
    cl = None
    for name in fmt.FILE_NAMES:
        if not store.path(name).is_file():
            sink.add("simplified.missing-file", store.path(name), None, f"no {name}")
    if store.commitlog_path.is_file():
        cl = _guard(sink, store.commitlog_path, lambda: _check_commitlog(sink, store.commitlog_path))
    if store.consumer_queue_path.is_file():
        _guard(sink, store.consumer_queue_path, lambda: _check_cq(sink, store.consumer_queue_path, cl))
    if store.index_path.is_file():
        _guard(sink, store.index_path, lambda: _check_index(sink, store.index_path, cl))
    summary = {"records": None if cl is None else len(cl), "findings": dict(sink.counts),
               "errors": sum(n for c, n in sink.counts.items() if CHECKS[c][0] == ERROR),
               "warnings": sum(n for c, n in sink.counts.items() if CHECKS[c][0] == WARNING)}
    sink.findings.sort(key=lambda f: (f.file or "", f.offset if f.offset is not None else -1, f.check))
    return sink.findings, summary


def _guard(sink: _Sink, path, fn):
    try:
        return fn()
    except RmqError as exc:
        sink.add("simplified.unreadable", exc.path or path, exc.offset, exc.message)
        return None


def _check_commitlog(sink: _Sink, path) -> CommitLog:
    cl = read_commitlog(path)
    end = cl.end
    if end.kind == END_CORRUPT:
        sink.add("simplified.total-len", path, end.position, end.detail)
    elif end.kind == END_TORN:
        sink.add("simplified.torn", path, end.position, end.detail)
    if len(cl):
        body = cl.heads["body_size"].astype(np.int64)
        total = cl.total_len
        for i in np.flatnonzero(total != fmt.article_total_len(0) + body):
            sink.add("simplified.length-formula", path, cl.position[i],
                     f"msgTotalLen {int(total[i])}, the article's formula gives {fmt.article_total_len(int(body[i]))}")
        for i in np.flatnonzero(cl.tails["commit_log_offset"] != cl.position):
            sink.add("simplified.commit-log-offset", path, cl.position[i],
                     f"stored commitLogOffset {int(cl.tails['commit_log_offset'][i])} at position {int(cl.position[i])}")
        _check_gaps(sink, cl)
        # queueOffset continues by one from the previous record of the same topic
        _, topic_of = np.unique(cl.heads["topic"], return_inverse=True)
        order = np.argsort(topic_of, kind="stable")
        qo = cl.heads["queue_offset"].astype(np.int64)[order]
        same = topic_of[order][1:] == topic_of[order][:-1]
        for k in np.flatnonzero(same & (qo[1:] != qo[:-1] + 1)):
            i = order[k + 1]
            sink.add("simplified.queue-offset", path, cl.position[i],
                     f"queueOffset {int(qo[k + 1])}, expected {int(qo[k]) + 1} after the previous record "
                     f"of this topic")
    if end.kind in ("zero",):
        _check_stale_tail(sink, path, end.position + 8, end.file_size)
    return cl


def _check_gaps(sink: _Sink, cl: CommitLog) -> None:
    """The bytes between each record's last field and the next record should be zero."""
    from rmqtool.io.fileio import ReadOnlyFile
    gap_start = cl.position + fmt.RECORD_FIELDS_SIZE + cl.heads["body_size"].astype(np.int64)
    gap_end = cl.record_end
    step = 64 << 20
    with ReadOnlyFile(cl.path) as fh:
        lo = 0                                   # windows end on record boundaries: no gap straddles one
        while lo < len(cl):
            base = int(cl.position[lo])
            hi = max(int(np.searchsorted(gap_end, base + step, side="right")), lo + 1)
            arr = fh.read_array(base, int(gap_end[hi - 1]) - base)
            s, e = gap_start[lo:hi] - base, gap_end[lo:hi] - base
            lengths = e - s
            total = int(lengths.sum())
            if total:
                owner = np.repeat(np.arange(hi - lo), lengths)
                firsts = np.cumsum(lengths) - lengths
                idx = np.arange(total) - firsts[owner] + s[owner]
                bad = arr[idx] != 0
                count = np.bincount(owner, weights=bad, minlength=hi - lo).astype(np.int64)
                for k in np.flatnonzero(count):
                    first = int(np.argmax(bad[firsts[k]:firsts[k] + lengths[k]]))
                    r = lo + int(k)
                    sink.add("simplified.gap", cl.path, int(gap_start[r]) + first,
                             f"{int(count[k])} non-zero bytes in the {int(lengths[k])}-byte gap of the "
                             f"record at {int(cl.position[r])}")
            lo = hi


def _check_stale_tail(sink: _Sink, path, start: int, size: int) -> None:
    from rmqtool.io.fileio import first_nonzero
    nz = first_nonzero(path, start, size)            # a sparse file's holes are skipped, not read
    if nz is not None:
        sink.add("simplified.stale-tail", path, nz,
                 f"non-zero bytes after the end of the data (which ends at {start - 8})")


def _check_cq(sink: _Sink, path, cl: CommitLog | None) -> None:
    cq = read_consumer_queue(path)
    for n in cq.stale_after_end:
        sink.add("simplified.cq-stale", path, int(n) * fmt.CQ_UNIT_SIZE,
                 f"unit {int(n)} is not zero although the queue ends at unit {len(cq)}")
    if any(cq.trailing):
        sink.add("simplified.cq-trailing", path, cq.file_size - len(cq.trailing),
                 f"{len(cq.trailing)} trailing bytes are not zero")
    if cl is None:
        return
    offsets = cq.units["commit_log_offset"].astype(np.int64)
    idx = np.searchsorted(cl.position, offsets)
    hit = (idx < len(cl)) & (cl.position[np.minimum(idx, max(len(cl) - 1, 0))] == offsets) if len(cl) else \
        np.zeros(len(offsets), bool)
    for n in np.flatnonzero(~hit):
        sink.add("simplified.cq-target", path, int(n) * fmt.CQ_UNIT_SIZE,
                 f"unit {int(n)}: commitLogOffset {int(offsets[n])} is not the start of a record")
    rec_len = np.where(hit, cl.total_len[np.minimum(idx, max(len(cl) - 1, 0))] if len(cl) else 0, -1)
    for n in np.flatnonzero(hit & (cq.units["msg_length"] != rec_len)):
        sink.add("simplified.cq-length", path, int(n) * fmt.CQ_UNIT_SIZE,
                 f"unit {int(n)}: msgLength {int(cq.units['msg_length'][n])}, the record at "
                 f"{int(offsets[n])} has msgTotalLen {int(rec_len[n])}")
    covered = np.zeros(len(cl), bool)
    covered[idx[hit]] = True
    for i in np.flatnonzero(~covered):
        sink.add("simplified.cq-missing", cl.path, cl.position[i],
                 f"no unit of {fmt.CONSUMER_QUEUE_NAME} points at the record at {int(cl.position[i])}")


def _check_index(sink: _Sink, path, cl: CommitLog | None) -> None:
    ix = read_index(path)
    h = ix.header
    count = len(ix)
    if not 0 <= h["index_count"] <= ix.capacity:
        sink.add("simplified.index-header", path, fmt.INDEX_HEADER_OFFSETS["index_count"],
                 f"indexCount {h['index_count']} outside 0..{ix.capacity} (the file's capacity)")
    hashes = ix.entries["key_hash"].astype(np.int64)
    slot_of = ix.slot_of(hashes)
    used = len(np.unique(slot_of))
    if count and h["hash_slot_count"] not in (count, used):
        sink.add("simplified.index-header", path, fmt.INDEX_HEADER_OFFSETS["hash_slot_count"],
                 f"hashSlotCount {h['hash_slot_count']} is neither the entries ({count}) nor the used slots ({used})")
    if count:
        phy = ix.entries["phy_offset"].astype(np.int64)
        for field, want in (("begin_phy_offset", int(phy[0])), ("end_phy_offset", int(phy[-1]))):
            if h[field] != want:
                sink.add("simplified.index-header", path, fmt.INDEX_HEADER_OFFSETS[field],
                         f"{field} {h[field]}, the {'first' if field.startswith('begin') else 'last'} "
                         f"entry holds {want}")
    # slots: each non-zero value (and a zero whose entry 0 hashes here) must be an entry of that slot
    for s, v in enumerate(ix.slots):
        v = int(v)
        if v == 0 and not (count and slot_of[0] == s):
            continue
        if not 0 <= v < count or slot_of[v] != s:
            sink.add("simplified.slot-range", path, fmt.slot_position(s),
                     f"slot {s} holds {v}, not an entry hashed to this slot")
    holds = ix.slot_holds()
    for n in np.flatnonzero(~holds):
        sink.add("simplified.slot-overwritten", path, ix.entry_position(int(n)),
                 f"entry {int(n)}: slot {int(slot_of[n])} now holds entry {int(ix.slots[slot_of[n]])}")
    for n in np.flatnonzero(ix.entries["time_diff"] < 0):
        sink.add("simplified.time-diff", path, ix.entry_position(int(n)),
                 f"entry {int(n)}: timeDiff {int(ix.entries['time_diff'][n])}")
    for n in np.flatnonzero(ix.entries["prev_index"] != 0):
        sink.add("simplified.prev-index", path, ix.entry_position(int(n)),
                 f"entry {int(n)}: prevIndex {int(ix.entries['prev_index'][n])}")
    if cl is None:
        return
    id_hash = cl.msg_id_hashes()
    phy = ix.entries["phy_offset"].astype(np.int64)
    starts, ends = cl.position, cl.record_end
    i = np.minimum(np.searchsorted(starts, phy), max(len(cl) - 1, 0))
    j = np.minimum(np.searchsorted(ends, phy), max(len(cl) - 1, 0))
    at_start = (starts[i] == phy) if len(cl) else np.zeros(count, bool)
    at_end = (ends[j] == phy) if len(cl) else np.zeros(count, bool)
    start_ok = at_start & (id_hash[i] == hashes) if len(cl) else at_start
    end_ok = at_end & (id_hash[j] == hashes) if len(cl) else at_end
    indexed = np.zeros(len(cl), bool)
    indexed[i[start_ok]] = True
    indexed[j[end_ok & ~start_ok]] = True
    for n in np.flatnonzero(~(at_start | at_end)):
        sink.add("simplified.entry-target", path, ix.entry_position(int(n)),
                 f"entry {int(n)}: phyOffset {int(phy[n])} is neither the start nor the end of a record")
    for n in np.flatnonzero((at_start | at_end) & ~(start_ok | end_ok)):
        sink.add("simplified.entry-key", path, ix.entry_position(int(n)),
                 f"entry {int(n)}: keyHash {int(hashes[n])} differs from the msgId hash of the record at "
                 f"or ending at {int(phy[n])}")
    for r in np.flatnonzero(~indexed):
        sink.add("simplified.index-missing", cl.path, starts[r],
                 f"msgId {decode_string(cl.heads['msg_id'][r].tobytes())!r} of the record at {int(starts[r])} "
                 f"has no index entry")
