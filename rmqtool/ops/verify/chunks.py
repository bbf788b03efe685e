"""The walk's record table and what joins with it, cut by CommitLog range.

Deep verify joins every ConsumeQueue unit and every index entry with the record it
points at. Holding every record (and every unit and entry) at once grows with the store;
instead the records are cut into chunks of about ``CHUNK_RECORDS`` consecutive records,
units and entries are routed to the chunk whose CommitLog range holds their offset, and
the joins run one chunk at a time. A chunk holds every record whose offset lies in its
range, so a lookup inside a chunk answers exactly as one over the whole table: the record
starting at an offset, or the one containing it, is the last record at or before it.

Full chunks and routed rows wait in a temporary directory (``TMPDIR``) until their turn;
a store whose records fit one chunk never touches the disk.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from collections import defaultdict

import numpy as np

from rmqtool.kernels.search import search_sorted
from rmqtool.ops.verify.records import RecordTable, TopicTable

#: records per chunk: the unit of memory of deep verify (about 80 bytes a record, plus 12 a key)
CHUNK_RECORDS = 1 << 18
#: bytes of routed rows held in memory before they are appended to their chunk's file
ROW_BUFFER = 16 << 20


class SpillDir:
    """A temporary directory made on first use and removed by ``close``."""

    def __init__(self):
        self.path: str | None = None

    def file(self, name: str) -> str:
        if self.path is None:
            self.path = tempfile.mkdtemp(prefix="rmqtool-verify-")
        return os.path.join(self.path, name)

    def close(self) -> None:
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
            self.path = None


class RecordChunks:
    """The record table in chunks of consecutive records, filled part by part during the walk.

    ``starts[k]`` is the CommitLog offset where chunk k's range begins (its first record;
    0 for the first chunk), so an offset belongs to chunk ``route(offset)``. There is
    always at least one chunk (possibly empty), so every unit and entry has one to go to.
    """

    def __init__(self, topics: TopicTable, files: list[str], spill: SpillDir, chunk_records: int | None = None):
        self.topics = topics
        self.files = files
        self.spill = spill
        self.chunk_records = chunk_records or CHUNK_RECORDS
        self._pending: list[dict] = []
        self._pending_rows = 0
        self._stored: list[tuple[str, dict]] = []   # every full chunk: its file, each column's (dtype, offset, shape)
        self._last: RecordTable | None = None  # the final chunk, kept in memory
        self._first_phy: list[int] = []
        self._last_phy = -1
        self.records = 0

    # --- filling ------------------------------------------------------------------------------
    def append(self, cols: dict) -> None:
        """One batch's columns (``batch_columns`` plus ``file_idx``), in CommitLog order."""
        n = len(cols["phy"])
        if not n:
            return
        self._pending.append(cols)
        self._pending_rows += n
        self.records += n
        if self._pending_rows >= self.chunk_records:
            self._store(self._take())

    def finish(self) -> "RecordChunks":
        """End of the walk: the rest becomes the last chunk (an empty one for an empty walk)."""
        table = self._take()
        if len(table) or not self._stored:
            self._first_phy.append(int(table.cols["phy"][0]) if len(table) else 0)
            self._last = table
        self._first_phy[0] = 0
        self.starts = np.asarray(self._first_phy, dtype=np.int64)
        return self

    def _take(self) -> RecordTable:
        table = RecordTable.from_parts(self._pending, self.topics, self.files)
        self._pending, self._pending_rows = [], 0
        if len(table):
            first = int(table.cols["phy"][0])
            if first <= self._last_phy:
                raise ValueError("record batches are not in commitlog order")
            self._last_phy = int(table.cols["phy"][-1])
        return table

    def _store(self, table: RecordTable) -> None:
        """The chunk's columns one after another in a raw file (their layout kept here)."""
        path = self.spill.file(f"records-{len(self._stored)}.bin")
        layout, at = {}, 0
        with open(path, "wb") as fh:
            for name, col in table.cols.items():
                col = np.ascontiguousarray(col)
                col.tofile(fh)
                layout[name] = (col.dtype, at, col.shape)
                at += col.nbytes
        self._stored.append((path, layout))
        self._first_phy.append(int(table.cols["phy"][0]))

    # --- reading ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.starts)

    def chunk(self, k: int, columns: tuple[str, ...] | None = None) -> RecordTable:
        """Chunk k as a record table (only ``columns`` when given)."""
        if k == len(self._stored):
            return self._last
        path, layout = self._stored[k]
        cols = {}
        for name in columns or layout:
            dtype, at, shape = layout[name]
            cols[name] = np.fromfile(path, dtype=dtype, count=int(np.prod(shape)), offset=at).reshape(shape)
        return RecordTable(cols, self.topics, self.files)

    def __iter__(self):
        for k in range(len(self)):
            yield self.chunk(k)

    def route(self, offsets: np.ndarray) -> np.ndarray:
        """The chunk whose CommitLog range holds each offset."""
        return np.maximum(search_sorted(self.starts, offsets, side="right") - 1, 0)

    def count(self, lo: int, hi: int) -> int:
        """Walked (not carved) records starting in [lo, hi)."""
        n = 0
        for k in range(len(self)):
            c = self.chunk(k, ("phy", "carved")).cols
            if len(c["phy"]):
                n += int(np.count_nonzero(~c["carved"] & (c["phy"] >= lo) & (c["phy"] < hi)))
        return n


