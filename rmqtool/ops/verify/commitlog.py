"""CommitLog verification: layout, the record walk with resync, per-record deep checks.

Every file is walked like the broker's recovery (``FileScan``, no CRC stop so a body
bit flip does not end the walk). A walk that stops on bad bytes is reported once, then
resumed at the next plausible record (``find_record_start``); whatever is found there
is marked carved. The walk's batches feed ``check_batch`` (deep) and ``batch_columns``
(the record table the cross-checks use).
"""
from __future__ import annotations

import numpy as np

from formats import commitlog as cl
from rmqtool.broker.delay import store_delay_levels
from rmqtool.broker.dispatch import DISPATCH_STOP_CHECK, END_DISPATCH_STOP, goes_to_consumequeue
from rmqtool.errors import FileChangedError, RmqError
from rmqtool.io.fileio import CACHE_WINDOW, ReadOnlyFile, first_nonzero
from rmqtool.records.ahead import one_ahead
from rmqtool.records.scan import (END_BLANK, END_CORRUPT, END_EOF, END_TORN, END_ZERO, FileEnd, FileScan,
                          find_record_start)
from rmqtool.ops.verify.findings import INFO, WARNING, FindingSink
from rmqtool.ops.verify.chunks import RecordChunks, SpillDir, StagedPart, adopt_columns
from rmqtool.ops.verify.records import RecordTable, TopicTable, batch_columns, check_batch
from rmqtool.wording import counted

