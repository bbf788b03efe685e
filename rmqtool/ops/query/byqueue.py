"""`query-queue`: ConsumeQueue units by queue offset, and upstream HEAD's getOffsetInQueueByTime.

The time lookup follows format.md §4.5 step by step: file choice from the store times
of each file's first/last unit (LOWER: first file whose last unit is at or after T,
else the last file; UPPER: last file whose first unit is at or before T, else none,
which upstream answers with 0), the two corner cases, the unit-aligned binary search
(units below the CommitLog minimum count as too small, an unreadable time answers 0),
the walk over equal times, and the clamp to [min, max] offset of the queue.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from formats import commitlog as cl
from formats.consumequeue import CQ_UNIT_DTYPE, CQ_UNIT_SIZE, ConsumeQueueUnit
from formats.derive import struct_of
from rmqtool.records.layout import STORE_TIMESTAMP, SYS_FLAG
from rmqtool.errors import RmqError, UnreadableError, UsageError
from rmqtool.io.consumequeue import logical_end, read_unit_file
from rmqtool.io.fileio import ReadOnlyFile

BOUNDARIES = ("lower", "upper")
_UNIT = struct_of(ConsumeQueueUnit)


def _jdiv(a: int, b: int) -> int:
    """Java integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


@dataclass
class _CqFile:
    start: int          # fileFromOffset
    data: bytes         # bytes up to the file's write position
    full: int           # nominal file size


