"""The store model: every file of a broker store directory, its geometry and liveness."""
from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from formats import fastjson
from formats.consumequeue import BCQ_UNIT_SIZE, CQ_UNIT_SIZE
from rmqtool.io.checkpoint import CheckpointValues, read_checkpoint
from rmqtool.io.dledger_layout import DATA_DIR as DLEDGER_DATA_DIR, is_entry_file, members as dledger_members
from rmqtool.errors import FileChangedError, RmqError, StoreLayoutError, UsageError
from rmqtool.io.fileio import read_file, regular_file_present
from rmqtool.io.indexfile import IndexGeometry, resolve_geometry
from rmqtool.io.liveness import LockOwner, lock_owner
from rmqtool.io.segments import SEGMENT_NAME, Segment, SegmentQueue, entry_size
from rmqtool.io import storage
from rmqtool.io.topicpath import queue_dir, queue_dirs
from rmqtool.wording import counted

INDEX_NAME = re.compile(r"^\d{17}$")
#: the most of one ``config/*.json`` file rmqtool reads (topics, subscriptions, consumer offsets:
#: a few MB on a large broker); a larger file is unreadable, never loaded
MAX_CONFIG_SIZE = 64 << 20
#: how ``Store.config_file`` starts what it says of a config file it could not load
UNREADABLE = "unreadable: "
MULTI_PATH_SEPARATOR = ","


@dataclass(frozen=True)
class QueueRef:
    topic: str
    queue_id: int
    path: Path


