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
import pickle
import shutil
import tempfile
import threading
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from rmqtool.errors import writing_to
from rmqtool.kernels.search import search_sorted
from rmqtool.ops.verify.records import RecordTable, TopicTable

#: records per chunk: the unit of memory of deep verify (about 80 bytes a record, plus 12 a key;
#: the joins' threads hold one chunk each, plus the next one loading)
CHUNK_RECORDS = 1 << 17
#: bytes of routed rows held in memory before they are appended to their chunk's file
ROW_BUFFER = 16 << 20


class SpillDir:
    """A temporary directory made on first use and removed by ``close`` (with whatever else
    was handed to ``on_close``: an engine walk's staging, kept until the joins have read it)."""

    def __init__(self):
        self.path: str | None = None
        self._closers: list = []
        self._making = threading.Lock()       # the walk and the index checks' thread both spill

    def file(self, name: str) -> str:
        if self.path is None:
            with self._making:
                if self.path is None:
                    self.path = tempfile.mkdtemp(prefix="rmqtool-verify-")
        return os.path.join(self.path, name)

    def on_close(self, fn) -> None:
        self._closers.append(fn)

    def close(self) -> None:
        closers, self._closers = self._closers, []
        try:
            for fn in reversed(closers):      # the last handed over first
                fn()
        finally:
            if self.path is not None:
                shutil.rmtree(self.path, ignore_errors=True)
                self.path = None


@dataclass
class StagedPart:
    """Records left in staging, read where they are joined, never by the driver: an engine
    task's (``ops.verify.engine_walk``; ``topics`` maps the task's topic ids to the run's, ``file_idx``
    is their file), or the driver's own records put there for the join tasks (both None: the
    columns carry the run's ids and their files)."""
    staging: object
    ref: str
    topics: np.ndarray | None = None
    file_idx: int | None = None

    def load(self) -> dict:
        cols = pickle.loads(self.staging.read(self.ref))
        return cols if self.topics is None else adopt_columns(cols, self.topics, self.file_idx)


def adopt_columns(cols: dict, topics: np.ndarray, file_idx: int) -> dict:
    """A task's columns in the run's numbering: topic ids mapped by ``topics``, the file's index."""
    ids = np.asarray(cols["topic_id"])
    cols["topic_id"] = topics[ids] if len(ids) else ids.astype(np.int32)
    cols["file_idx"] = np.full(len(cols["phy"]), file_idx, dtype=np.int32)
    return cols


@dataclass
class Piece:
    """Consecutive records of a chunk, with what is known of them without reading them: in
    memory (``cols``), in a spill file (``spilled``: path, each column's dtype/offset/shape), or
    in an engine's staging (``staged``)."""
    rows: int
    first: int                    # CommitLog offset of the first record, and of the last
    last: int
    walked: int                   # records not carved
    cols: dict | None = None
    spilled: tuple | None = None
    staged: StagedPart | None = None

    @classmethod
    def of(cls, cols: dict) -> "Piece":
        phy = cols["phy"]
        carved = int(np.count_nonzero(cols["carved"])) if "carved" in cols else 0
        return cls(len(phy), int(phy[0]), int(phy[-1]), len(phy) - carved, cols=cols)

    def load(self, columns: tuple[str, ...] | None = None) -> dict:
        if self.cols is not None:
            return self.cols
        if self.staged is not None:
            return self.staged.load()
        path, layout = self.spilled
        cols = {}
        for name in columns or layout:
            if name not in layout:
                continue
            dtype, at, shape = layout[name]
            cols[name] = np.fromfile(path, dtype=dtype, count=int(np.prod(shape)), offset=at).reshape(shape)
        return cols


def _merged(pieces: list[Piece], topics, files) -> Piece:
    """In-memory pieces as one table's columns (key_rec rebased)."""
    table = RecordTable.from_parts([p.cols for p in pieces], topics, files)
    return Piece(len(table), pieces[0].first, pieces[-1].last, sum(p.walked for p in pieces), cols=table.cols)