class QueueView:
    """One consume queue as upstream loads it: files up to the logical end, min and max offset."""

    def __init__(self, store, topic: str, queue_id: int):
        self.store, self.topic, self.queue_id = store, topic, queue_id
        self.queue = store.queue(topic, queue_id)
        self.files: list[_CqFile] = []
        size = self.queue.file_size
        ended = False
        for seg in self.queue.files:
            if ended:
                break
            units, _ = read_unit_file(seg.path, size)
            take = logical_end(units)
            self.files.append(_CqFile(seg.start, units[:take].tobytes(), size))
            ended = take * CQ_UNIT_SIZE < size
        self.max_offset = ((self.files[-1].start + len(self.files[-1].data)) // CQ_UNIT_SIZE
                           if self.files else 0)
        cl_files = store.commitlog.files
        self.cl_min = store.commitlog.min_offset if cl_files else 0
        self.cl_max = store.commitlog.end_offset if cl_files else 0
        self.min_logic = self._min_logic_offset()
        self._fhs: dict[str, tuple[ReadOnlyFile, int]] = {}

    def close(self):
        for fh, _ in self._fhs.values():
            fh.close()

    @property
    def min_offset(self) -> int:
        return self.min_logic // CQ_UNIT_SIZE

    def _min_logic_offset(self) -> int:
        """Logical position of the first unit pointing at or above the CommitLog minimum."""
        from rmqtool.io.consumequeue import first_served
        for f in self.files:
            first = first_served(np.frombuffer(f.data, CQ_UNIT_DTYPE)["commitlog_offset"], self.cl_min)
            if first is not None:
                return f.start + first * CQ_UNIT_SIZE
        return self.max_offset * CQ_UNIT_SIZE

    def units(self, offset: int, count: int) -> list[tuple[int, int, int, int]]:
        """(queue offset, commitlog offset, size, tagsCode) for [offset, offset+count)."""
        out = []
        q = max(offset, 0)
        while q < min(offset + count, self.max_offset):
            pos = q * CQ_UNIT_SIZE
            f = next((f for f in self.files if f.start <= pos < f.start + len(f.data)), None)
            if f is None:
                q += 1
                continue
            out.append((q, *_UNIT.unpack_from(f.data, pos - f.start)))
            q += 1
        return out

    # --- CommitLog.pickupStoreTimestamp --------------------------------------------------
    def store_time(self, offset: int, size: int) -> int:
        if not (offset >= self.cl_min and offset + size <= self.cl_max):
            return -1
        hit = self.store.locate(offset)
        if hit is None:
            return -1
        seg, pos = hit
        try:
            key = str(seg.path)
            if key not in self._fhs:
                fh = ReadOnlyFile(seg.path)
                self._fhs[key] = (fh, fh.size())
            fh, fsize = self._fhs[key]
            flag_at = cl.MESSAGE_HEAD_OFFSETS["sys_flag"]
            raw = fh.read(pos + flag_at, SYS_FLAG.size, exact=False)
            if len(raw) < SYS_FLAG.size or pos + size > fsize:
                return -1
            ts_at = cl.store_timestamp_position(SYS_FLAG.unpack(raw)[0])
            raw = fh.read(pos + ts_at, STORE_TIMESTAMP.size, exact=False)
        except UnreadableError:
            raise
        except RmqError:
            return -1
        return STORE_TIMESTAMP.unpack(raw)[0] if len(raw) == STORE_TIMESTAMP.size else -1

    def _unit_time(self, f: _CqFile, pos: int) -> int:
        phy, size, _ = _UNIT.unpack_from(f.data, pos)
        return self.store_time(phy, size)

    # --- getOffsetInQueueByTime -------------------------------------------------------------
    def offset_by_time(self, timestamp: int, boundary: str = "lower") -> int:
        if boundary not in BOUNDARIES:
            raise UsageError(f"--boundary must be lower or upper, not {boundary!r}")
        f = self._file_by_time(timestamp, boundary)
        result = self._binary_search(f, timestamp, boundary) if f is not None else 0
        return min(max(result, self.min_offset), self.max_offset)

    def _file_by_time(self, ts: int, boundary: str) -> _CqFile | None:
        files = self.files
        if not files:
            return None
        starts, stops = [], []
        for i, f in enumerate(files):
            t = self._unit_time(f, 0) if len(f.data) >= CQ_UNIT_SIZE else -1
            starts.append(t if t > 0 else -1)
            stop = -1
            if i < len(files) - 1 and len(f.data) >= f.full:
                t = self._unit_time(f, f.full - CQ_UNIT_SIZE)
                stop = t if t > 0 else -1
            stops.append(stop)
        if boundary == "lower":
            for i, f in enumerate(files):
                if i < len(files) - 1 and stops[i] >= ts:
                    return f
            return files[-1]
        for i in range(len(files) - 1, -1, -1):
            if starts[i] <= ts:
                return files[i]
        return None              # upstream falls through to "Unknown boundary type"

    def _binary_search(self, f: _CqFile, ts: int, boundary: str) -> int:
        lower = boundary == "lower"
        if not f.data:
            return 0             # selectMappedBuffer fails on an empty file
        unit = CQ_UNIT_SIZE
        low = self.min_logic - f.start if self.min_logic > f.start else 0
        ceiling = len(f.data) - unit
        floor = low
        high = ceiling
        if self._unit_time(f, ceiling) < ts:
            return _jdiv(f.start + ceiling + unit, unit) if lower else _jdiv(f.start + ceiling, unit)
        if self._unit_time(f, floor) > ts:
            return _jdiv(f.start, unit) if lower else 0
        target = left = right = -1
        while high >= low:
            mid = _jdiv(low + high, 2 * unit) * unit
            phy, size, _ = _UNIT.unpack_from(f.data, mid)
            if phy < self.cl_min:
                low, left = mid + unit, mid
                continue
            t = self.store_time(phy, size)
            if t < 0:
                return 0
            if t == ts:
                target = mid
                break
            if t > ts:
                high, right = mid - unit, mid
            else:
                low, left = mid + unit, mid
        if target != -1:
            step, limit = (-unit, floor) if lower else (unit, ceiling)
            offset = target
            while True:
                attempt = offset + step
                if (attempt < limit) if lower else (attempt > limit):
                    break
                if self._unit_time(f, attempt) != ts:
                    break
                offset = attempt
        else:
            offset = right if lower else left
        return _jdiv(f.start + offset, unit)