_MIN_MESSAGE = cl.message_length(cl.MESSAGE_MAGIC_V1, 0, 0, 0, 0)
class CommitLogVerifier:
    """Walk every commitlog file, report findings, build the record table."""

    def __init__(self, store, sink: FindingSink, deep: bool, live: bool, progress=None,
                 report_records: bool = True, spill: SpillDir | None = None, chunk_records: int | None = None):
        self.store = store
        self.sink = sink
        self.deep = deep
        self.live = live
        self.progress = progress
        self.report_records = report_records   # False when --only excludes commitlog findings
        self.delay_levels_ms = store_delay_levels(store) if deep else None   # for the tagsCode check
        self.topics = TopicTable()
        self.files: list[str] = []
        self.chunks = RecordChunks(self.topics, self.files, spill or SpillDir(), chunk_records)
        self.data_end: dict[int, tuple[int, str]] = {}   # file index -> (in-file end of data, end kind)
        self.file_changed = False
        self.crc_failures: dict[int, int] = {}          # file index -> first bad-CRC record position
        self.delay_stops: dict[int, int] = {}           # file index -> first DELAY record-check failure
        self.delay_texts: dict[tuple[int, int], str] = {}
        self.records = 0
        self.carved = 0
        self.damaged: list[tuple[int, int]] = []       # [stop, resync) CommitLog ranges carved past
        self.bytes = 0
        self._by_reference = False                      # engine parts adopted without being read
        self.dledger = None
        if store.dledger:
            from rmqtool.ops.verify.dledger import EntryChecks
            self.dledger = EntryChecks(store, self.add)

    def add(self, check, file, offset, message, severity=None, **kw):
        if self.report_records:
            self.sink.add(check, file, offset, message, severity, **kw)

    # --- layout ------------------------------------------------------------------------------
    def check_layout(self) -> None:
        queue = self.store.commitlog
        located = {str(seg.path): seg.path for seg in queue.files}     # a problem names its file
        for p in queue.problems:
            check = {"names": "commitlog.names", "file-size": "commitlog.file-size",
                     "contiguity": "commitlog.contiguity"}.get(p.check, "commitlog.names")
            offset = None
            if p.check == "file-size":
                offset = min(_size_of(located.get(p.path, p.path)), queue.file_size)
            elif p.check == "contiguity":
                offset = 0
            self.add(check, p.path, offset, p.message, p.severity, excerpt=False)

    # --- walk --------------------------------------------------------------------------------
    def walk(self, engine=None, split_size: int | None = None, prepared=None) -> RecordChunks:
        """Walk every file; with an ``engine`` its tasks walk byte ranges in parallel and this
        process adopts their batches, then judges each file's end as the sequential walk does.
        ``prepared``: the engine's walk of this store, already run (a fleet's)."""
        files = self.store.commitlog.files
        self._starts_with_data = [_starts_with_data(seg.path) for seg in files]
        if prepared is None and engine is not None:
            from rmqtool.ops.verify.engine_walk import engine_walk
            prepared = engine_walk(engine, self.store, self.deep, split_size)
        if prepared is not None and prepared.staging is not None and self.dledger is None:
            # the parts are adopted where they are: the staging outlives the walk, until the joins
            if prepared.owns_staging:
                self.chunks.spill.on_close(prepared.staging.close)
                prepared.keep_staging()
            self._by_reference = True
        try:
            self._walk_files(files, prepared)
        finally:
            if prepared is not None:
                prepared.close()
        self._check_ends(files)
        if self.dledger is not None:
            self.dledger.finish()
        return self.chunks.finish()

    def _walk_files(self, files, prepared) -> None:
        for idx, seg in enumerate(files):
            self.files.append(str(seg.path))
            if seg.size == 0:
                self.data_end[idx] = (0, END_ZERO)
                continue
            try:
                if prepared is None:
                    self._walk_file(idx, seg)
                else:
                    self._adopt_file(idx, seg, prepared)
            except FileChangedError as exc:
                self.file_changed = True
                self.add("commitlog.file-changed", seg.path, exc.offset, exc.message,
                         INFO if self.live else WARNING, excerpt=False)
                self.data_end.setdefault(idx, (exc.offset or 0, END_TORN))
            if self.progress:
                self.progress(seg.size)

    def _consume(self, idx: int, batch) -> None:
        for f in check_batch(batch, deep=self.deep):
            self._note(idx, f, batch.carved)
            if self.report_records:
                self.sink.put(f)
        cols = batch_columns(batch, self.topics, self.deep, self.delay_levels_ms)
        if self.dledger is not None:
            self.dledger.feed(batch.path, cols)
        cols["file_idx"] = np.full(len(batch), idx, dtype=np.int32)
        self.chunks.append(cols)
        self.records += len(batch)
        if batch.carved:
            self.carved += len(batch)

    def _note(self, idx: int, f, carved: bool) -> None:
        """Where the broker's CRC-checking walk would stop in this file: the first bad body
        CRC or DELAY record check (carved records lie past a stop already)."""
        stops = {"commitlog.body-crc": self.crc_failures, DISPATCH_STOP_CHECK: self.delay_stops}.get(f.check)
        if stops is not None and not carved:
            at = stops.get(idx)
            stops[idx] = f.offset if at is None else min(at, f.offset)
            if f.check == DISPATCH_STOP_CHECK:
                self.delay_texts[(idx, f.offset)] = f.message

    def _adopt_file(self, idx: int, seg, prepared) -> None:
        """Take the engine's batches of one file, then go on from where its walk stopped."""
        from rmqtool.ops.verify.engine_walk import topic_mapping
        path = str(seg.path)
        for part in prepared.parts(path):
            mapping = topic_mapping(part, self.topics.intern)
            for f in part.findings:
                self._note(idx, f, False)
                if self.report_records:
                    self.sink.put(f)
            if self._by_reference and part.ref is not None:      # left where the task put it
                self.chunks.adopt(StagedPart(prepared.staging, part.ref, mapping, idx), part.records,
                                  part.first, part.last)
            else:
                cols = adopt_columns(part.cols(prepared.staging), mapping, idx)
                if self.dledger is not None:
                    self.dledger.feed(path, cols)
                self.chunks.append(cols)
            self.records += part.records
        _, pos = prepared.ends.get(path, (END_EOF, 0))
        self.bytes += pos
        # the end is judged here: a walk resumed at the stop position stops there again (or,
        # on a live store, reads what was appended since), then reports and carves as usual
        self._walk_file(idx, seg, lo=pos)

    def _walk_file(self, idx: int, seg, lo: int = 0) -> None:
        carved = False
        # the last file holding data: every later file starts with zeros (the pre-allocated next file)
        last_file = not any(self._starts_with_data[idx + 1:])
        while True:
            # each window in its own pooled buffer: the next is read and scanned in a thread while this one is checked
            scan = FileScan(seg.path, seg.start, lo=lo, carved=carved, crc_column=self.deep, chunk_size=CACHE_WINDOW)
            first_carved = None
            count_before = self.records
            for batch in one_ahead(scan):
                if carved and first_carved is None and len(batch):
                    first_carved = int(batch.position[0])
                self._consume(idx, batch)
            end = scan.end
            if carved and first_carved is not None:
                n = self.records - count_before
                self.add("commitlog.carved", seg.path, first_carved,
                         f"{counted(n, 'record')} carved at [{first_carved}, {end.position}) after resync; "
                         "the broker would not reach them")
            self.bytes += end.position - lo
            if self.dledger is not None and not end.clean:
                self.dledger.break_chain()
            resume = self._handle_end(idx, seg, end, carved, last_file)
            if resume is None:
                return
            self.damaged.append((seg.start + end.position, seg.start + resume))
            lo, carved = resume, True

    def _handle_end(self, idx, seg, end, carved, last_file) -> int | None:
        """Report how a walk stopped; return a resync position to carve from, or None."""
        path, pos, size = seg.path, end.position, end.file_size
        if not carved:
            self.data_end[idx] = (pos, end.kind)
        if end.kind == END_BLANK:
            left = size - pos
            if end.blank_size != left:
                self.add("commitlog.blank-size", path, pos,
                         f"BLANK at {pos} has TOTALSIZE {end.blank_size}, but {left} bytes are left in the file")
            after = pos + cl.RECORD_PREFIX_SIZE
            nz = first_nonzero(path, after)
            if nz is not None:
                self.add("commitlog.after-blank", path, nz,
                         f"non-zero bytes at {nz} after the BLANK at {pos} (padding is normally zero; "
                         "transientStorePool/writeWithoutMmap leave stale bytes)")
            return None
        if end.kind == END_EOF:
            if not last_file:
                self.add("commitlog.early-end", path, pos,
                         "file ends right after a record without a BLANK record", excerpt=False)
            return None
        if end.kind == END_ZERO:
            nz = first_nonzero(path, pos)
            if nz is None:
                return None
            nxt = find_record_start(path, seg.start, nz)
            if nxt is None:
                self.add("commitlog.stale-tail", path, nz,
                         f"non-zero bytes at {nz} after the end of the data at {pos}, no record found in them")
                return None
            return nxt
        # torn or corrupt: classify, report, resync
        check, message, severity = self._classify(seg, end, last_file)
        nxt = find_record_start(path, seg.start, pos + 1)
        tail = f"; resync found a plausible record at {nxt}" if nxt is not None else "; no record found after it"
        self.add(check, path, pos, message + tail, severity)
        return nxt

    def _classify(self, seg, end, last_file) -> tuple[str, str, str | None]:
        pos, size, total = end.position, end.file_size, end.total_size
        detail = end.detail or end.kind
        if end.magic in cl.MESSAGE_MAGICS and total is not None and (total < _MIN_MESSAGE or total > size):
            return "commitlog.total-size", f"TOTALSIZE {total} at {pos}: {detail}", None
        if end.kind in (END_TORN, END_CORRUPT) and end.magic in cl.MESSAGE_MAGICS and total and total > 0:
            claimed_end = min(pos + total, size)
            nz_after = first_nonzero(seg.path, claimed_end)
            zero_from = _last_nonzero_end(seg.path, pos, claimed_end)
            if nz_after is None and (zero_from < claimed_end or end.kind == END_TORN):
                severity = INFO if (self.live and last_file) else None
                check = "commitlog.live-tail" if severity == INFO else "commitlog.torn-tail"
                return check, (f"incomplete record at {pos} (TOTALSIZE {total}): {detail}; "
                               f"only zeros follow"), severity
        if end.check == "commitlog.torn-tail":
            return "commitlog.total-size", f"TOTALSIZE {total} at {pos}: {detail}", None
        if end.check.startswith("dledger."):
            return end.check, f"DLedger entry at {pos}: {detail}", None
        return end.check or "commitlog.magic", f"walk stopped at {pos}: {detail}", None

    def _check_ends(self, files) -> None:
        """Files before the last data file must end in a BLANK; only one all-zero file may follow."""
        last_data = -1
        for idx in range(len(files)):
            pos, kind = self.data_end.get(idx, (0, END_ZERO))
            if pos > 0 or kind not in (END_ZERO,):
                last_data = idx
        for idx in range(last_data):
            pos, kind = self.data_end.get(idx, (0, END_ZERO))
            if kind == END_ZERO:
                self.add("commitlog.early-end", files[idx].path, pos,
                         f"data ends at {pos} with zeros instead of a BLANK, but later files hold data; "
                         "the broker's recovery would stop here")
        empties = [files[i] for i in range(last_data + 1, len(files))]
        if len(empties) > 1:
            for seg in empties[1:]:
                self.add("commitlog.extra-empty", seg.path, 0,
                         "more than one empty pre-allocated file after the last data", excerpt=False)


