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
from rmqtool.io.dledger_layout import committed_index, index_queue, read_index_units
from rmqtool.kernels.gather import strided_view

#: findings of one kind reported per batch at most (the sink caps the whole run too)
PER_BATCH = 3


def entry_columns(batch) -> dict:
    """Per record of a DLedger data file's batch: its entry's index, term, pos and size."""
    at = batch.position - batch.buf_base - dl.ENTRY_BODY_OFFSET
    heads = strided_view(batch.buf, dl.ENTRY_HEADER_DTYPE)[at]
    return {"dl_index": heads["index"].astype(np.int64), "dl_term": heads["term"].astype(np.int64),
            "dl_pos": heads["pos"].astype(np.int64), "dl_size": heads["size"].astype(np.int64)}


class EntryChecks:
    """Fed the entry columns of every walked (not carved) record of a DLedger member's data files,
    by the sequential walk and by the engine's tasks alike (``batch_columns`` adds them)."""

    def __init__(self, store, add):
        self.add = add                    # CommitLogVerifier.add
        self.member = store.commitlog_dirs[0].parent
        self.index = index_queue(self.member)
        self.prev_index: int | None = None
        self.prev_term: int | None = None
        self.entries = 0

    def feed(self, path: str, cols: dict) -> None:
        """The entry columns (``entry_columns``) of walked records of one file, in order."""
        index, term = cols.pop("dl_index", None), cols.pop("dl_term", None)
        pos, size = cols.pop("dl_pos", None), cols.pop("dl_size", None)
        if index is None or not len(index):
            return
        where = cols["position"] - dl.ENTRY_BODY_OFFSET           # in-file entry positions
        prev_i = np.concatenate(([index[0] - 1 if self.prev_index is None else self.prev_index], index[:-1]))
        prev_t = np.concatenate(([term[0] if self.prev_term is None else self.prev_term], term[:-1]))
        for k in np.flatnonzero(index != prev_i + 1)[:PER_BATCH].tolist():
            self.add("dledger.index-gap", path, int(where[k]),
                     f"entry index {int(index[k])} follows {int(prev_i[k])}")
        for k in np.flatnonzero(term < prev_t)[:PER_BATCH].tolist():
            self.add("dledger.term", path, int(where[k]),
                     f"entry {int(index[k])} has term {int(term[k])} after term {int(prev_t[k])}")
        self._cross_check(path, where, index, term, pos, size)
        self.prev_index, self.prev_term = int(index[-1]), int(term[-1])
        self.entries += len(index)

    def break_chain(self) -> None:
        """The walk stopped on damage: the next walked entry is not judged against the last one."""
        self.prev_index = self.prev_term = None

    def _cross_check(self, path, where, index, term, pos, size) -> None:
        if not self.index.files or index.min() < 0:
            return
        first, last = int(index.min()), int(index.max())
        if last - first > 4 * len(index):           # indexes far apart (damage): unit by unit
            units = np.concatenate([read_index_units(self.index, int(i), 1) for i in index])
        else:
            units = read_index_units(self.index, first, last - first + 1)[index - first]
        bad = ((units["magic"] != dl.ENTRY_MAGIC) | (units["pos"] != pos)
               | (units["size"] != size) | (units["index"] != index) | (units["term"] != term))
        for k in np.flatnonzero(bad)[:PER_BATCH].tolist():
            u = units[k]
            self.add("dledger.index-file", path, int(where[k]),
                     f"entry {int(index[k])} (pos {int(pos[k])}, size {int(size[k])}, term "
                     f"{int(term[k])}): its index unit holds magic {int(u['magic'])}, pos {int(u['pos'])}, size "
                     f"{int(u['size'])}, index {int(u['index'])}, term {int(u['term'])}")

    def finish(self) -> None:
        committed = committed_index(self.member)
        if committed is not None and self.prev_index is not None and committed > self.prev_index:
            self.add("dledger.checkpoint", self.member / "checkpoint", None,
                     f"committedIndex {committed} is past the last entry walked ({self.prev_index})")