class BatchQueueView(QueueView):
    """One BatchConsumeQueue (``batchconsumequeue/<topic>/<queueId>/``, docs/format-lmq-batchcq.md) as
    upstream's BatchConsumeQueue serves it. Its offsets are message offsets: a unit covers
    ``batch_size`` messages from ``msg_base_offset``; the max is the last unit's base + batch size
    (``reviseMaxOffsetInQueue``), the min the base of the first unit whose record the CommitLog still
    holds (``reviseMinOffsetInQueue`` / ``correctMinOffset``). ``files`` hold 46-byte units."""

    def __init__(self, store, topic: str, queue_id: int):
        from formats.consumequeue import BCQ_UNIT_DTYPE
        from rmqtool.io.consumequeue import first_served, read_batch_queue
        from rmqtool.io.store import QueueRef
        self.store, self.topic, self.queue_id = store, topic, queue_id
        self.queue = store.queue(topic, queue_id, batch=True)
        parts = read_batch_queue(store, QueueRef(topic, queue_id, None))
        self.files = [_CqFile(start, units.tobytes(), self.queue.file_size) for _, start, units in parts]
        self.batch_units = (np.concatenate([u for _, _, u in parts]) if parts else np.zeros(0, BCQ_UNIT_DTYPE))
        self.file_of = (np.concatenate([np.full(len(u), i, np.int64) for i, (_, _, u) in enumerate(parts)])
                        if parts else np.zeros(0, np.int64))
        u = self.batch_units
        self.max_offset = int(u["msg_base_offset"][-1] + u["batch_size"][-1]) if len(u) else 0
        cl_files = store.commitlog.files
        self.cl_min = store.commitlog.min_offset if cl_files else 0
        self.cl_max = store.commitlog.end_offset if cl_files else 0
        first = first_served(u["commitlog_offset"], self.cl_min)
        self._min = int(u["msg_base_offset"][first]) if first is not None else self.max_offset
        self.min_logic = 0
        self._fhs = {}

    @property
    def min_offset(self) -> int:
        return self._min

    def unit_index(self, offset: int) -> int | None:
        """The unit holding message ``offset``: the last whose base is at or below it (the binary
        search of ``getBatchMsgIndexBuffer``); None before the first unit or at/past the max."""
        if not (0 <= offset < self.max_offset) or not len(self.batch_units):
            return None
        i = int(np.searchsorted(self.batch_units["msg_base_offset"], offset, side="right")) - 1
        return i if i >= 0 else None

    def pull_units(self, offset: int) -> list[tuple[int, int, int, int]] | None:
        """``iterateFrom(offset)``: (base, commitlog offset, size, batch size) of the unit holding
        ``offset`` and the units after it in the same file; None when no unit holds it."""
        i = self.unit_index(offset)
        if i is None:
            return None
        u = self.batch_units
        stop = int(np.searchsorted(self.file_of, self.file_of[i], side="right"))
        return [(int(b), int(p), int(s), int(n)) for b, p, s, n in
                zip(u["msg_base_offset"][i:stop], u["commitlog_offset"][i:stop], u["size"][i:stop],
                    u["batch_size"][i:stop])]

    def units(self, offset: int, count: int) -> list[tuple[int, int, int, int]]:
        """(message offset, commitlog offset, size, tagsCode) of the unit holding ``offset`` (count 1)."""
        i = self.unit_index(offset)
        if i is None or count <= 0:
            return []
        u = self.batch_units[i]
        return [(offset, int(u["commitlog_offset"]), int(u["size"]), int(u["tags_code"]))]

    def offset_by_time(self, timestamp: int, boundary: str = "lower") -> int:
        raise UsageError(f"{self.topic}/{self.queue_id} is a BatchConsumeQueue: no lookup by time here")
