"""`rebuild all` of a 4.x store with ConsumeQueueExt files (docs/format-cq-ext.md).

The ConsumeQueue build is made as for any store (tag hashes in the units); then each rebuilt queue's
units are read back in queue order and each one puts its ext unit as the broker's dispatch does
(``ConsumeQueue.putMessagePositionInfoWrapper``, S/ConsumeQueue.java:388-404@4.9.7, through
``broker/cqbuild.ExtBuilder``): the unit's tagsCode goes into the ext unit with the record's store
time, and the unit keeps the address. The ext files are built beside ``consumequeue_ext/`` and
installed after the ConsumeQueues.

Filter bitmaps come from consumer filters registered when each message was dispatched, which no
store file records: a store whose ext units hold one is refused (its ext files kept) unless the
caller drops them (``drop_filter_bitmaps``).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from formats import commitlog as cl
from formats.consumequeue import CQ_UNIT_SIZE, ConsumeQueueUnit
from formats.consumequeue_ext import ext_offset, is_ext_address
from formats.derive import struct_of
from rmqtool.broker.cqbuild import ExtBuilder
from rmqtool.errors import RefusedError
from rmqtool.io import install as inst
from rmqtool.io.consumequeue import is_pre_blank, logical_end, read_unit_file
from rmqtool.io.consumequeue_ext import EXT_DIR, ExtProblem, ExtQueue, ext_file_size, ext_queues, has_ext
from rmqtool.io.fileio import ReadOnlyFile
from rmqtool.io.topicpath import queue_dir
from rmqtool.wording import agree, counted

_CQ_UNIT = struct_of(ConsumeQueueUnit)
_SYS_FLAG_AT = cl.MESSAGE_HEAD_OFFSETS["sys_flag"]
#: past STORETIMESTAMP whatever the born host's size
_TS_END_MAX = cl.store_timestamp_position(cl.BORNHOST_V6_FLAG) + cl.STORE_TIMESTAMP_SIZE
#: the CommitLog bytes one read of ``_store_times`` spans at most
_WINDOW = 1 << 20


def bitmap_files(store) -> list[Path]:
    """The ext files holding a unit with a non-empty filter bitmap."""
    size = ext_file_size(store.root)
    out = []
    for _, _, d in ext_queues(store.root):
        q = ExtQueue(d, size)
        out += [Path(seg.path) for seg in q.segments.files if q.holds_bitmap(seg)]   # up to a bad unit
    return out


def check_cq_ext(store, whole: bool, drop_filter_bitmaps: bool) -> bool:
    """Whether the rebuild must regenerate ConsumeQueueExt files (the store keeps them); refuses what
    it cannot regenerate: a rebuild of some queues only (``whole`` False: their addresses would
    collide with the kept queues' ext files) and filter bitmaps (unless dropped)."""
    if not has_ext(store.root):
        return False
    if not whole:
        raise RefusedError("the store keeps ConsumeQueueExt files (enableConsumeQueueExt): its ConsumeQueue "
                           "units hold addresses into them; `rebuild all` rebuilds both together, this "
                           "rebuild would put tag hashes where the addresses are", store.root / EXT_DIR)
    files = bitmap_files(store)
    if files and not drop_filter_bitmaps:
        names = ", ".join(str(p) for p in files[:3]) + (f" (and {len(files) - 3} more)" if len(files) > 3 else "")
        raise RefusedError(f"{counted(len(files), 'ConsumeQueueExt file')} {agree(len(files), 'holds', 'hold')} consumer filter bitmaps, computed by the "
                           f"broker when each message was dispatched and recorded nowhere else: {names}; they are "
                           "kept. --drop-filter-bitmaps rebuilds them without (the broker then filters those "
                           "messages by evaluating each one)", files[0])
    return True


class ExtRebuild:
    """The ext files of the queues a ConsumeQueue build holds, built from it (``run``) and
    installed (``install``) like the ConsumeQueues."""

    def __init__(self, store, output: Path | None, dry_run: bool):
        self.store, self.output, self.dry_run = store, output, dry_run
        self.target = store.root / EXT_DIR
        self.file_size = ext_file_size(store.root)
        self.build = None
        self.units = 0
        self.warnings: list[str] = []
        self.recovered: list[str] = []          # what a crashed install left beside the ext files
        if dry_run:
            return
        self.build, self.recovered = inst.open_build(self.target, output)
        self.builder = ExtBuilder(self.file_size, self.build)
        self._ts_file = None

    def run(self, cq_build: Path | None, queues: list[tuple[str, int]]) -> None:
        """Put every unit of every rebuilt queue (``cq_build``), in queue order."""
        if self.build is None or cq_build is None:
            return
        try:
            for topic, qid in queues:
                qdir = queue_dir(cq_build, topic, qid)
                if qdir.is_dir():
                    self._queue(topic, qid, qdir)
            self.builder.finish()
        finally:
            self.builder.close()
            if self._ts_file is not None:
                self._ts_file[1].close()

    def _queue(self, topic: str, qid: int, qdir: Path) -> None:
        seeded = False
        for path in sorted(p for p in qdir.iterdir() if p.name.isdigit()):
            units, _ = read_unit_file(path)
            take = logical_end(units)
            if not take:
                break
            units = units[:take].copy()
            real = np.flatnonzero(~is_pre_blank(units))
            if not seeded and len(real):
                self._seed(topic, qid, int(path.name) // CQ_UNIT_SIZE + int(real[0]), units[int(real[0])])
                seeded = True
            times = self._store_times(units["commitlog_offset"][real])
            units["tags_code"][real] = self.builder.put_many(topic, qid, units["tags_code"][real].astype(np.int64), times)
            self.units += len(real)
            fd = os.open(path, os.O_WRONLY)
            try:
                inst.pwrite_all(fd, memoryview(units.tobytes()), 0)
            finally:
                os.close(fd)
            if take * CQ_UNIT_SIZE < os.path.getsize(path):
                break

    def _seed(self, topic: str, qid: int, qoff: int, unit) -> None:
        """Where the queue's first rebuilt unit goes in its ext space: where the store's own unit for
        that queue offset points, when that ext unit is this record's (older ext files may have been
        deleted with their messages; the bytes of its file before it are kept), else the queue's
        first ext file; 0 for a queue without ext files."""
        old = ExtQueue.of(self.store.root, topic, qid, self.file_size)
        if old is None or not old.segments.files:
            return
        start = None
        q = self.store.queue(topic, qid)
        hit = q.locate(qoff * CQ_UNIT_SIZE) if q.files else None
        if hit is not None:
            seg, pos = hit
            with ReadOnlyFile(seg.path) as fh:
                raw = fh.read(pos, CQ_UNIT_SIZE, exact=False)
            if len(raw) == CQ_UNIT_SIZE:
                phy, _, tags = _CQ_UNIT.unpack(raw)
                if phy == int(unit["commitlog_offset"]) and is_ext_address(tags):
                    try:
                        u = old.get(tags)
                    except ExtProblem:
                        u = None
                    # the unit it names must be this record's (a damaged address seeds nothing)
                    if (u is not None and u.tags_code == int(unit["tags_code"])
                            and u.store_timestamp == self._store_time(phy)):
                        start = ext_offset(tags)
        old.close()
        if start is None:
            start = old.segments.min_offset
            if start:
                self.warnings.append(f"{topic}/{qid}: the store's unit for queue offset {qoff} holds no readable ext "
                                     f"address; its ext units start at its first ext file ({start})")
        self.builder.start(topic, qid, start, old.dir)

    def _store_time(self, phy: int) -> int:
        """STORETIMESTAMP of the record at ``phy`` (what the dispatch request carries)."""
        return int(self._store_times(np.array([phy], np.int64))[0])

    def _store_times(self, phys: np.ndarray) -> np.ndarray:
        """STORETIMESTAMP of the records at ``phys``: one read per run of them within ``WINDOW``
        bytes of one CommitLog file (a queue's units come in CommitLog order), from each run's
        first sysFlag to its last record's store time."""
        from formats.derive import field_dtype
        from rmqtool.kernels.gather import gather_ints
        flag_dtype, ts_dtype = cl.MESSAGE_HEAD_DTYPE["sys_flag"], field_dtype(cl.StoreTimestamp)
        order = np.argsort(phys, kind="stable")
        srt = np.asarray(phys, np.int64)[order]
        out = np.empty(len(srt), np.int64)
        ts_plain, ts_v6 = (cl.store_timestamp_position(f) - _SYS_FLAG_AT for f in (0, cl.BORNHOST_V6_FLAG))
        i = 0
        while i < len(srt):
            phy = int(srt[i])
            hit = self.store.locate(phy)
            if hit is None:
                raise RefusedError(f"a rebuilt ConsumeQueue unit points at {phy}, which no CommitLog file holds",
                                   self.store.commitlog_dirs[0])
            seg, pos = hit
            fh = self._commitlog_file(seg)
            j = i + int(np.searchsorted(srt[i:], min(phy + _WINDOW, seg.start + fh.size()), side="left"))
            j = max(j, i + 1)
            rel = srt[i:j] - phy
            raw = np.frombuffer(fh.read(pos + _SYS_FLAG_AT, int(rel[-1]) + _TS_END_MAX - _SYS_FLAG_AT, exact=False),
                                np.uint8)
            flags = gather_ints(raw, rel, flag_dtype)
            at = rel + np.where(flags & cl.BORNHOST_V6_FLAG, ts_v6, ts_plain)
            cut = (rel + flag_dtype.itemsize > len(raw)) | (at + ts_dtype.itemsize > len(raw))
            if cut.any():
                k = int(np.argmax(cut))
                raise RefusedError(f"the record a rebuilt ConsumeQueue unit points at ({int(srt[i + k])}) is cut "
                                   "by its file's end", seg.path, pos + int(rel[k]))
            out[i:j] = gather_ints(raw, at, ts_dtype)
            i = j
        back = np.empty(len(out), np.int64)
        back[order] = out
        return back

    def _commitlog_file(self, seg) -> ReadOnlyFile:
        """The open CommitLog file (one at a time: a queue's records are read file by file)."""
        if self._ts_file is None or self._ts_file[0] != seg.path:
            if self._ts_file is not None:
                self._ts_file[1].close()
            self._ts_file = (seg.path, ReadOnlyFile(seg.path))
        return self._ts_file[1]

    def discard(self) -> None:
        if self.build is not None:
            inst.discard_build(self.build, keep_dir=self.output is not None)
            self.build = None

    def install(self, queues_rebuilt: set) -> dict:
        """Carry the ext queues not rebuilt, then install (or, with an output, make durable)."""
        summary = {"cq_ext_file_size": self.file_size, "cq_ext_units": self.units}
        if self.build is None:
            return summary
        if self.target.is_dir():
            c = inst.carried_files(self.target, None, rebuilt=queues_rebuilt)
            for rel in c.files:
                inst.link_or_copy(self.target / rel, self.build / rel)
            for rel in c.links:
                inst.copy_link(self.target / rel, self.build / rel)
        if self.output is not None:
            inst.fsync_tree(self.build)
        else:
            summary["cq_ext_backup"] = inst.install(self.target, self.build).backup
        self.build = None
        return summary
