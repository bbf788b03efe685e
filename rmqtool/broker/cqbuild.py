"""ConsumeQueue files built as the dispatch results arrive, in memory bounded by a buffer.

``CqBuilder.add`` takes each batch's dispatch in CommitLog order, places every queue's units
with the broker's rule (``dispatch.QueueLayout``) and appends them to the queue's files
under a build directory, a buffer at a time (a file is opened only to write, so ten
thousand queues need no more open files than one). Without a build directory it only
counts (a dry run). What it keeps per queue is the layout's position, so memory does not
grow with the number of messages.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from formats.consumequeue import CQ_UNIT_DTYPE, CQ_UNIT_SIZE
from rmqtool.io import install as inst
from rmqtool.broker.dispatch import BatchDispatch, QueueLayout
from rmqtool.io.topicpath import describe, queue_dir, queue_selected, topic_path_problem
from rmqtool.wording import counted

#: units held in memory before they are written out (all queues together; what is left to
#: place and write after the last batch: see dispatch.FOLD_KEYS)
BUFFER_BYTES = 8 << 20


def queue_order(key: np.ndarray) -> np.ndarray:
    """``np.argsort(key, kind="stable")`` for keys ``topic << 32 | queue id`` (both >= 0). When the
    keys in hand span fewer than 65,536 values of (topic, queue id), each is first renumbered in the
    same order as a 16-bit code, which numpy sorts stably by radix in one pass over the keys (a few
    topics of a few queues: 5x faster than sorting the 64-bit keys); the order is the same."""
    if not len(key):
        return np.zeros(0, np.intp)
    topic, qid = key >> 32, key & 0xFFFFFFFF
    t0, q0 = int(topic.min()), int(qid.min())
    span = int(qid.max()) - q0 + 1
    if (int(topic.max()) - t0 + 1) * span <= 1 << 16:
        return np.argsort(((topic - t0) * span + (qid - q0)).astype(np.uint16), kind="stable")
    return np.argsort(key, kind="stable")


@dataclass
class _Queue:
    layout: QueueLayout
    problem: str | None                  # a topic name that cannot be a path: never written
    pending: list = field(default_factory=list)      # (queue offset, phy, size, tags) per batch
    pending_from: int = 0                # logical unit number of the next unit written
    units_seen: int = 0
    max_end: int = 0                     # largest commitlog end of its units
    files: set = field(default_factory=set)


def _open_for_write(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)


def _mkdirs(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)


class _Appended:
    """An existing queue appended to (``write``): every unit at the queue's write position as it
    comes, as ``ConsumeQueue.putMessagePositionInfo`` appends after the units already there; a
    first queue offset other than that position is reported. ``QueueLayout``'s interface."""

    def __init__(self, topic: str, queue_id: int, existing_units: int):
        self.topic, self.queue_id = topic, queue_id
        self.first_file = existing_units * CQ_UNIT_SIZE      # where the first new unit goes
        self.real_units = self.logical_units = 0
        self.warnings: list[str] = []

    def add(self, qoff: np.ndarray, phy: np.ndarray, size: np.ndarray, tags: np.ndarray) -> np.ndarray:
        n = len(qoff)
        if n and not self.logical_units and int(qoff[0]) * CQ_UNIT_SIZE != self.first_file:
            self.warnings.append(f"{self.topic}/{self.queue_id}: first new queue offset {int(qoff[0])} "
                                 f"appended at {self.first_file // CQ_UNIT_SIZE}")
        units = np.zeros(n, dtype=CQ_UNIT_DTYPE)
        units["commitlog_offset"], units["size"], units["tags_code"] = phy, size, tags
        self.real_units += n
        self.logical_units += n
        return units