def runs(values: np.ndarray):
    """(value, start, end) of each run of equal values in a sorted array."""
    if not len(values):
        return
    cuts = np.flatnonzero(values[1:] != values[:-1]) + 1
    bounds = np.concatenate(([0], cuts, [len(values)]))
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        yield int(values[lo]), lo, hi


class RoutedRows:
    """Rows (a structured dtype) sent to the chunk that holds their CommitLog offset.

    Rows are buffered per chunk and appended to that chunk's file when the buffers pass
    ``ROW_BUFFER`` bytes; ``take(k)`` gives (and forgets) chunk k's rows in the order they were added.
    """

    def __init__(self, name: str, dtype: np.dtype, chunks: RecordChunks):
        self.name, self.dtype, self.chunks = name, np.dtype(dtype), chunks
        self._buffer: dict[int, list[np.ndarray]] = defaultdict(list)
        self._buffered = 0
        self._written: set[int] = set()

    def add(self, rows: np.ndarray, offsets: np.ndarray) -> None:
        if not len(rows):
            return
        if len(self.chunks) == 1:
            self._buffer[0].append(rows)
        else:
            where = self.chunks.route(offsets)
            if not (where[1:] >= where[:-1]).all():      # a queue's units, an index file's entries: ascending
                order = np.argsort(where, kind="stable")
                rows, where = rows[order], where[order]
            for k, lo, hi in runs(where):
                self._buffer[k].append(rows[lo:hi])
        self._buffered += rows.nbytes
        if self._buffered > ROW_BUFFER and len(self.chunks) > 1:
            self._flush()

    def _flush(self) -> None:
        for k, parts in self._buffer.items():
            with open(self.chunks.spill.file(f"{self.name}-{k}.bin"), "ab") as fh:
                for part in parts:
                    np.ascontiguousarray(part).tofile(fh)
            self._written.add(k)
        self._buffer.clear()
        self._buffered = 0

    def take(self, k: int) -> np.ndarray:
        parts = []
        if k in self._written:
            path = self.chunks.spill.file(f"{self.name}-{k}.bin")
            parts.append(np.fromfile(path, dtype=self.dtype))
            os.unlink(path)
            self._written.discard(k)
        parts.extend(self._buffer.pop(k, ()))
        if not parts:
            return np.zeros(0, self.dtype)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)