def valid_end_from_walk(clv: "CommitLogVerifier", records: RecordChunks, start) -> tuple[int, FileEnd, int]:
    """The broker's walk (CRC on) replayed from a deep walk's results, without reading again.

    From the start file: the first bad body CRC, the first DELAY record-check failure or the
    first stop that is not a BLANK ends the log; a BLANK moves on to the next file.
    """
    files = clv.store.commitlog.files
    end = None
    for idx in range(start.file_index, len(files)):
        seg = files[idx]
        pos, kind = clv.data_end.get(idx, (0, END_ZERO))
        crc_at = clv.crc_failures.get(idx)
        delay_at = clv.delay_stops.get(idx)
        if delay_at is not None and delay_at < pos and (crc_at is None or delay_at < crc_at):
            end = FileEnd(str(seg.path), seg.start, seg.size, delay_at, END_DISPATCH_STOP,
                          detail=clv.delay_texts.get((idx, delay_at), ""), check=DISPATCH_STOP_CHECK)
            break
        if crc_at is not None and crc_at < pos:
            end = FileEnd(str(seg.path), seg.start, seg.size, crc_at, END_CORRUPT, detail="body CRC mismatch",
                          check="commitlog.body-crc")
            break
        end = FileEnd(str(seg.path), seg.start, seg.size, pos, kind)
        if end.ends_log:
            break
    if end is None:
        return start.offset, None, 0
    offset = end.log_end
    return offset, end, records.count(start.offset, offset)