class CqBuilder:
    """Dispatch results -> ConsumeQueue files in ``build`` (None: count only).

    ``write`` appends through it too: ``starts(topic, queue_id)`` gives an existing queue's unit
    count (its units then go after them, ``_Appended``; None: a new queue, placed by
    ``QueueLayout``); ``open_fd(path)``/``makedirs(dir)`` open and make what is written (the
    writer's give private copies of staged links and the store's ownership); ``on_write(path,
    position, length)`` hears every write; ``sync``: ``finish`` makes every file written durable."""

    def __init__(self, file_size: int, only: set | None = None, skipped=(), build: Path | None = None,
                 buffer_bytes: int | None = None, *, starts=None, open_fd=None, makedirs=None, on_write=None,
                 sync: bool = False):
        self.file_size, self.only, self.skipped, self.build = file_size, only, skipped, build
        self.buffer_bytes = buffer_bytes or BUFFER_BYTES
        self.starts, self.sync, self.on_write = starts, sync, on_write
        self.open_fd, self.makedirs = open_fd or _open_for_write, makedirs or _mkdirs
        self._queues: dict[tuple[str, int], _Queue] = {}
        self._topics: dict[str, int] = {}        # topic name -> number, over all batches
        self._topic_names: list[str] = []
        self._batches: list[tuple] = []          # units not yet grouped by queue, batch by batch
        self._pending_bytes = 0

    # --- feeding ----------------------------------------------------------------------------
    def add(self, d: BatchDispatch) -> None:
        """Take one batch's units; they are grouped by queue, placed and written when the buffer
        is full (many batches at once: the grouping's and placement's cost is per flush, not per
        batch or unit)."""
        if not len(d.cq_topic):
            return
        numbers = np.array([self._topic_number(t) for t in d.topics], dtype=np.int64)
        # copies: a batch's columns may live in memory its producer reuses once ``add`` returns
        cols = (numbers[d.cq_topic], *(np.array(c) for c in (d.cq_queue_id, d.cq_queue_offset, d.cq_phy_offset,
                                                             d.cq_size, d.cq_tags_code)))
        self._batches.append(cols)
        self._pending_bytes += sum(c.nbytes for c in cols)
        if self._pending_bytes >= self.buffer_bytes:
            self.flush()

    def _topic_number(self, topic: str) -> int:
        number = self._topics.get(topic)
        if number is None:
            number = self._topics[topic] = len(self._topic_names)
            self._topic_names.append(topic)
        return number

    def _group_batches(self) -> None:
        """The pending batches' units, queue by queue in dispatch order (``dispatch.queue_groups``'
        rule over many batches: a stable sort by topic and queue id)."""
        topic, qid, *units = (np.concatenate([b[i] for b in self._batches]) for i in range(6))
        self._batches = []
        key = topic << 32 | (qid.astype(np.int64) & 0xFFFFFFFF)
        order = queue_order(key)
        units = [c[order] for c in units]           # every queue's units together: a slice each
        bounds = [0, *(np.flatnonzero(np.diff(key[order])) + 1).tolist(), len(order)]
        for a, b in zip(bounds[:-1], bounds[1:]):
            first = int(order[a])
            qk = (self._topic_names[int(topic[first])], int(qid[first]))
            if not queue_selected(self.only, *qk):
                continue
            q = self._queues.get(qk)
            if q is None:
                existing = self.starts(*qk) if self.starts is not None else None
                layout = (QueueLayout(*qk, self.file_size, self.skipped) if existing is None
                          else _Appended(*qk, existing))
                q = self._queues[qk] = _Queue(layout, topic_path_problem(qk[0]))
            cols = tuple(c[a:b] for c in units)
            q.units_seen += b - a
            q.max_end = max(q.max_end, int((cols[1].astype(np.int64) + cols[2]).max()))
            if q.problem is None:           # topic names come from data: never a path outside the store
                q.pending.append(cols)

    def flush(self) -> None:
        """Place every queue's pending units and write them (a dry run only places them)."""
        if self._batches:
            self._group_batches()
        for qk, q in self._queues.items():
            if not q.pending:
                continue
            cols = [np.concatenate([p[i] for p in q.pending]) for i in range(4)]
            q.pending = []
            units = q.layout.add(*cols)
            if self.build is not None and len(units):
                self._write(qk, q, units.view(np.uint8).reshape(-1))
                q.pending_from += len(units)
        self._pending_bytes = 0

    def _write(self, qk, q: _Queue, raw: np.ndarray) -> None:
        """Write ``raw`` (unit bytes) at the queue's pending position, file by file."""
        qdir = queue_dir(self.build, *qk)
        if not q.files:
            self.makedirs(qdir)
        data = memoryview(raw)
        at = q.layout.first_file + q.pending_from * CQ_UNIT_SIZE
        while data:
            start = at - at % self.file_size
            take = min(len(data), start + self.file_size - at)
            path = qdir / f"{start:020d}"
            fd = self.open_fd(path)
            try:
                if start not in q.files:
                    if os.fstat(fd).st_size < self.file_size:
                        os.ftruncate(fd, self.file_size)     # a whole file, its tail sparse zeros
                    q.files.add(start)
                inst.pwrite_all(fd, data[:take], at - start, start_writeback=True)
            finally:
                os.close(fd)
            if self.on_write is not None:
                self.on_write(path, at - start, take)
            inst.crash_point("build")
            data, at = data[take:], at + take

    # --- what was built ---------------------------------------------------------------------
    def finish(self) -> None:
        self.flush()
        if self.sync and self.build is not None:
            for qk, q in sorted(self._queues.items()):
                for start in sorted(q.files):
                    inst.fsync_path(queue_dir(self.build, *qk) / f"{start:020d}")

    @property
    def files_touched(self) -> int:
        """Files this build wrote into (created or appended to)."""
        return sum(len(q.files) for q in self._queues.values())

    def queue_keys(self) -> list[tuple[str, int]]:
        """The queues written (in order), not those skipped for their topic name."""
        return sorted(k for k, q in self._queues.items() if q.problem is None)

    def bounds(self, commitlog_min: int) -> dict[tuple[str, int], tuple[int, int]]:
        """(min offset, max offset) of every queue built (placed by ``QueueLayout``), as the broker
        serves the built files over a CommitLog starting at ``commitlog_min`` (``QueueLayout.served_min``)."""
        return {k: (q.layout.served_min(commitlog_min), q.layout.max_offset) for k, q in self._queues.items()
                if q.problem is None and isinstance(q.layout, QueueLayout) and q.layout.min_offset is not None}

    @property
    def units(self) -> int:
        return sum(q.layout.real_units for q in self._queues.values())

    @property
    def max_end(self) -> int:
        """Largest commitlog end of any unit the rebuilt queues hold (0 when none)."""
        return max((q.max_end for q in self._queues.values() if q.problem is None), default=0)

    def warnings(self) -> list[str]:
        out = []
        for (topic, qid), q in sorted(self._queues.items()):
            if q.problem is not None:
                out.append(f"{q.problem}: queue {describe(topic)}/{qid} skipped ({counted(q.units_seen, 'unit')} not written)")
            else:
                out += q.layout.warnings
        return out

    def files_written(self) -> list[dict]:
        out = []
        for (topic, qid) in self.queue_keys():
            layout = self._queues[(topic, qid)].layout
            if layout.first_file is None:
                continue
            span = layout.logical_units * CQ_UNIT_SIZE
            out += [{"path": f"{topic}/{qid}/{start:020d}", "size": self.file_size}
                    for start in range(layout.first_file, layout.first_file + span, self.file_size)]
        return out


