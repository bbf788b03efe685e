"""Read ConsumeQueue files: units up to the logical end (format.md §4)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from formats.consumequeue import (BCQ_UNIT_DTYPE, BCQ_UNIT_SIZE, CQ_UNIT_DTYPE, CQ_UNIT_SIZE, MAX_CQ_FILE_SIZE,
                                  PRE_BLANK_COMMITLOG_OFFSET, PRE_BLANK_SIZE, PRE_BLANK_TAGS_CODE)
from rmqtool.io.fileio import ReadOnlyFile, unit_file_head
from rmqtool.io.segments import SegmentQueue


@dataclass
class ConsumeQueueUnits:
    """Units of one queue in queue-offset order, with where each one lives."""
    topic: str
    queue_id: int
    units: np.ndarray                 # CQ_UNIT_DTYPE
    queue_offset: np.ndarray          # int64
    file_index: np.ndarray            # index into queue.files
    position: np.ndarray              # byte position inside that file
    queue: SegmentQueue
    end_queue_offset: int             # next queue offset to be written (getMaxOffsetInQueue)
    stale_units_after_end: int = 0    # non-zero units found past the logical end
    short_files: list = field(default_factory=list)   # (path, size) of files not a whole unit count

    @property
    def pre_blank(self) -> np.ndarray:
        return is_pre_blank(self.units)

    def __len__(self):
        return len(self.units)


def is_pre_blank(u: np.ndarray) -> np.ndarray:
    """Which units (``CQ_UNIT_DTYPE``) are the filler units before a queue's first real one."""
    return ((u["commitlog_offset"] == PRE_BLANK_COMMITLOG_OFFSET) & (u["size"] == PRE_BLANK_SIZE)
            & (u["tags_code"] == PRE_BLANK_TAGS_CODE))