def _starts_with_data(path) -> bool:
    try:
        return first_nonzero(path, 0, cl.RECORD_PREFIX_SIZE) is not None
    except RmqError:
        return False


def _size_of(path) -> int:
    try:
        with ReadOnlyFile(path) as fh:
            return fh.size()
    except RmqError:
        return 0


def _last_nonzero_end(path, lo: int, hi: int) -> int:
    """Position just past the last non-zero byte in [lo, hi) (lo when all zero)."""
    with ReadOnlyFile(path) as fh:
        raw = np.frombuffer(fh.read(lo, max(0, hi - lo), exact=False), np.uint8)
    nz = np.flatnonzero(raw)
    return lo + (int(nz[-1]) + 1 if len(nz) else 0)


def _queue_order(topic_id: np.ndarray, queue_id: np.ndarray, phy: np.ndarray) -> np.ndarray:
    """The order of records by topic, queue, then offset (``np.lexsort``'s): with the offsets
    already ascending, as in a walk's table, one stable sort of (topic, queue) gives it."""
    if len(phy) > 1 and not (phy[1:] > phy[:-1]).all():
        return np.lexsort((phy, queue_id, topic_id))
    key = topic_id.astype(np.int64) << 32
    key += queue_id.astype(np.int64) - np.iinfo(np.int32).min
    return np.argsort(key, kind="stable")