class BcqBuilder:
    """Dispatch results -> BatchConsumeQueue files in ``build`` (None: count only), placed as
    ``BatchConsumeQueue.putBatchMessagePositionInfo`` does (docs/format-lmq-batchcq.md): units
    appended one after the other from file 0, a unit at or below the last CommitLog offset
    written skipped as a repeat. Units are written as each batch arrives (a unit is 46 bytes;
    a batch holds few of them)."""

    def __init__(self, file_size: int, only: set | None = None, build: Path | None = None, *, starts=None,
                 open_fd=None, makedirs=None, on_write=None, sync: bool = False):
        from formats.consumequeue import BCQ_UNIT_SIZE
        if file_size <= 0 or file_size % BCQ_UNIT_SIZE:
            raise ValueError(f"BatchConsumeQueue file size {file_size} is not a multiple of {BCQ_UNIT_SIZE}")
        self.file_size, self.only, self.build = file_size, only, build
        # write appends through it as through CqBuilder: ``starts(topic, queue_id)`` -> (units there,
        # last CommitLog offset there, their file size) of an existing queue, else None
        self.starts, self.sync, self.on_write = starts, sync, on_write
        self.open_fd, self.makedirs = open_fd or _open_for_write, makedirs or _mkdirs
        self._queues: dict[tuple[str, int], dict] = {}
        self.repeats = 0

    def add(self, d: BatchDispatch) -> None:
        from formats.consumequeue import BCQ_UNIT_DTYPE
        from rmqtool.io.topicpath import queue_selected
        b = d.bcq
        if b is None or not len(b):
            return
        for k in range(len(b)):
            qk = (d.topics[int(b.topic[k])], int(b.queue_id[k]))
            if not queue_selected(self.only, *qk):
                continue
            q = self._queues.get(qk)
            if q is None:
                start = self.starts(*qk) if self.starts is not None else None
                units, max_phy, size = start if start is not None else (0, -1, self.file_size)
                q = self._queues[qk] = {"max_phy": max_phy, "units": units, "new": 0, "size": size,
                                        "files": set(), "problem": topic_path_problem(qk[0])}
            phy = int(b.phy_offset[k])
            if phy <= q["max_phy"]:
                self.repeats += 1
                continue
            unit = np.zeros(1, BCQ_UNIT_DTYPE)
            unit["commitlog_offset"], unit["size"], unit["tags_code"] = phy, b.size[k], b.tags_code[k]
            unit["store_timestamp"], unit["msg_base_offset"] = b.store_timestamp[k], b.base_offset[k]
            unit["batch_size"], unit["compacted_offset"] = b.batch_size[k], -1
            if self.build is not None and q["problem"] is None:
                self._write(qk, q, q["units"] * unit.itemsize, unit.tobytes())
            q["max_phy"] = phy
            q["units"] += 1
            q["new"] += 1

    def _write(self, qk, q: dict, at: int, data: bytes) -> None:
        qdir = queue_dir(self.build, *qk)
        if not q["files"]:
            self.makedirs(qdir)
        size = q["size"]
        start = at - at % size
        path = qdir / f"{start:020d}"
        fd = self.open_fd(path)
        try:
            if start not in q["files"]:
                if os.fstat(fd).st_size < size:
                    os.ftruncate(fd, size)           # a whole file, its tail sparse zeros
                q["files"].add(start)
            inst.pwrite_all(fd, memoryview(data), at - start, start_writeback=True)
        finally:
            os.close(fd)
        if self.on_write is not None:
            self.on_write(path, at - start, len(data))
        inst.crash_point("build")

    def finish(self) -> None:
        """Units are written as they arrive; ``sync``: make every file written durable."""
        if self.sync and self.build is not None:
            for qk, q in sorted(self._queues.items()):
                for start in sorted(q["files"]):
                    inst.fsync_path(queue_dir(self.build, *qk) / f"{start:020d}")

    @property
    def files_touched(self) -> int:
        return sum(len(q["files"]) for q in self._queues.values())

    def queue_keys(self) -> list[tuple[str, int]]:
        return sorted(k for k, q in self._queues.items() if q["problem"] is None)

    @property
    def units(self) -> int:
        """Units this build added (not those an appended queue held before)."""
        return sum(q["new"] for q in self._queues.values() if q["problem"] is None)

    def warnings(self) -> list[str]:
        out = [f"{q['problem']}: batch queue {describe(t)}/{qid} skipped ({counted(q['new'], 'unit')} not written)"
               for (t, qid), q in sorted(self._queues.items()) if q["problem"] is not None]
        if self.repeats:
            out.append(f"{counted(self.repeats, 'repeated BatchConsumeQueue unit')} skipped")
        return out

    def files_written(self) -> list[dict]:
        from formats.consumequeue import BCQ_UNIT_SIZE
        out = []
        for (topic, qid) in self.queue_keys():
            span = self._queues[(topic, qid)]["units"] * BCQ_UNIT_SIZE
            out += [{"path": f"{topic}/{qid}/{start:020d}", "size": self.file_size}
                    for start in range(0, max(span, 1), self.file_size)]
        return out