def valid_units(offsets: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The broker's test of a unit (ConsumeQueue load/recover): commitlog offset >= 0 and
    size > 0. A queue's logical end is its first unit that fails it."""
    return (offsets >= 0) & (sizes > 0)


def logical_end(units: np.ndarray) -> int:
    """How many units (``CQ_UNIT_DTYPE``) come before the first one that is not valid."""
    invalid = np.flatnonzero(~valid_units(units["commitlog_offset"], units["size"]))
    return int(invalid[0]) if len(invalid) else len(units)


def first_served(commitlog_offsets: np.ndarray, commitlog_min: int) -> int | None:
    """Index of the first unit the broker serves after a load (``ConsumeQueue.correctMinOffset``: the
    first pointing at or above the CommitLog's min offset; a filler unit points at 0), None when
    none does."""
    ok = np.flatnonzero(np.asarray(commitlog_offsets) >= commitlog_min)
    return int(ok[0]) if len(ok) else None


def _unit_bytes(path, unit: int, limit: int | None) -> tuple[bytes, int]:
    """The bytes of a queue file worth reading (whole units) and the file's size: no further than
    the queue's file size ``limit`` (the broker maps no more of a file; a file larger than
    ``MAX_CQ_FILE_SIZE`` with no smaller queue file size to go by is refused: ``too_large``),
    and a pre-allocated file's tail past its last data run, a hole of zero units, only as far as
    one unit: it stands for the rest (where the logical end falls, and what follows it, are the
    same), so the hole is not read."""
    with ReadOnlyFile(path) as fh:
        raw, size, _ = unit_file_head(fh, unit, limit, MAX_CQ_FILE_SIZE, "ConsumeQueue file")
    return raw[:len(raw) // unit * unit], size


def read_unit_file(path, limit: int | None = None) -> tuple[np.ndarray, int]:
    """The units of one ConsumeQueue file (``CQ_UNIT_DTYPE``, whole units only, within the queue's
    file size ``limit``; see ``_unit_bytes``) and the file's size."""
    raw, size = _unit_bytes(path, CQ_UNIT_SIZE, limit)
    return np.frombuffer(raw, CQ_UNIT_DTYPE), size


def unit_files(queue: SegmentQueue):
    """(file index, segment, units, file size, units before the logical end, the end falls in this
    file) of each file of a queue in order, one in memory at a time. The logical end is the first
    unit with offset < 0 or size <= 0, or the end of a file shorter than the queue's file size; a
    file past it has None units before the end. The one walk of a queue to its end: ``read_units``
    and ``queue_tail`` (which stops at the end: the files after it are not read)."""
    ended = False
    for i, seg in enumerate(queue.files):
        units, size = read_unit_file(seg.path, queue.file_size)
        if ended:
            yield i, seg, units, size, None, False
            continue
        take = logical_end(units)
        ended = take < len(units) or size // CQ_UNIT_SIZE * CQ_UNIT_SIZE < queue.file_size
        yield i, seg, units, size, take, ended


def read_units(topic: str, queue_id: int, queue: SegmentQueue) -> ConsumeQueueUnits:
    """Read every file; the logical end is the first unit with offset < 0 or size <= 0."""
    parts, qoffs, fidx, poss = [], [], [], []
    stale, short = 0, []
    end_q = queue.files[0].start // CQ_UNIT_SIZE if queue.files else 0
    for i, seg, units, size, take, _ in unit_files(queue):
        if size // CQ_UNIT_SIZE * CQ_UNIT_SIZE != size:
            short.append((str(seg.path), size))
        if take is None:
            stale += int(np.count_nonzero(units["size"]))
            continue
        parts.append(units[:take])
        positions = np.arange(take, dtype=np.int64) * CQ_UNIT_SIZE
        poss.append(positions)
        qoffs.append((seg.start + positions) // CQ_UNIT_SIZE)
        fidx.append(np.full(take, i, dtype=np.int32))
        end_q = (seg.start + take * CQ_UNIT_SIZE) // CQ_UNIT_SIZE
        stale += int(np.count_nonzero(units[take:]["size"] > 0))     # the file the end falls in
    cat = (lambda xs, dt: np.concatenate(xs) if xs else np.zeros(0, dt))
    return ConsumeQueueUnits(topic, queue_id, cat(parts, CQ_UNIT_DTYPE), cat(qoffs, np.int64),
                             cat(fidx, np.int32), cat(poss, np.int64), queue, end_q, stale, short)


def queue_tail(queue: SegmentQueue) -> tuple[int, int]:
    """(the queue's end offset, the largest commitlog offset + size of its units before that end,
    filler units aside; 0 when none) as ``read_units`` finds them (``unit_files``), one file in
    memory at a time, no file past the end read."""
    end_q = queue.files[0].start // CQ_UNIT_SIZE if queue.files else 0
    max_phy = 0
    for _, seg, units, _, take, ends in unit_files(queue):
        real = units[:take][~is_pre_blank(units[:take])]
        if len(real):
            max_phy = max(max_phy, int((real["commitlog_offset"] + real["size"]).max()))
        end_q = (seg.start + take * CQ_UNIT_SIZE) // CQ_UNIT_SIZE
        if ends:
            break
    return end_q, max_phy


def read_batch_queue(store, ref) -> list[tuple[str, int, np.ndarray]]:
    """(file, first unit position, units) of a BatchConsumeQueue, up to the first zero unit."""
    out = []
    queue = store.queue(ref.topic, ref.queue_id, batch=True)
    for seg in queue.files:
        raw, _ = _unit_bytes(seg.path, BCQ_UNIT_SIZE, queue.file_size)
        units = np.frombuffer(raw, BCQ_UNIT_DTYPE)
        end = np.flatnonzero((units["commitlog_offset"] == 0) & (units["size"] == 0))
        if len(end):
            units = units[:end[0]]
        out.append((str(seg.path), seg.start, units))
        if len(end):
            break
    return out
