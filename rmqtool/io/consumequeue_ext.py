"""Read ConsumeQueueExt files (``consumequeue_ext/<topic>/<queueId>/``, docs/format-cq-ext.md):
ext units by address, and each file's units in order up to its data end.

Reads are bounded: a unit is its 20-byte header and its bitmap (at most 32 KiB), a listing reads a
file a window at a time, never the whole file.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from formats.consumequeue_ext import (CqExtUnitHeader, EXT_HEADER_SIZE, EXT_UNIT_MIN_SIZE,
                                      ext_offset, is_ext_address)
from formats.derive import member_struct, struct_of
from rmqtool.io import storage
from rmqtool.io.fileio import ReadOnlyFile
from rmqtool.io.segments import SegmentQueue
from rmqtool.io.topicpath import queue_dir, queue_dirs

EXT_DIR = "consumequeue_ext"
_HEADER = struct_of(CqExtUnitHeader)
_SIZE = member_struct(CqExtUnitHeader, "size")
#: bytes read at once by a listing
WINDOW = 1 << 20


@dataclass(frozen=True)
class ExtUnit:
    """One ext unit and where it lives."""
    path: str
    position: int          # byte position in its file
    offset: int            # byte offset in the queue's ext space (file base + position)
    size: int
    tags_code: int
    store_timestamp: int
    bitmap_size: int
    bitmap: bytes

    @property
    def consistent(self) -> bool:
        """The unit's size is what ``CqExtUnit.write`` gives for its bitmap: 20 + bitmap size."""
        return self.bitmap_size >= 0 and self.size == EXT_UNIT_MIN_SIZE + self.bitmap_size

    def as_dict(self) -> dict:
        return {"file": self.path, "position": self.position, "ext_offset": self.offset, "size": self.size,
                "tags_code": self.tags_code, "store_timestamp": self.store_timestamp,
                "bitmap_size": self.bitmap_size, "filter_bitmap": self.bitmap.hex()}


class ExtProblem(Exception):
    """An address or a unit that cannot be read as the broker would (message, file, position)."""

    def __init__(self, message: str, path: str | None, position: int | None):
        super().__init__(message)
        self.message, self.path, self.position = message, path, position


def parse_header(data: bytes, path: str = "", position: int = 0) -> tuple[int, int, int, int] | None:
    """(size, tagsCode, store time, bitmap size) of the unit at the start of ``data``; None where
    the size field is <= 0 (the file's data end: ``CqExtUnit.read``, ``recover``). ``ExtProblem``
    for a header cut by the end of ``data`` or sizes that disagree."""
    if len(data) < 2:
        raise ExtProblem("no room for an ext unit's size field", path, position)
    size = _SIZE.unpack_from(data)[0]
    if size <= 0:
        return None
    if size < EXT_UNIT_MIN_SIZE:
        raise ExtProblem(f"ext unit size {size} is below the smallest unit ({EXT_UNIT_MIN_SIZE})", path, position)
    if len(data) < EXT_HEADER_SIZE:
        raise ExtProblem(f"ext unit of size {size} runs past the end of its file", path, position)
    size, tags, ts, bm_size = _HEADER.unpack_from(data)
    if bm_size < 0 or size != EXT_UNIT_MIN_SIZE + bm_size:
        raise ExtProblem(f"ext unit size {size} != {EXT_UNIT_MIN_SIZE} + its bitmap size {bm_size}", path, position)
    return size, tags, ts, bm_size


def parse_unit(data: bytes, path: str = "", position: int = 0, offset: int = 0) -> ExtUnit | None:
    """The unit at the start of ``data`` (header and bitmap); None at a data end; ``ExtProblem``
    for a unit that cannot be read (``parse_header``) or whose bitmap runs past ``data``."""
    head = parse_header(data, path, position)
    if head is None:
        return None
    size, tags, ts, bm_size = head
    if len(data) < size:
        raise ExtProblem(f"ext unit of size {size} runs past the end of its file", path, position)
    return ExtUnit(path, position, offset, size, tags, ts, bm_size, bytes(data[EXT_HEADER_SIZE:size]))


def ext_queue_dir(root: Path, topic: str, queue_id: int) -> Path:
    return queue_dir(storage.path(root) / EXT_DIR, topic, queue_id)


def ext_queues(root) -> list[tuple[str, int, Path]]:
    """Every ``consumequeue_ext/<topic>/<queueId>/`` (non-integer queue dirs and links skipped)."""
    return queue_dirs(storage.path(root) / EXT_DIR)


def has_ext(root) -> bool:
    return (storage.path(root) / EXT_DIR).is_dir()


