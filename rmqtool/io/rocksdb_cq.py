"""Read a RocksDB ConsumeQueue (``formats.rocksdb_cq``; docs/format-rocksdb-cq.md), never writing
to the store: the database is opened read-only from a private snapshot directory whose files are
hard links to (or, across file systems, copies of) the store's, because opening a database writes
beside it (RocksDB's info log, the binding's own config file). Needs the ``rocksdb`` extra
(``rocksdict``, a maintained RocksDB binding with wheels for Linux, macOS and Windows).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from formats import rocksdb_cq as rf
from rmqtool.io import storage
from rmqtool.io.fileio import regular_file_present
from rmqtool.errors import CorruptDataError, MissingDependencyError


def is_rocksdb_dir(path: Path) -> bool:
    """A RocksDB database directory (its ``CURRENT`` and a ``MANIFEST-*``)."""
    p = storage.path(path)
    return (p / "CURRENT").is_file() and any(n.startswith("MANIFEST-") for n in storage.listdir(p))


@dataclass
class RocksUnits:
    """The units of every queue, as columns per (topic, queue id), in queue-offset order."""
    queues: dict          # (topic, queue id) -> list of (queue offset, commitlog offset, size, tags, store time)
    offsets: dict         # (topic, queue id) -> {"max"/"min": (commitlog offset, queue offset)}
    checkpoint_phy: int | None
    problems: list        # (key hex, what): entries that are not what the layout says


def _snapshot(db: Path) -> Path:
    tmp = Path(tempfile.mkdtemp(prefix="rmqtool-rocksdb-"))
    for name in storage.listdir(db):
        src = db / name
        if name == "LOCK" or name == "LOG" or name.startswith("LOG.old"):
            continue
        if storage.is_remote(src):           # a remote database: copied down (read-only either way)
            if src.is_file():
                (tmp / name).write_bytes(src.read_bytes())
            continue
        if os.path.isdir(src) or not regular_file_present(src):   # a FIFO or device: refused (exit 3),
            continue                                                 # never skipped as if absent
        try:
            os.link(src, tmp / name)
        except OSError:
            shutil.copy2(src, tmp / name)
    return tmp


def read_rocksdb_units(db: Path) -> RocksUnits:
    try:
        from rocksdict import AccessType, Options, Rdict
    except ImportError:
        raise MissingDependencyError("reading a RocksDB ConsumeQueue needs rocksdict: pip install 'rmqtool[rocksdb]'",
                                     db) from None
    snap = _snapshot(storage.path(db))
    try:
        try:
            families = Rdict.list_cf(str(snap))
            opts = {cf: Options(raw_mode=True) for cf in families if cf != rf.DEFAULT_CF}
            handle = Rdict(str(snap), options=Options(raw_mode=True), access_type=AccessType.read_only(),
                           column_families=opts)
        except Exception as exc:          # the binding raises plain Exception for RocksDB's errors
            raise CorruptDataError(f"cannot open the RocksDB ConsumeQueue: {exc}", db, None) from None
        try:
            return _collect(handle, families)
        finally:
            handle.close()
    finally:
        shutil.rmtree(snap, ignore_errors=True)


def _collect(handle, families) -> RocksUnits:
    queues: dict = {}
    offsets: dict = {}
    problems = []
    checkpoint = None
    for key, value in handle.items():
        unit = decode_unit(key, value)
        if isinstance(unit, str):
            problems.append((bytes(key).hex(), unit))
            continue
        topic, qid, qoff, vals = unit
        queues.setdefault((topic, qid), []).append((qoff, *vals))
    if rf.OFFSET_CF in families:
        for key, value in handle.get_column_family(rf.OFFSET_CF).items():
            off = decode_offset(key, value)
            if isinstance(off, str):
                problems.append((bytes(key).hex(), off))
                continue
            topic, which, qid, phy, qoff = off
            if topic == rf.CHECKPOINT_TOPIC:
                checkpoint = phy
                continue
            offsets.setdefault((topic, qid), {})[which] = (phy, qoff)
    for units in queues.values():
        units.sort()
    return RocksUnits(queues, offsets, checkpoint, problems)


def decode_unit(key: bytes, value: bytes):
    """(topic, queue id, queue offset, (commitlog offset, size, tags, store time)) of a ``default``
    entry, or a string saying why it is not one."""
    key, value = bytes(key), bytes(value)
    if len(key) < rf.UNIT_KEY_FIXED:
        return f"key of {len(key)} bytes, shorter than a unit key"
    n = int.from_bytes(key[:4], "big", signed=True)
    if n < 0 or len(key) != rf.UNIT_KEY_FIXED + n:
        return f"key of {len(key)} bytes with a topic length of {n}"
    try:
        k = rf.UnitKey.parse(key)
    except Exception:
        return "key separators are not where the layout puts them"
    if len(value) != rf.UNIT_VALUE_SIZE:
        return f"value of {len(value)} bytes, a unit is {rf.UNIT_VALUE_SIZE}"
    return k.topic.decode("utf-8", "replace"), k.queue_id, k.queue_offset, rf.UNIT_VALUE_STRUCT.unpack(value)


def decode_offset(key: bytes, value: bytes):
    """(topic, "max"/"min", queue id, commitlog offset, queue offset) of an ``offset`` entry (the
    checkpoint entry's value holds only the commitlog offset), or a string saying why not."""
    key, value = bytes(key), bytes(value)
    if len(key) < rf.OFFSET_KEY_FIXED:
        return f"offset key of {len(key)} bytes"
    n = int.from_bytes(key[:4], "big", signed=True)
    if n < 0 or len(key) != rf.OFFSET_KEY_FIXED + n:
        return f"offset key of {len(key)} bytes with a topic length of {n}"
    try:
        k = rf.OffsetKey.parse(key)
    except Exception:
        return "offset key separators are not where the layout puts them"
    topic = k.topic.decode("utf-8", "replace")
    if topic == rf.CHECKPOINT_TOPIC and len(value) >= 8:
        return topic, k.which.decode("ascii", "replace"), k.queue_id, int.from_bytes(value[:8], "big", signed=True), None
    if len(value) != rf.OFFSET_VALUE_STRUCT.size:
        return f"offset value of {len(value)} bytes"
    return (topic, k.which.decode("ascii", "replace"), k.queue_id, *rf.OFFSET_VALUE_STRUCT.unpack(value))


def materialize(units: RocksUnits, file_size: int) -> Path:
    """A private, read-only view of the units as ConsumeQueue files (``<topic>/<queueId>/`` files
    of ``file_size`` bytes, each unit at its queue offset), so that every reader of ConsumeQueue
    files reads a RocksDB queue by the same code. A missing queue offset is a zero unit there (a
    hole, which the ConsumeQueue checks report). Removed when the process ends."""
    import atexit
    from formats.consumequeue import CQ_UNIT_SIZE
    from rmqtool.io.topicpath import queue_dir, topic_path_problem
    view = Path(tempfile.mkdtemp(prefix="rmqtool-rocksdb-cq-"))
    atexit.register(shutil.rmtree, view, True)
    for (topic, qid), rows in units.queues.items():
        if topic_path_problem(topic) is not None or not rows:
            continue
        qdir = queue_dir(view, topic, qid)
        qdir.mkdir(parents=True)
        from rmqtool.io.install import pwrite_all
        handles: dict[int, int] = {}
        try:
            for qoff, phy, size, tags, _ in rows:
                if qoff < 0:
                    continue
                at = qoff * CQ_UNIT_SIZE
                start = at - at % file_size
                fd = handles.get(start)
                if fd is None:
                    fd = handles[start] = os.open(qdir / f"{start:020d}", os.O_RDWR | os.O_CREAT, 0o444)
                    os.ftruncate(fd, file_size)
                pwrite_all(fd, phy.to_bytes(8, "big", signed=True) + size.to_bytes(4, "big", signed=True)
                           + tags.to_bytes(8, "big", signed=True), at - start)
        finally:
            for fd in handles.values():
                os.close(fd)
    return view