class Store:
    """A broker store root (or a bare commitlog directory), read-only.

    ``commitlog_dirs`` overrides where segments live (comma-separated multi-path, as
    ``storePathCommitLog``); index geometry defaults to upstream's and is checked
    against the files, or inferred from their content.
    """

    def __init__(self, path: str | Path, commitlog_dirs: str | None = None,
                 index_slots: int | None = None, index_entries: int | None = None,
                 commitlog_file_size: int | None = None, cq_file_size: int | None = None):
        self.root = storage.path(path)
        self.remote = storage.is_remote(self.root)
        self._reopen_args = (path, commitlog_dirs, index_slots, index_entries, commitlog_file_size, cq_file_size)
        if not self.root.exists():
            raise StoreLayoutError("no such file or directory", self.root)
        if not self.root.is_dir():
            raise StoreLayoutError("not a directory (use the store root, or a single file with dump)",
                                   self.root)
        if commitlog_dirs:
            self.commitlog_dirs = [storage.path(p) for p in commitlog_dirs.split(MULTI_PATH_SEPARATOR) if p]
        elif (self.root / "commitlog").is_dir():
            self.commitlog_dirs = [self.root / "commitlog"]
        elif dledger_members(self.root):
            self.commitlog_dirs = [self._dledger_data()]
        elif any(SEGMENT_NAME.match(n) for n in storage.listdir(self.root)):
            self.commitlog_dirs = [self.root]          # a bare commitlog directory
        else:
            self.commitlog_dirs = [self.root / "commitlog"]
        self._index_slots, self._index_entries = index_slots, index_entries
        self._commitlog_file_size = commitlog_file_size
        self._cq_file_size = cq_file_size
        if not self.looks_like_store():
            if self.root.name in ("consumequeue", "index"):
                self.require_root()
            raise StoreLayoutError(
                "not a RocketMQ store: no commitlog/, consumequeue/, index/ or checkpoint", self.root)

    def _dledger_data(self) -> Path:
        """The data directory of the store's one DLedger member (the commit log in DLedger mode)."""
        found = dledger_members(self.root)
        if len(found) > 1:
            names = ", ".join(m.name for m in found)
            raise UsageError(f"several DLedger members ({names}): pass --commitlog-dirs "
                             f"{found[0] / DLEDGER_DATA_DIR} to pick one", self.root)
        return found[0] / DLEDGER_DATA_DIR

    @property
    def dledger(self) -> bool:
        """The commit log is a DLedger member's entries (records start 48 bytes into each)."""
        return any(is_entry_file(d / "x") for d in self.commitlog_dirs)

    # --- paths -------------------------------------------------------------------------
    @property
    def consumequeue_dir(self) -> Path:
        """Where the ConsumeQueue files are: ``consumequeue/``, or for a RocksDB ConsumeQueue the
        read-only view of its units as files (``rocksdb_cq``)."""
        if self.rocksdb_cq:
            return self.rocksdb_view()
        return self.root / "consumequeue"

    @cached_property
    def rocksdb_cq(self) -> bool:
        """``consumequeue/`` is a RocksDB database (5.x ``storeType=defaultRocksDB``), read-only to rmqtool."""
        from rmqtool.io.rocksdb_cq import is_rocksdb_dir
        return is_rocksdb_dir(self.root / "consumequeue")

    @cached_property
    def rocksdb_units(self):
        """The RocksDB ConsumeQueue's units and offset table (``io.rocksdb_cq.RocksUnits``)."""
        from rmqtool.io.rocksdb_cq import read_rocksdb_units
        return read_rocksdb_units(self.root / "consumequeue")

    def rocksdb_view(self) -> Path:
        if not hasattr(self, "_rocksdb_view"):
            from formats.consumequeue import DEFAULT_CQ_FILE_SIZE
            from rmqtool.io.rocksdb_cq import materialize
            self._rocksdb_view = materialize(self.rocksdb_units, self._cq_file_size or DEFAULT_CQ_FILE_SIZE)
        return self._rocksdb_view

    @property
    def batchconsumequeue_dir(self) -> Path:
        return self.root / "batchconsumequeue"

    @property
    def index_dir(self) -> Path:
        return self.root / "index"

    @property
    def checkpoint_path(self) -> Path:
        return self.root / "checkpoint"

    @property
    def abort_path(self) -> Path:
        return self.root / "abort"

    @property
    def lock_path(self) -> Path:
        return self.root / "lock"

    @property
    def config_dir(self) -> Path:
        return self.root / "config"

    def identity(self) -> tuple[int, int] | None:
        """(device, inode) of the root directory: it changes when ``write`` swaps a new root in.
        A remote store (a snapshot: never swapped) has none."""
        if self.remote:
            return None
        try:
            st = os.stat(self.root)
        except OSError:
            return None
        return st.st_dev, st.st_ino

    def reopen(self) -> "Store":
        """A fresh view of the same path (nothing cached from this one)."""
        return Store(*self._reopen_args)

    def require_root(self) -> "Store":
        """Refuse a bare data directory where a command needs the store root (verify, rebuild):
        it has no ConsumeQueues, index or checkpoint of its own to check or to write into."""
        kind = self.root.name if self.root.name in ("commitlog", "consumequeue", "index") else None
        if self.commitlog_dirs == [self.root] or kind is not None:
            what = f"{'an' if kind == 'index' else 'a'} {kind} directory" if kind else "a bare commitlog directory"
            raise UsageError(f"is {what}, not a store root; pass the store root (its parent, "
                             f"{self.root.resolve().parent})", self.root)
        return self

    def require_topic(self, topic: str, queue_id: int | None = None) -> None:
        """A --topic/--queue naming no ConsumeQueue of the store is a mistake, not an empty answer:
        ``no topic 'ordertopic' (did you mean 'OrderTopic'?)``. A store without ConsumeQueues
        (deleted, about to be rebuilt) has no list to check against: anything goes."""
        refs = self.queues()
        if not refs:
            return
        topics = sorted({r.topic for r in refs})
        if topic not in topics:
            folded = [t for t in topics if t.lower() == topic.lower()]
            near = folded or difflib.get_close_matches(topic, topics, n=3, cutoff=0.6)
            hint = f" (did you mean {' or '.join(repr(t) for t in near)}?)" if near else \
                f" ({counted(len(topics), 'topic')}: {', '.join(topics[:8])}{', ...' if len(topics) > 8 else ''})"
            raise UsageError(f"no topic {topic!r}{hint}", self.consumequeue_dir)
        if queue_id is not None:
            ids = sorted(r.queue_id for r in refs if r.topic == topic)
            if queue_id not in ids:
                raise UsageError(f"topic {topic!r} has no queue {queue_id} (queues: "
                                 f"{', '.join(map(str, ids))})", self.consumequeue_dir / topic)

    def looks_like_store(self) -> bool:
        return (any(d.is_dir() for d in self.commitlog_dirs) or (self.root / "consumequeue").is_dir()
                or self.index_dir.is_dir() or self.checkpoint_path.is_file())

    # --- commitlog ---------------------------------------------------------------------------
    @cached_property
    def commitlog(self) -> SegmentQueue:
        return SegmentQueue.discover(self.commitlog_dirs, "commitlog", self._commitlog_file_size)

    def locate(self, offset: int) -> tuple[Segment, int] | None:
        """The commitlog file holding ``offset`` and the position inside it."""
        return self.commitlog.locate(offset)

    # --- consume queues ------------------------------------------------------------------------
    def queues(self, batch: bool = False) -> list[QueueRef]:
        """Every ``consumequeue/<topic>/<queueId>/`` (non-integer queue dirs skipped)."""
        base = self.batchconsumequeue_dir if batch else self.consumequeue_dir
        return [QueueRef(topic, qid, path) for topic, qid, path in queue_dirs(base)]

    def queue(self, topic: str, queue_id: int, batch: bool = False) -> SegmentQueue:
        base = self.batchconsumequeue_dir if batch else self.consumequeue_dir
        unit = BCQ_UNIT_SIZE if batch else CQ_UNIT_SIZE
        return SegmentQueue.discover([queue_dir(base, topic, queue_id)], "consumequeue",
                                     self.cq_file_size(unit) if not batch else None, unit)

    def cq_file_size(self, unit: int = CQ_UNIT_SIZE) -> int | None:
        """Nominal CQ file size: explicit, else the most common full-file size across queues."""
        if self._cq_file_size:
            return self._cq_file_size
        if not hasattr(self, "_cq_size_cache"):
            from collections import Counter
            seen = Counter()
            for ref in self.queues()[:64]:
                q = SegmentQueue.discover([ref.path], "consumequeue", None, unit)
                if len(q.files) >= 2:
                    seen[q.file_size] += 3
                elif q.files and q.files[0].size:
                    seen[q.files[0].size] += 1
            self._cq_size_cache = seen.most_common(1)[0][0] if seen else None
        return self._cq_size_cache

    # --- index ---------------------------------------------------------------------------------
    def index_files(self) -> list[Path]:
        """The IndexFiles (17-digit names), a symbolic link to a regular file read through it;
        a FIFO, device or dangling link by that name is refused (``segments.entry_size``)."""
        try:
            entries = storage.scandir(self.index_dir)
        except (FileNotFoundError, NotADirectoryError):
            return []
        names = sorted(e.name for e in entries if INDEX_NAME.match(e.name) and entry_size(e) is not None)
        return [self.index_dir / n for n in names]

    @cached_property
    def index_geometry(self) -> IndexGeometry:
        files = []
        for p in self.index_files():
            try:
                files.append((p, p.stat().st_size))
            except FileNotFoundError:            # deleted since listing: nothing to infer from
                continue
        return resolve_geometry(files, self._index_slots, self._index_entries)

    @property
    def requested_index_geometry(self) -> IndexGeometry | None:
        """The geometry given by the caller (``--index-slots``/``--index-entries``), if any."""
        if self._index_slots and self._index_entries:
            return IndexGeometry(self._index_slots, self._index_entries)
        return None

    # --- checkpoint, liveness, config --------------------------------------------------------------
    def checkpoint(self) -> CheckpointValues | None:
        if not regular_file_present(self.checkpoint_path):
            return None
        return read_checkpoint(self.checkpoint_path)

    def abort_present(self) -> bool:
        """The broker's test: ``abort`` exists (``File.exists``: whatever it is, through a link)."""
        return self.abort_path.exists()

    def lock_owner(self) -> LockOwner | None:
        """Who holds ``lock``: a running broker, or another rmqtool writer (``rmqtool.io.storelock``);
        None when free, absent, or held by this process (and for a remote store: a snapshot)."""
        if self.remote or not self.lock_path.is_file():
            return None
        return lock_owner(self.lock_path)

    def lock_holder(self) -> int | None:
        """PID (or -1) of the process holding ``lock`` (a broker or an rmqtool writer); None when free."""
        owner = self.lock_owner()
        return None if owner is None else owner.pid

    def is_live(self) -> bool:
        """Someone else is changing the store: a broker, or an rmqtool writer, holds ``lock``."""
        return self.lock_owner() is not None

    def symlinks(self) -> list[tuple[Path, str]]:
        """Every symlink inside the store (and inside commitlog dirs outside the root), with its
        target as stored; never followed. A root-level ``commitlog`` link is listed too.
        Object stores have no symlinks."""
        if self.remote:
            return []
        from rmqtool.io.install import symlinks_under
        found = symlinks_under(self.root)
        root = os.path.realpath(self.root)
        for d in self.commitlog_dirs:
            real = os.path.realpath(d)
            if real != root and not real.startswith(root + os.sep):
                found += symlinks_under(d)
        return found

    def config(self) -> dict[str, object]:
        """``config/*.json`` parsed (falling back to ``.bak`` like the broker); errors as strings."""
        out: dict[str, object] = {}
        if not self.config_dir.is_dir():
            return out
        for p in sorted(self.config_dir.glob("*.json")):
            out[p.name] = self.config_file(p.name)
        return out

    def config_file(self, name: str) -> object:
        """``config/NAME`` parsed, or its ``.bak`` when it is empty or cannot be parsed (as the
        broker's ``ConfigManager``); what went wrong as an ``unreadable: ...`` string otherwise
        (None when neither exists). Each is read only up to ``MAX_CONFIG_SIZE``: a larger one is
        unreadable, named with its size, never loaded."""
        p = self.config_dir / name
        found: object = None
        for candidate in (p, p.with_name(p.name + ".bak")):
            if not regular_file_present(candidate):    # a link is read through (and noted); a FIFO or
                continue                               # device is refused (exit 3), never taken for absent
            try:
                text = read_file(candidate, max_length=MAX_CONFIG_SIZE, what="config file").decode("utf-8")
                if text.strip():
                    return fastjson.parse(text)           # fastjson's files: unquoted integer keys
            except FileChangedError:                # gone since: the next candidate
                continue
            except RmqError as exc:
                found = f"{UNREADABLE}{exc.message}"
            except (OSError, ValueError) as exc:
                found = f"{UNREADABLE}{exc}"
        return found
