"""Rows for `rmqtool dump`: every file kind, from a store or a single file."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from formats.consumequeue import BCQ_UNIT_SIZE, CQ_UNIT_SIZE
from formats.indexfile import FIRST_INDEX, INDEX_HEADER_SIZE
from rmqtool.io.checkpoint import read_checkpoint, require_checkpoint
from rmqtool.output.schema import record_to_dict
from rmqtool.io.consumequeue import read_units
from rmqtool.errors import CorruptDataError, StoreLayoutError, UsageError
from rmqtool.io.fileio import file_size, regular_file_present
from rmqtool.io.indexfile import IndexFileReader, resolve_geometry
from rmqtool.records.scan import END_BLANK, FileEnd, RecordBatch, walk_store
from rmqtool.io.segments import SEGMENT_NAME, Segment, SegmentQueue
from rmqtool.io import storage


@dataclass
class RecordFilter:
    """Filters shared by dump, export and queries."""
    topic: str | None = None
    queue: int | None = None
    from_offset: int | None = None
    to_offset: int | None = None      # exclusive
    begin: int | None = None          # store timestamp, ms, inclusive
    end: int | None = None            # inclusive

    def batch_mask(self, batch: RecordBatch) -> np.ndarray:
        """Vectorized part of the filter (everything but the topic)."""
        mask = np.ones(len(batch), dtype=bool)
        if self.queue is not None:
            mask &= batch.queue_id == self.queue
        if self.from_offset is not None:
            mask &= batch.phy_offset >= self.from_offset
        if self.to_offset is not None:
            mask &= batch.phy_offset < self.to_offset
        if self.begin is not None:
            mask &= batch.store_timestamp >= self.begin
        if self.end is not None:
            mask &= batch.store_timestamp <= self.end
        if self.topic is not None and mask.any():
            want = self.topic.encode("utf-8")
            lens = batch.topic_len == len(want)
            for i in np.flatnonzero(mask & lens):
                s = int(batch.topic_start[i])
                mask[i] = batch.buf[s:s + len(want)].tobytes() == want
            mask &= lens
        return mask

    def wants_offset(self, offset: int) -> bool:
        return ((self.from_offset is None or offset >= self.from_offset)
                and (self.to_offset is None or offset < self.to_offset))

    def wants_end(self, offset: int) -> bool:
        """A BLANK or end-of-data row at ``offset``: it has no topic, queue or store time, so any
        of those filters leaves it out, like a record that does not match. (Where a walk stopped on
        damage is shown whatever those filters say: ``commitlog_rows``.)"""
        return (self.wants_offset(offset) and self.topic is None and self.queue is None
                and self.begin is None and self.end is None)


def commitlog_target(path: str, store_factory, base_offset: int | None = None) -> tuple[object, list[Segment] | None]:
    """A store, a commitlog directory, or one commitlog file -> (store-like, files).

    A file's name is its start offset (20 digits); a renamed file needs ``base_offset``, or
    every offset it reports (and the PHYSICALOFFSET check) would be wrong."""
    p = storage.path(path)
    if p.is_file():
        if base_offset is not None:
            if base_offset < 0:
                raise UsageError(f"--base-offset {base_offset}: expected an offset >= 0")
            base = base_offset
        elif SEGMENT_NAME.match(p.name):
            base = int(p.name)
        else:
            raise UsageError("a CommitLog file is named by its 20-digit start offset; this one is not: "
                             "pass --base-offset N (its start offset) to read it", p)
        seg = Segment(p, base, file_size(p))
        queue = SegmentQueue("commitlog", [seg], seg.size)
        return _SingleFileStore(queue), [seg]
    return store_factory(path), None


class _SingleFileStore:
    def __init__(self, queue: SegmentQueue):
        self.commitlog = queue


def end_row(end: FileEnd) -> dict | None:
    """A row for what follows the last record of a file (BLANK, zero tail, torn, corrupt)."""
    if end.kind == "eof" or end.kind == "range":
        return None
    row = {"file": end.path, "position": end.position, "phy_offset": end.phy_offset,
           "kind": "BLANK" if end.kind == END_BLANK else "END", "end": end.kind,
           "size": end.blank_size if end.kind == END_BLANK else end.file_size - end.position,
           "detail": end.detail or None, "check": end.check or None}
    if end.magic is not None:
        row["magic"] = f"0x{end.magic & 0xFFFFFFFF:08X}"
    return row


def commitlog_rows(store, flt: RecordFilter, body: str = "none", files=None,
                   show_ends: bool = True) -> Iterator[dict]:
    """Every MESSAGE (filtered), plus BLANK and end-of-data rows, in commitlog order."""
    seg_list = files if files is not None else store.commitlog.files
    size = store.commitlog.file_size
    if flt.from_offset is not None or flt.to_offset is not None:
        seg_list = [s for s in seg_list
                    if (flt.to_offset is None or s.start < flt.to_offset)
                    and (flt.from_offset is None or s.start + size > flt.from_offset)]
    for item in walk_store(store, files=seg_list):
        if isinstance(item, RecordBatch):
            for i in np.flatnonzero(flt.batch_mask(item)):
                yield record_to_dict(item, int(i), body=body)
        elif show_ends:
            row = end_row(item)
            if row and (flt.wants_end(row["phy_offset"])
                        or (not item.clean and flt.wants_offset(row["phy_offset"]))):
                yield row


# --- consume queue -------------------------------------------------------------------------
_CQ_PATH = re.compile(r"(?:^|/)(?P<topic>[^/]+)/(?P<queue>-?\d+)/\d{20}$")


def consumequeue_rows(store, topic: str | None, queue: int | None,
                      problems: list | None = None) -> Iterator[dict]:
    """Rows of every selected queue; wrong-size files are appended to ``problems`` (when given)."""
    refs = [r for r in store.queues()
            if (topic is None or r.topic == topic) and (queue is None or r.queue_id == queue)]
    ext_size = _ext_file_size(store.root) if refs else None        # once, not per queue
    # a RocksDB ConsumeQueue's units are read through a private view of them as files: a row names
    # the database they come from, with no byte position (a unit is a key there, not a place in a file)
    rocksdb = str(store.root / "consumequeue") if refs and store.rocksdb_cq else None
    for ref in refs:
        q = store.queue(ref.topic, ref.queue_id)
        _size_problems(q, problems)
        rows = _queue_rows(ref.topic, ref.queue_id, q, _ext_queue(store.root, ref.topic, ref.queue_id, ext_size))
        if rocksdb is None:
            yield from rows
            continue
        for row in rows:
            row.update(file=rocksdb, position=None)
            yield row
    for ref in store.queues(batch=True):
        if (topic is None or ref.topic == topic) and (queue is None or ref.queue_id == queue):
            yield from batch_queue_rows(store, ref)


def batch_queue_rows(store, ref) -> Iterator[dict]:
    """A BatchConsumeQueue's 46-byte units (``kind`` BATCH_UNIT; docs/format-lmq-batchcq.md)."""
    from rmqtool.io.consumequeue import read_batch_queue
    for path, start, units in read_batch_queue(store, ref):
        for k, u in enumerate(units):
            yield {"file": path, "position": k * BCQ_UNIT_SIZE, "kind": "BATCH_UNIT", "topic": ref.topic,
                   "queue_id": ref.queue_id, "queue_offset": int(u["msg_base_offset"]),
                   "commitlog_offset": int(u["commitlog_offset"]), "size": int(u["size"]),
                   "tags_code": int(u["tags_code"]), "store_timestamp": int(u["store_timestamp"]),
                   "batch_size": int(u["batch_size"]), "compacted_offset": int(u["compacted_offset"])}