class ExtBuilder:
    """ConsumeQueueExt units appended as the 4.x broker's dispatch does (docs/format-cq-ext.md):
    ``ConsumeQueue.putMessagePositionInfoWrapper`` (S/ConsumeQueue.java:389-402@4.9.7) puts an ext
    unit before each CQ unit when ``enableConsumeQueueExt`` is on, and the CQ unit keeps the
    address ``ConsumeQueueExt.put`` returns in place of the tagsCode, or the tagsCode itself when
    ``put`` fails (:396-401). ``put`` here returns that address, or None for a failed put.

    Files are named by their first byte in the queue's ext space and created whole (sparse zeros),
    as ``MappedFileQueue`` does; ``open_fd(path)`` opens one for writing (it may make a private copy
    first), ``on_write(path, position, length)`` hears every write."""

    #: ConsumeQueueExt.put tries this many files before it gives up (S/ConsumeQueueExt.java:190, 206)
    RETRIES = 3

    def __init__(self, file_size: int, build: Path, open_fd=None, on_write=None, starts: dict | None = None):
        from formats.consumequeue_ext import EXT_END_BLANK_LENGTH, EXT_UNIT_MIN_SIZE
        if file_size <= EXT_END_BLANK_LENGTH + EXT_UNIT_MIN_SIZE:
            raise ValueError(f"ConsumeQueueExt file size {file_size} holds no unit")
        self.file_size, self.build = file_size, Path(build)
        self.open_fd = open_fd or (lambda p: os.open(p, os.O_RDWR | os.O_CREAT, 0o644))
        self.on_write = on_write or (lambda path, pos, length: None)
        self._next: dict[tuple[str, int], int] = dict(starts or {})   # queue -> write offset
        self._created: set = set()
        self._fds: dict = {}                              # path -> open descriptor
        self.units = 0
        self.failed = 0

    def queue_keys(self) -> list[tuple[str, int]]:
        return sorted(self._next)

    def put_many(self, topic: str, queue_id: int, tags_code: np.ndarray, store_timestamp: np.ndarray) -> np.ndarray:
        """``put`` of many units without bitmap, in order (20 bytes each: the file's runs are written
        at once); their addresses."""
        from formats.consumequeue_ext import (CqExtUnitHeader, EXT_END_BLANK_LENGTH, EXT_FILE_END_MARK,
                                              EXT_HEADER_DTYPE, EXT_MAX_REAL_OFFSET, EXT_UNIT_MIN_SIZE, ext_address)
        n, size = len(tags_code), EXT_UNIT_MIN_SIZE
        key = (topic, int(queue_id))
        at = self._next.get(key, 0)
        if at + n * size + self.file_size > EXT_MAX_REAL_OFFSET:       # near the end of the space: one by one
            addrs = [self.put(topic, queue_id, int(t), int(s)) for t, s in zip(tags_code, store_timestamp)]
            return np.array([int(t) if a is None else a for a, t in zip(addrs, tags_code)], dtype=np.int64)
        out = np.empty(n, np.int64)
        qdir = queue_dir(self.build, topic, queue_id)
        i = 0
        while i < n:
            base, pos = at - at % self.file_size, at % self.file_size
            fit = (self.file_size - pos - EXT_END_BLANK_LENGTH) // size      # units of 20 bytes that fit (:217-221)
            if fit <= 0:
                self._write(qdir, key, base, pos, CqExtUnitHeader.subcons[0].build(EXT_FILE_END_MARK))
                at = base + self.file_size
                continue
            k = min(fit, n - i)
            units = np.zeros(k, EXT_HEADER_DTYPE)
            units["size"], units["tags_code"] = size, tags_code[i:i + k]
            units["store_timestamp"] = store_timestamp[i:i + k]
            self._write(qdir, key, base, pos, units.tobytes())
            out[i:i + k] = ext_address(at + size * np.arange(k, dtype=np.int64))
            at += size * k
            i += k
        self._next[key] = at
        self.units += n
        return out

    def start(self, topic: str, queue_id: int, offset: int, old_dir: Path | None = None) -> None:
        """The queue's next unit goes at ``offset`` (not 0: its older ext files were deleted); the
        bytes of ``old_dir``'s file before it, up to ``offset``, are copied into the new file."""
        key = (topic, int(queue_id))
        self._next[key] = offset
        base, pos = offset - offset % self.file_size, offset % self.file_size
        if not pos or old_dir is None or not (Path(old_dir) / f"{base:020d}").is_file():
            return
        from rmqtool.io.fileio import ReadOnlyFile
        with ReadOnlyFile(Path(old_dir) / f"{base:020d}") as fh:
            at = 0
            while at < pos:
                data = fh.read(at, min(1 << 20, pos - at), exact=False)
                if not data:
                    break
                self._write(queue_dir(self.build, topic, queue_id), key, base, at, data)
                at += len(data)

    def put(self, topic: str, queue_id: int, tags_code: int, store_timestamp: int, bitmap: bytes = b"") -> int | None:
        from formats.consumequeue_ext import (CqExtUnitHeader, EXT_END_BLANK_LENGTH, EXT_FILE_END_MARK,
                                              EXT_MAX_REAL_OFFSET, EXT_UNIT_MAX_SIZE, EXT_UNIT_MIN_SIZE,
                                              ext_address)
        size = EXT_UNIT_MIN_SIZE + len(bitmap)          # CqExtUnit.calcUnitSize (:534-537)
        key = (topic, int(queue_id))
        at = self._next.get(key, 0)
        if size > EXT_UNIT_MAX_SIZE or at + size > EXT_MAX_REAL_OFFSET:    # :192-200
            self.failed += 1
            return None
        qdir = queue_dir(self.build, topic, queue_id)
        for _ in range(self.RETRIES):                    # :206-231
            base, pos = at - at % self.file_size, at % self.file_size
            if size > self.file_size - pos - EXT_END_BLANK_LENGTH:      # :217-226, fullFillToEnd :239-247
                self._write(qdir, key, base, pos, CqExtUnitHeader.subcons[0].build(EXT_FILE_END_MARK))
                at = base + self.file_size
                continue
            data = CqExtUnitHeader.build({"size": size, "tags_code": tags_code,
                                          "store_timestamp": store_timestamp, "bitmap_size": len(bitmap)}) + bitmap
            self._write(qdir, key, base, pos, data)      # CqExtUnit.write (:507-529)
            self._next[key] = at + size
            self.units += 1
            return ext_address(at)                       # decorate(wrotePosition + fileFromOffset) (:229)
        self._next[key] = at
        self.failed += 1
        return None

    #: files kept open between writes (a queue's units go to one file until it is full)
    OPEN_FILES = 64

    def _write(self, qdir: Path, key, base: int, pos: int, data: bytes) -> None:
        path = qdir / f"{base:020d}"
        fd = self._fds.get(path)
        if fd is None:
            if (key, base) not in self._created:
                from rmqtool.io import ownership
                ownership.makedirs(qdir)
            if len(self._fds) >= self.OPEN_FILES:
                self._close(next(iter(self._fds)))
            fd = self._fds[path] = self.open_fd(path)
            if (key, base) not in self._created:
                if os.fstat(fd).st_size < self.file_size:
                    os.ftruncate(fd, self.file_size)     # a mapped file: whole, its tail sparse zeros
                self._created.add((key, base))
        inst.pwrite_all(fd, memoryview(data), pos)
        self.on_write(path, pos, len(data))

    def _close(self, path, sync: bool = True) -> None:
        fd = self._fds.pop(path)
        try:
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def finish(self) -> None:
        """Make every file written durable (and close them)."""
        while self._fds:
            self._close(next(iter(self._fds)))

    def close(self) -> None:
        """Close the files without syncing them (the build is thrown away)."""
        while self._fds:
            self._close(next(iter(self._fds)), sync=False)