class ExtQueue:
    """The ext files of one queue: units by address (``ConsumeQueueExt.get``) and in order."""

    def __init__(self, directory: Path, file_size: int | None = None):
        self.dir = storage.path(directory)         # a local path or an object-storage prefix
        self.segments = SegmentQueue.discover([self.dir], "consumequeue_ext", file_size)
        self._ends: dict[str, tuple] = {}       # file -> (data end, unit starts, problem)
        self._fh = None

    @classmethod
    def of(cls, root, topic: str, queue_id: int, file_size: int | None = None) -> "ExtQueue | None":
        d = ext_queue_dir(root, topic, queue_id)
        return cls(d, file_size) if d.is_dir() else None

    @property
    def file_size(self) -> int:
        return self.segments.file_size

    def locate(self, address: int):
        """(segment, position) of an address; ``ExtProblem`` when no file holds it."""
        if not is_ext_address(address):
            raise ExtProblem(f"tagsCode {address} is not an ext address", None, None)
        off = ext_offset(address)
        hit = self.segments.locate(off) if self.file_size else None
        if hit is None:
            raise ExtProblem(f"ext address {address} (offset {off}) is in no file of {self.dir}", str(self.dir), None)
        return hit

    def get(self, address: int) -> ExtUnit:
        """The unit an address points at: inside a file, before its data end, at a unit's start
        (``ExtProblem`` names what is wrong)."""
        import numpy as np
        seg, pos = self.locate(address)
        end, starts, _, _ = self._index(seg)
        if pos >= end:
            raise ExtProblem(f"ext address {address} points at position {pos}, at or past the data end {end} "
                             "of its file", str(seg.path), pos)
        k = int(np.searchsorted(starts, pos))
        if k >= len(starts) or int(starts[k]) != pos:
            raise ExtProblem(f"ext address {address} points at position {pos}, inside a unit, not at its start",
                             str(seg.path), pos)
        fh = self._open(seg)
        return self._read_one(fh, seg, pos, fh.size())

    def _open(self, seg) -> ReadOnlyFile:
        """One open file at a time (a queue's units are read file by file)."""
        if self._fh is not None and self._fh[0] == seg.path:
            return self._fh[1]
        self.close()
        fh = ReadOnlyFile(seg.path)
        self._fh = (seg.path, fh)
        return fh

    def close(self) -> None:
        if self._fh is not None:
            self._fh[1].close()
            self._fh = None

    def _read_one(self, fh, seg, pos: int, size: int) -> ExtUnit | None:
        """The unit at ``pos``: its header, then (the header says how long it is, at most 32 KiB)
        the whole unit."""
        head = fh.read(pos, min(EXT_HEADER_SIZE, size - pos), exact=False)
        parsed = parse_header(head, str(seg.path), pos)
        if parsed is None:
            return None
        data = head if parsed[0] == len(head) else fh.read(pos, min(parsed[0], size - pos), exact=False)
        return parse_unit(data, str(seg.path), pos, seg.start + pos)

    def data_end(self, seg) -> tuple[int, "np.ndarray"]:
        """(position of the file's data end, the positions units start at, increasing): the walk of
        ``ConsumeQueueExt.recover`` over the size fields. ``ExtProblem`` for a unit that cannot be
        read before the end (``_index`` keeps the units before it)."""
        end, starts, problem, _ = self._index(seg)
        if problem is not None:
            raise problem
        return end, starts

    def holds_bitmap(self, seg) -> bool:
        """Whether a unit of the file (before its data end) holds a filter bitmap."""
        return self._index(seg)[3]

    def _index(self, seg):
        key = str(seg.path)
        if key not in self._ends:
            self._ends[key] = self._scan(seg)
        return self._ends[key]

    def _scan(self, seg):
        """(data end, unit starts, the ExtProblem that stopped the walk or None, whether a unit holds a
        bitmap), a window at a time; a run of 20-byte units without bitmap (the usual unit) is taken a
        block at a time."""
        import numpy as np
        from formats.consumequeue_ext import EXT_HEADER_DTYPE
        parts, problem, bitmaps = [], None, False
        with ReadOnlyFile(seg.path) as fh:
            size = fh.size()
            pos, buf, buf_at = 0, b"", 0
            while pos + 2 <= size:
                lp = pos - buf_at
                rest = len(buf) - lp
                if rest < min(EXT_HEADER_SIZE, size - pos):
                    buf_at, buf = pos, fh.read(pos, min(WINDOW, size - pos), exact=False)
                    continue
                unit_size, _, _, bm = _HEADER.unpack_from(buf, lp) if rest >= EXT_HEADER_SIZE else (
                    _SIZE.unpack_from(buf, lp)[0], 0, 0, -1)
                if unit_size == EXT_UNIT_MIN_SIZE and bm == 0:
                    k = min(rest // EXT_HEADER_SIZE, 4096)
                    heads = np.frombuffer(buf, EXT_HEADER_DTYPE, count=k, offset=lp)
                    ok = (heads["size"] == EXT_UNIT_MIN_SIZE) & (heads["bitmap_size"] == 0)
                    run = k if ok.all() else int(np.argmin(ok))
                    parts.append(pos + EXT_HEADER_SIZE * np.arange(run, dtype=np.int64))
                    pos += EXT_HEADER_SIZE * run
                    continue
                try:
                    head = parse_header(bytes(buf[lp:lp + EXT_HEADER_SIZE]), str(seg.path), pos)
                except ExtProblem as exc:
                    problem = exc
                    break
                if head is None:
                    break
                if pos + head[0] > size:
                    problem = ExtProblem(f"ext unit of size {head[0]} runs past the end of its file", str(seg.path), pos)
                    break
                parts.append(np.array([pos], np.int64))
                bitmaps = bitmaps or head[3] > 0
                pos += head[0]
        starts = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        return pos, starts, problem, bitmaps

    def file_units(self, seg) -> Iterator[ExtUnit]:
        """The units of one file in order, up to its data end (``_index``'s walk: the first size
        <= 0, or the file's last 2 bytes), each read a window at a time. A unit that cannot be
        read ends them with ``ExtProblem``."""
        end, starts, problem, _ = self._index(seg)
        stops = starts.tolist()[1:] + [end]
        with ReadOnlyFile(seg.path) as fh:
            size = fh.size()
            buf, buf_at = memoryview(b""), 0
            for pos, stop in zip(starts.tolist(), stops):
                if stop > buf_at + len(buf):
                    buf_at, buf = pos, memoryview(fh.read(pos, min(max(WINDOW, stop - pos), size - pos), exact=False))
                unit = parse_unit(buf[pos - buf_at:stop - buf_at], str(seg.path), pos, seg.start + pos)
                if unit is None:          # the file changed since its walk (a live store): stop there
                    return
                yield unit
        if problem is not None:
            raise problem

    def unit_offsets(self):
        """The offset (in the queue's ext space) of every unit, file by file up to each file's
        data end or its first unit that cannot be read (numpy int64, increasing)."""
        import numpy as np
        out = [seg.start + self._index(seg)[1] for seg in self.segments.files]
        return np.concatenate(out) if out else np.zeros(0, np.int64)

    def headers_at(self, offsets):
        """(file index, position, tagsCode, store time) of the units starting at ``offsets`` (unit
        starts, as ``unit_offsets`` gives them), each file read a window at a time."""
        import numpy as np
        from formats.consumequeue_ext import EXT_HEADER_DTYPE
        offsets = np.asarray(offsets, dtype=np.int64)
        order = np.argsort(offsets, kind="stable")
        srt = offsets[order]
        bases = np.array([seg.start for seg in self.segments.files], dtype=np.int64)
        fidx = np.searchsorted(bases, srt, side="right") - 1
        pos = srt - bases[np.maximum(fidx, 0)]
        tags, ts = np.zeros(len(srt), np.int64), np.zeros(len(srt), np.int64)
        cols = np.zeros(len(srt), np.int64)            # where each header starts in its window
        for f in np.unique(fidx).tolist():
            sel = np.flatnonzero(fidx == f)
            with ReadOnlyFile(self.segments.files[f].path) as fh:
                size = fh.size()
                k = 0
                while k < len(sel):
                    w0 = int(pos[sel[k]])
                    data = fh.read(w0, min(WINDOW, size - w0), exact=False)
                    inside = sel[k:][pos[sel[k:]] + EXT_HEADER_SIZE <= w0 + len(data)]
                    if not len(inside):
                        raise ExtProblem("ext unit header cut by the end of its file", str(self.segments.files[f].path), w0)
                    cols[inside] = pos[inside] - w0
                    rows = np.frombuffer(data, np.uint8)[cols[inside][:, None] + np.arange(EXT_HEADER_SIZE)]
                    heads = rows.view(EXT_HEADER_DTYPE).reshape(-1)
                    tags[inside], ts[inside] = heads["tags_code"], heads["store_timestamp"]
                    k += len(inside)
        back = np.empty_like(order)
        back[order] = np.arange(len(order))
        return fidx[back], pos[back], tags[back], ts[back]

    def units(self) -> Iterator[ExtUnit]:
        for seg in self.segments.files:
            yield from self.file_units(seg)

    def end_offset(self) -> int:
        """Where the next unit goes (the broker's write position after recovery): the last file's
        data end; 0 without files."""
        if not self.segments.files:
            return 0
        seg = self.segments.files[-1]
        end, _ = self.data_end(seg)
        return seg.start + end


def ext_file_size(root) -> int | None:
    """The store's ConsumeQueueExt file size (the most common over its first queues' files, the
    name spacing first); the default when ``consumequeue_ext/`` holds no file; None without it."""
    from collections import Counter
    from formats.consumequeue_ext import DEFAULT_EXT_FILE_SIZE
    if not has_ext(root):
        return None
    seen = Counter()
    for _, _, d in ext_queues(root)[:64]:
        q = SegmentQueue.discover([d], "consumequeue_ext")
        if q.file_size:
            seen[q.file_size] += 3 if len(q.files) >= 2 else 1
    return seen.most_common(1)[0][0] if seen else DEFAULT_EXT_FILE_SIZE