def _size_problems(queue: SegmentQueue, problems: list | None) -> None:
    """Files of the wrong size or holding a partial unit, as ``(path, size, message)``."""
    if problems is None:
        return
    for p in queue.problems:
        if p.check == "file-size":
            problems.append((p.path, file_size(storage.path(p.path)), p.message))
    for seg in queue.files:
        if seg.size % CQ_UNIT_SIZE:
            problems.append((str(seg.path), seg.size, f"size {seg.size} is not a whole number of "
                                                      f"{CQ_UNIT_SIZE}-byte units"))


def consumequeue_file_rows(path: Path, cq_file_size: int | None, problems: list | None = None) -> Iterator[dict]:
    m = _CQ_PATH.search(str(path).replace("\\", "/"))
    topic, queue = (m.group("topic"), int(m.group("queue"))) if m else (None, None)
    if not SEGMENT_NAME.match(path.name):
        raise StoreLayoutError("a ConsumeQueue file name must be 20 digits (its byte offset)", path)
    size = file_size(path)
    seg = Segment(path, int(path.name), size)
    q = SegmentQueue("consumequeue", [seg], cq_file_size or size)
    if cq_file_size and size != cq_file_size and problems is not None:
        problems.append((str(path), size, f"size {size} differs from --cq-file-size {cq_file_size}"))
    _size_problems(q, problems)
    root = path.parent.parent.parent.parent        # <root>/consumequeue/<topic>/<queueId>/<file>
    ext = (_ext_queue(root, topic, queue, _ext_file_size(root))
           if m and path.parent.parent.parent.name == "consumequeue" else None)
    yield from _queue_rows(topic, queue, q, ext)