class RecordChunks:
    """The record table in chunks of consecutive records, filled part by part during the walk.

    ``starts[k]`` is the CommitLog offset where chunk k's range begins (its first record;
    0 for the first chunk), so an offset belongs to chunk ``route(offset)``. There is
    always at least one chunk (possibly empty), so every unit and entry has one to go to.
    A chunk is a list of ``Piece``: records this process walked (in memory, or spilled once
    the chunk is full) and records an engine task left in staging (``adopt``), which stay
    there until the chunk's joins read them.

    While the walk fills it, another thread may route rows already (``known_starts``): a chunk's
    start is known once its first record has arrived, so an offset below the start of the chunk
    being filled has its chunk for good; an offset at or past it waits for the next chunk to begin
    or for ``finish``.
    """

    def __init__(self, topics: TopicTable, files: list[str], spill: SpillDir, chunk_records: int | None = None):
        self.topics = topics
        self.files = files
        self.spill = spill
        self.chunk_records = chunk_records or CHUNK_RECORDS
        self._pending: list[Piece] = []
        self._pending_rows = 0
        self._chunks: list[list[Piece]] = []
        self._spilled = 0
        self._adopted = False
        self._last_phy = -1
        self.records = 0
        self._begun: list[int] = []           # the start of every chunk begun so far (the last: filling)
        self._known = threading.Condition()
        self._ended = False                   # finished, or abandoned (``abandon``)
        self._abandoned = False

    # --- filling ------------------------------------------------------------------------------
    def append(self, cols: dict) -> None:
        """One batch's columns (``batch_columns`` plus ``file_idx``), in CommitLog order."""
        if len(cols["phy"]):
            self._add(Piece.of(cols))

    def adopt(self, part: StagedPart, rows: int, first: int, last: int) -> None:
        """Records left in staging by an engine task (none carved), in CommitLog order."""
        if not self._adopted:
            self.spill.on_close(self._discard_adopted)
        self._adopted = True
        if rows:
            self._add(Piece(rows, first, last, rows, staged=part))
        else:
            part.staging.discard(part.ref)

    def _discard_adopted(self) -> None:
        """The adopted parts leave staging with this run (a fleet's staging outlives it)."""
        for piece in (p for pieces in [*self._chunks, self._pending] for p in pieces):
            if piece.staged is not None:
                piece.staged.staging.discard(piece.staged.ref)

    def _add(self, piece: Piece) -> None:
        if piece.first <= self._last_phy or piece.last < piece.first:
            raise ValueError("record batches are not in commitlog order")
        self._last_phy = piece.last
        if not self._pending:                 # a chunk begins: offsets below its start are routable
            with self._known:
                self._begun.append(piece.first if self._begun else 0)
                self._known.notify_all()
        self._pending.append(piece)
        self._pending_rows += piece.rows
        self.records += piece.rows
        if self._pending_rows >= self.chunk_records:
            self._chunks.append(self._settle(self._pending, spill=True))
            self._pending, self._pending_rows = [], 0

    def _settle(self, pieces: list[Piece], spill: bool) -> list[Piece]:
        """A chunk's pieces with each run of in-memory ones merged (and spilled, ``spill``)."""
        out: list[Piece] = []
        run: list[Piece] = []
        for piece in [*pieces, None]:
            if piece is not None and piece.cols is not None:
                run.append(piece)
                continue
            if run:
                merged = _merged(run, self.topics, self.files)
                out.append(self._spill(merged) if spill else merged)
                run = []
            if piece is not None:
                out.append(piece)
        return out

    def _spill(self, piece: Piece) -> Piece:
        """The piece's columns one after another in a raw file (their layout kept here)."""
        path = self.spill.file(f"records-{self._spilled}.bin")
        self._spilled += 1
        layout, at = {}, 0
        with writing_to(path), open(path, "wb") as fh:     # a full temporary disk names the file
            for name, col in piece.cols.items():
                col = np.ascontiguousarray(col)
                col.tofile(fh)
                layout[name] = (col.dtype, at, col.shape)
                at += col.nbytes
        return Piece(piece.rows, piece.first, piece.last, piece.walked, spilled=(path, layout))

    def finish(self) -> "RecordChunks":
        """End of the walk: the rest becomes the last chunk (an empty one for an empty walk)."""
        if self._pending or not self._chunks:
            self._chunks.append(self._settle(self._pending, spill=False))
        self._pending, self._pending_rows = [], 0
        starts = np.asarray([pieces[0].first if pieces else 0 for pieces in self._chunks], dtype=np.int64)
        starts[0] = 0
        with self._known:
            self.starts = starts
            self._ended = True
            self._known.notify_all()
        return self

    def abandon(self) -> None:
        """The walk failed: a thread waiting in ``known_starts`` raises ``WalkAbandoned``."""
        with self._known:
            self._abandoned = self._ended = True
            self._known.notify_all()

    def known_starts(self, offset: int) -> tuple[np.ndarray, int | None]:
        """Wait until the chunk holding ``offset`` is known; then (starts, bound): every offset below
        ``bound`` is routed by ``starts`` as ``route`` will route it after ``finish`` (bound None: the
        walk is finished, ``starts`` is final)."""
        with self._known:
            while not self._ended and not (len(self._begun) > 1 and offset < self._begun[-1]):
                self._known.wait()
            if self._abandoned:
                raise WalkAbandoned("the CommitLog walk ended early")
            if self._ended:
                return self.starts, None
            return np.asarray(self._begun, dtype=np.int64), self._begun[-1]

    def several(self) -> bool:
        """More than one chunk (known so far)."""
        return max(len(self._begun), len(self._chunks)) > 1

    # --- reading ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._chunks)

    def chunk(self, k: int, columns: tuple[str, ...] | None = None) -> RecordTable:
        """Chunk k as a record table (only ``columns`` when given)."""
        pieces = self._chunks[k]
        if len(pieces) == 1 and pieces[0].cols is not None:
            return RecordTable(pieces[0].cols, self.topics, self.files)
        parts = [piece.load(columns) for piece in pieces]
        if columns is not None:
            parts = [{name: part[name] for name in columns if name in part} for part in parts]
        return RecordTable.from_parts(parts, self.topics, self.files)

    def staged(self, k: int, staging) -> list[StagedPart]:
        """Chunk k as parts in staging, where an engine task can read them: what this process
        holds of it is put into ``staging`` (records it walked itself: carved, or appended
        since the engine's walk)."""
        return [piece.staged if piece.staged is not None
                else StagedPart(staging, staging.put(pickle.dumps(piece.load(), protocol=5)))
                for piece in self._chunks[k]]

    def __iter__(self):
        for k in range(len(self)):
            yield self.chunk(k)

    def route(self, offsets: np.ndarray, starts: np.ndarray | None = None) -> np.ndarray:
        """The chunk whose CommitLog range holds each offset (by ``starts``: the chunks known so far)."""
        return np.maximum(search_sorted(self.starts if starts is None else starts, offsets, side="right") - 1, 0)

    def count(self, lo: int, hi: int) -> int:
        """Walked (not carved) records starting in [lo, hi); a piece wholly inside or outside is
        counted from what is known of it, only one that straddles an end is read."""
        n = 0
        for k, pieces in enumerate(self._chunks):
            for piece in pieces:
                if piece.last < lo or piece.first >= hi:
                    continue
                if lo <= piece.first and piece.last < hi:
                    n += piece.walked
                    continue
                c = piece.load(("phy", "carved"))
                inside = (c["phy"] >= lo) & (c["phy"] < hi)
                if "carved" in c:
                    inside &= ~c["carved"]
                n += int(np.count_nonzero(inside))
        return n


