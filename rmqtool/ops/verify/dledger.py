"""DLedger-mode checks (docs/format-dledger.md) on the entries behind the walked records.

The walk (``records.scan``) already checks each entry's magic, size, own pos and body. Here,
entry by entry in CommitLog order: the entry index rises by one, the term never falls, and
the member's entry index (``dledger-<selfId>/index/``, one unit per entry index) holds the
entry's pos, size, index and term. After the walk: the checkpoint's committedIndex is not past
the last entry. Units are read for each batch's index range, so memory stays flat.
"""
from __future__ import annotations

import numpy as np

from formats import dledger as dl
from rmqtool.io.dledger_layout import INDEX_DIR, committed_index
from rmqtool.io.fileio import ReadOnlyFile
from rmqtool.io.segments import SegmentQueue
from rmqtool.kernels.gather import strided_view

#: findings of one kind reported per batch at most (the sink caps the whole run too)
PER_BATCH = 3


class EntryChecks:
    """Fed every walked (not carved) record batch of a DLedger member's data files."""

    def __init__(self, store, add):
        self.add = add                    # CommitLogVerifier.add
        self.member = store.commitlog_dirs[0].parent
        self.index = SegmentQueue.discover([self.member / INDEX_DIR], "dledger-index", None, dl.INDEX_UNIT_SIZE)
        self.prev_index: int | None = None
        self.prev_term: int | None = None
        self.entries = 0

    def feed(self, batch) -> None:
        if not len(batch):
            return
        at = batch.position - batch.buf_base - dl.ENTRY_BODY_OFFSET
        heads = strided_view(batch.buf, dl.ENTRY_HEADER_DTYPE)[at]
        index, term = heads["index"].astype(np.int64), heads["term"].astype(np.int64)
        where = batch.position - dl.ENTRY_BODY_OFFSET           # in-file entry positions
        prev_i = np.concatenate(([index[0] - 1 if self.prev_index is None else self.prev_index], index[:-1]))
        prev_t = np.concatenate(([term[0] if self.prev_term is None else self.prev_term], term[:-1]))
        for k in np.flatnonzero(index != prev_i + 1)[:PER_BATCH].tolist():
            self.add("dledger.index-gap", batch.path, int(where[k]),
                     f"entry index {int(index[k])} follows {int(prev_i[k])}")
        for k in np.flatnonzero(term < prev_t)[:PER_BATCH].tolist():
            self.add("dledger.term", batch.path, int(where[k]),
                     f"entry {int(index[k])} has term {int(term[k])} after term {int(prev_t[k])}")
        self._cross_check(batch, where, index, term, heads)
        self.prev_index, self.prev_term = int(index[-1]), int(term[-1])
        self.entries += len(index)

    def _units(self, first: int, count: int) -> np.ndarray:
        """Index units for entry indexes [first, first + count) (zeros where no file holds them)."""
        out = np.zeros(count, dtype=dl.INDEX_UNIT_DTYPE)
        raw = out.view(np.uint8)
        lo, hi = first * dl.INDEX_UNIT_SIZE, (first + count) * dl.INDEX_UNIT_SIZE
        pos = lo
        while pos < hi:
            hit = self.index.locate(pos)
            end = min(hi, (pos // self.index.file_size + 1) * self.index.file_size)
            if hit is not None:
                seg, at = hit
                with ReadOnlyFile(seg.path) as fh:
                    data = fh.read(at, min(end - pos, max(0, fh.size() - at)), exact=False)
                raw[pos - lo:pos - lo + len(data)] = np.frombuffer(data, np.uint8)
            pos = end
        return out

    def _cross_check(self, batch, where, index, term, heads) -> None:
        if not self.index.files or index.min() < 0:
            return
        first, last = int(index.min()), int(index.max())
        if last - first > 4 * len(index):           # indexes far apart (damage): unit by unit
            units = np.concatenate([self._units(int(i), 1) for i in index])
        else:
            units = self._units(first, last - first + 1)[index - first]
        bad = ((units["magic"] != dl.ENTRY_MAGIC) | (units["pos"] != heads["pos"])
               | (units["size"] != heads["size"]) | (units["index"] != index) | (units["term"] != term))
        for k in np.flatnonzero(bad)[:PER_BATCH].tolist():
            u = units[k]
            self.add("dledger.index-file", batch.path, int(where[k]),
                     f"entry {int(index[k])} (pos {int(heads['pos'][k])}, size {int(heads['size'][k])}, term "
                     f"{int(term[k])}): its index unit holds magic {int(u['magic'])}, pos {int(u['pos'])}, size "
                     f"{int(u['size'])}, index {int(u['index'])}, term {int(u['term'])}")

    def finish(self) -> None:
        committed = committed_index(self.member)
        if committed is not None and self.prev_index is not None and committed > self.prev_index:
            self.add("dledger.checkpoint", self.member / "checkpoint", None,
                     f"committedIndex {committed} is past the last entry walked ({self.prev_index})")