def _ext_file_size(root) -> int | None:
    from rmqtool.io.consumequeue_ext import ext_file_size
    return ext_file_size(root)


def _ext_queue(root, topic, queue_id, size: int | None):
    """The queue's ConsumeQueueExt files (``size``: the store's ext file size, None when it keeps
    none: docs/format-cq-ext.md)."""
    from rmqtool.io.consumequeue_ext import ExtQueue, ext_queue_dir
    return None if size is None else ExtQueue(ext_queue_dir(root, topic, queue_id), size)


def ext_fields(ext, tags_code: int) -> dict:
    """A CQ unit's tagsCode resolved: an ext address -> its ext unit's tagsCode, store time and
    filter bitmap, and where the unit is (or why it cannot be read)."""
    from formats.consumequeue_ext import is_ext_address
    from rmqtool.io.consumequeue_ext import ExtProblem
    if not is_ext_address(tags_code):
        return {"ext_address": None}
    out = {"ext_address": tags_code, "tags_code": None, "store_timestamp": None, "filter_bitmap": None,
           "ext_file": None, "ext_position": None}
    if ext is None:
        out["ext_problem"] = "the store has no consumequeue_ext/ for this queue"
        return out
    try:
        u = ext.get(tags_code)
    except ExtProblem as exc:
        out.update(ext_file=exc.path, ext_position=exc.position, ext_problem=exc.message)
        return out
    out.update(tags_code=u.tags_code, store_timestamp=u.store_timestamp, filter_bitmap=u.bitmap.hex(),
               ext_file=u.path, ext_position=u.position)
    return out


def consumequeue_ext_rows(store, topic: str | None, queue: int | None,
                          problems: list | None = None) -> Iterator[dict]:
    """Every ConsumeQueueExt unit, file by file up to each file's data end, then an END row per
    file (where the data ends: a size <= 0, the -1 mark when the next unit did not fit). A unit
    that cannot be read raises, or with ``problems`` (a list) is appended to it and the walk goes
    on with the next file (no END row for the damaged one)."""
    from formats.consumequeue_ext import ext_address
    from rmqtool.io.consumequeue_ext import ExtProblem, ExtQueue, ext_file_size, ext_queues
    size = ext_file_size(store.root)
    for t, qid, d in ext_queues(store.root):
        if (topic is not None and t != topic) or (queue is not None and qid != queue):
            continue
        ext = ExtQueue(d, size)
        for seg in ext.segments.files:
            end = 0
            try:
                for u in ext.file_units(seg):
                    yield {"topic": t, "queue_id": qid, "kind": "EXT_UNIT", "ext_address": ext_address(u.offset),
                           **u.as_dict()}
                    end = u.position + u.size
            except ExtProblem as exc:
                error = CorruptDataError(f"ConsumeQueueExt unit: {exc.message}; the units before it were printed",
                                         exc.path, exc.position)
                if problems is None:
                    raise error from None
                problems.append(error)
                continue
            yield {"topic": t, "queue_id": qid, "kind": "END", "file": str(seg.path), "position": end,
                   "ext_offset": seg.start + end}