class QueueOffsetCheck:
    """QUEUEOFFSET continuity per topic/queue over NOT/COMMIT records, carved ones included.

    Fed the record table one chunk at a time in CommitLog order; the last record of each
    queue is carried from chunk to chunk. A jump whose two records have a ``damaged`` range
    between them is the damage's own consequence (the lost records lay there): the walk's
    stop finding already names it.
    """

    def __init__(self, sink: FindingSink, topic_id: int | None = None, queue_id: int | None = None,
                 damaged: list[tuple[int, int]] = (), skip_topics=(), keep_firsts: bool = False):
        self.sink, self.topic_id, self.queue_id = sink, topic_id, queue_id
        #: ``keep_firsts``: the first record of each queue met (no record before it to compare
        #: with) is kept in ``firsts``, so ``stitch`` can compare it later (an engine task's chunk)
        self.keep_firsts = keep_firsts
        self.firsts: RecordTable | None = None
        #: BatchCQ topics: their queue offsets step by the inner count (checked on their units)
        self.skip_topics = np.asarray(skip_topics, dtype=np.int64)
        self.damage_starts = np.sort(np.asarray([a for a, _ in damaged], dtype=np.int64))
        self._last: dict[tuple[int, int], tuple[int, int]] = {}     # queue -> (QUEUEOFFSET, phy) of its last record

    def feed(self, table: RecordTable) -> None:
        c = table.cols
        if not len(table):
            return
        sel = goes_to_consumequeue(c["tx"])
        if len(self.skip_topics):
            sel &= ~np.isin(c["topic_id"], self.skip_topics)
        if self.topic_id is not None:
            sel &= c["topic_id"] == self.topic_id
        if self.queue_id is not None:
            sel &= c["queue_id"] == self.queue_id
        idx = np.flatnonzero(sel)
        if not len(idx):
            return
        order = idx[_queue_order(c["topic_id"][idx], c["queue_id"][idx], c["phy"][idx])]
        t, q, o, phy = c["topic_id"][order], c["queue_id"][order], c["queue_offset"][order], c["phy"][order]
        first = np.ones(len(order), dtype=bool)
        first[1:] = (t[1:] != t[:-1]) | (q[1:] != q[:-1])
        prev_o, prev_phy = np.roll(o, 1), np.roll(phy, 1)
        known = ~first
        opened = []
        for g in np.flatnonzero(first):           # a queue's first record here: its last one before
            last = self._last.get((int(t[g]), int(q[g])))
            if last is not None:
                prev_o[g], prev_phy[g] = last
                known[g] = True
            else:
                opened.append(int(order[g]))
        if self.keep_firsts and opened:
            self._note_firsts(table, opened)
        for g in np.flatnonzero(np.append(first[1:], True)):
            self._last[(int(t[g]), int(q[g]))] = (int(o[g]), int(phy[g]))
        bad = np.flatnonzero(known & (o != prev_o + 1))
        if len(bad) and len(self.damage_starts):
            starts = self.damage_starts
            explained = (np.searchsorted(starts, prev_phy[bad], side="left")
                         < np.searchsorted(starts, phy[bad], side="left"))
            bad = bad[~explained]
        at = cl.MESSAGE_HEAD_OFFSETS["queue_offset"]
        for b in bad:
            path, pos = table.where(int(order[b]))
            self.sink.add("commitlog.queue-offset", path, pos + at,
                          f"record at {pos} ({table.topics.names[int(t[b])]}/{int(q[b])}) has QUEUEOFFSET "
                          f"{int(o[b])}, the previous record of the queue has {int(prev_o[b])}", excerpt_len=8)

    def _note_firsts(self, table: RecordTable, rows: list[int]) -> None:
        rows = np.sort(np.asarray(rows, dtype=np.int64))
        names = ("phy", "position", "size", "queue_id", "queue_offset", "tx", "topic_id", "file_idx")
        cols = {name: table.cols[name][rows] for name in names}
        if self.firsts is not None:
            cols = {name: np.concatenate([self.firsts.cols[name], cols[name]]) for name in names}
        self.firsts = RecordTable(cols, table.topics, table.files)

    def stitch(self, later: "QueueOffsetCheck") -> None:
        """Go on with ``later``, a checker (``keep_firsts``) fed the next records on its own: the
        first record of each of its queues is checked against the last one carried here, then
        its last records are carried on."""
        if later.firsts is not None:
            self.feed(later.firsts)
        self._last.update(later._last)