class WalkAbandoned(Exception):
    """The walk that fills a ``RecordChunks`` failed before ``finish``."""


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
        self._place(rows, None if len(self.chunks) == 1 else self.chunks.route(offsets))

    def add_during_walk(self, rows: np.ndarray, offsets: np.ndarray) -> None:
        """``add`` while the walk may still be filling the chunks (from another thread): the rows
        whose chunk is known go now, the others as the walk goes on (``RecordChunks.known_starts``).
        Every chunk gets the same rows in the same order as from ``add`` after the walk: rows of one
        chunk are always placed in the same step."""
        ascending = len(offsets) < 2 or bool((offsets[1:] >= offsets[:-1]).all())
        while len(rows):
            starts, bound = self.chunks.known_starts(int(offsets[0] if ascending else offsets.min()))
            if bound is None:
                self.add(rows, offsets)
                return
            if ascending:              # the known ones are a prefix (an index file's entries are)
                cut = int(np.searchsorted(offsets, bound, side="left"))
                self._place(rows[:cut], self.chunks.route(offsets[:cut], starts))
                rows, offsets = rows[cut:], offsets[cut:]
                continue
            now = offsets < bound
            self._place(rows[now], self.chunks.route(offsets[now], starts))
            rows, offsets = rows[~now], offsets[~now]

    def _place(self, rows: np.ndarray, where: np.ndarray | None) -> None:
        """Rows into their chunks' buffers (``where``: each row's chunk; None: all to the only one)."""
        if where is None:
            self._buffer[0].append(rows)
        else:
            if not (where[1:] >= where[:-1]).all():      # a queue's units, an index file's entries: ascending
                order = np.argsort(where, kind="stable")
                rows, where = rows[order], where[order]
            for k, lo, hi in runs(where):
                self._buffer[k].append(rows[lo:hi])
        self._buffered += rows.nbytes
        if self._buffered > ROW_BUFFER and self.chunks.several():
            self._flush()

    def _flush(self) -> None:
        for k, parts in self._buffer.items():
            path = self.chunks.spill.file(f"{self.name}-{k}.bin")
            with writing_to(path), open(path, "ab") as fh:
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