def _queue_rows(topic, queue_id, queue: SegmentQueue, ext=None) -> Iterator[dict]:
    data = read_units(topic, queue_id, queue)
    blank = data.pre_blank
    files = [str(s.path) for s in queue.files]
    for i in range(len(data)):
        u = data.units[i]
        yield {"file": files[int(data.file_index[i])], "position": int(data.position[i]),
               "kind": "PRE_BLANK" if blank[i] else "UNIT", "topic": topic, "queue_id": queue_id,
               "queue_offset": int(data.queue_offset[i]), "commitlog_offset": int(u["commitlog_offset"]),
               "size": int(u["size"]), "tags_code": int(u["tags_code"]),
               **(ext_fields(ext, int(u["tags_code"])) if ext is not None else {})}
    if files:
        end = data.end_queue_offset * CQ_UNIT_SIZE
        seg = next((f for f in queue.files if f.start <= end < f.start + max(f.size, 1)), queue.files[-1])
        yield {"file": str(seg.path), "position": end - seg.start,
               "kind": "END", "topic": topic, "queue_id": queue_id, "queue_offset": data.end_queue_offset,
               "stale_units_after_end": data.stale_units_after_end}


# --- index ------------------------------------------------------------------------------------
def index_rows(files: list[Path], geometry, header_only: bool = False,
               flt: RecordFilter | None = None, problems: list | None = None) -> Iterator[dict]:
    """Every file's header and entries. A damaged file (shorter than its header, or not the
    geometry's size) raises, or with ``problems`` (a list) is appended to it as an error naming the
    file and offset, and the walk goes on with the next file (its rows up to the damage given)."""
    def damaged(exc):
        if problems is None:
            raise exc
        problems.append(exc)

    for path in files:
        with IndexFileReader(path, geometry) as reader:
            if reader.size < INDEX_HEADER_SIZE:
                damaged(StoreLayoutError(f"index file is {reader.size} bytes, shorter than its header",
                                         path, reader.size))
                continue
            header = reader.header()
            row = {"file": str(path), "position": 0, "kind": "HEADER", **header.as_dict(),
                   "hash_slots": geometry.hash_slots, "index_entries": geometry.index_entries}
            # upstream's IndexHeader.load turns indexCount <= 0 (a brand-new file) into 1
            row["index_count"] = max(header.index_count, FIRST_INDEX)
            row["index_count_on_disk"] = header.index_count
            yield row
            if header_only:
                continue
            count = max(min(header.index_count, geometry.index_entries), FIRST_INDEX)
            entries = reader.entries(count)
            for n in range(FIRST_INDEX, len(entries)):
                e = entries[n]
                phy = int(e["phy_offset"])
                if flt is not None and not flt.wants_offset(phy):
                    continue
                diff = int(e["time_diff"])
                yield {"file": str(path), "position": reader.entry_offset(n), "kind": "ENTRY",
                       "entry": n, "key_hash": int(e["key_hash"]), "slot": int(e["key_hash"]) % geometry.hash_slots,
                       "phy_offset": phy, "time_diff": diff, "prev_index": int(e["prev_index"]),
                       "time": header.begin_timestamp + diff * 1000}
            if reader.size != geometry.file_size:       # rows above are what the file holds; then fail
                damaged(CorruptDataError(f"index file is {reader.size} bytes, its geometry needs "
                                         f"{geometry.file_size} (truncated or wrong size)", path, reader.size))


def index_target(path: str, store_factory, slots, entries):
    p = storage.path(path)
    if p.is_file():
        return [p], resolve_geometry([(p, file_size(p))], slots, entries)
    store = store_factory(path)
    files = store.index_files()
    if not files:
        raise StoreLayoutError("no index files (index/<yyyyMMddHHmmssSSS>)", store.index_dir)
    return files, store.index_geometry


def checkpoint_rows(path: str, store_factory) -> Iterator[dict]:
    p = storage.path(path)
    if p.is_dir():
        cp_path = store_factory(path).checkpoint_path
        if not regular_file_present(cp_path):
            raise StoreLayoutError("no checkpoint file", cp_path)
    else:
        cp_path = p
    values = require_checkpoint(read_checkpoint(cp_path), cp_path)
    yield {"file": str(cp_path), "position": 0, "kind": "CHECKPOINT", **values.as_dict()}


def check_range(flt: RecordFilter) -> None:
    if flt.from_offset is not None and flt.to_offset is not None and flt.from_offset > flt.to_offset:
        raise UsageError(f"--from-offset {flt.from_offset} is after --to-offset {flt.to_offset}")
