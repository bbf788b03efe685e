"""`rebuild consumequeue|index`: re-dispatch the CommitLog offline, install crash-safely.

The CommitLog is only read, never past its valid end (the broker's recovery walk:
stop at the first record that fails, BLANK moves to the next file). The new tree is
built beside the old one and swapped in by ``rmqtool.install``; files that are not
rebuilt (other queues, index files kept before ``--from-offset``) are carried over as
hard links. ``--output`` builds the replacement tree elsewhere and touches nothing.
"""
from __future__ import annotations

import datetime as dt
import mmap
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from formats.consumequeue import CQ_UNIT_SIZE, DEFAULT_CQ_FILE_SIZE
from rmqtool import install as inst
from rmqtool.dispatch import (END_DISPATCH_STOP, BatchDispatch, CqCollector, DispatchConfig, IndexBuilder,
                              IndexFileImage, dispatch_batch, layout_cq)
from rmqtool.errors import RefusedError, UsageError
from rmqtool.topicpath import describe, queue_dir, queue_selected, topic_path_problem
from rmqtool.indexfile import IndexFileReader, IndexGeometry
from rmqtool.errors import FileChangedError
from rmqtool.fileio import file_size, first_nonzero
from rmqtool.scan import END_BLANK, END_RANGE, FileEnd, FileScan, ReadBuffer, find_record_start
from rmqtool.recovery import cq_totals
from rmqtool.truncation import WalkOutcome, refuse_truncation, restart_forecast, walk_past_damage

Progress = Callable[[int, int], None]      # (bytes done, bytes total)


@dataclass
class RebuildResult:
    kind: str
    store: str
    target: str
    output: str | None
    dry_run: bool
    range_start: int
    range_end: int                      # commitlog offset where reading stopped
    end_kind: str                       # why: blank/zero/torn/corrupt/to-offset/dispatch-stop
    records: int = 0
    units: int = 0                      # CQ units written (pre-blank excluded)
    entries: int = 0                    # index entries written
    files_written: list[dict] = field(default_factory=list)    # {path, size}
    files_replaced: list[str] = field(default_factory=list)
    files_kept: list[str] = field(default_factory=list)
    backup: str | None = None
    recovered: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0                # the whole run (for rebuild all: both, from the first read)
    geometry: dict = field(default_factory=dict)
    # where the walk stopped before the CommitLog's last data (rmqtool.truncation)
    damage: list[dict] = field(default_factory=list)
    skipped: bool = False               # --skip-corrupt: the records past each damage were rebuilt
    tail_records: int = 0               # records the resync found past the first damage
    tail_items: int = 0                 # their units / index entries (counted, or rebuilt when skipped)
    before: int | None = None           # units / index entries the current files hold (when damaged)
    data_end: int | None = None         # where the CommitLog's data ends (when damaged)
    restart: dict | None = None         # a broker restart on the rebuilt queues (truncation.RestartForecast)

    @property
    def after(self) -> int:
        """Units (consumequeue) or entries (index) the rebuilt files hold."""
        return self.units if self.kind == "consumequeue" else self.entries

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["after"] = self.after
        d["messages_per_second"] = round(self.records / self.seconds) if self.seconds else None
        return d


# --- reading the commitlog ------------------------------------------------------------------
#: window of the rebuild scan: every window is read into one reused buffer and dispatched
#: before the next is read, so a file costs one window of fresh pages (not the whole file),
#: and the per-window numpy temporaries are small enough for the allocator to keep and reuse.
#: rebuild all, 1M messages, 2 workers, allocator tuned as by the CLI: CPU 4.47 s with fresh
#: 64 MiB windows, 3.80 s with a reused 8 MiB one (4 MiB: same within noise).
SCAN_WINDOW = 8 << 20


#: this process's scans run one after another: they share one read buffer
_read_buffer = ReadBuffer()


def _dispatch_file(args) -> tuple[list, FileEnd, int, int | None]:
    """Worker: scan one commitlog file (from ``lo``, below ``hi``) and dispatch its records.

    ``exact``: a record starts at ``lo``; otherwise the scan starts at the first record the
    resync finds at or after ``lo`` (returned last, None when there is none below ``hi``)."""
    path, file_base, lo, hi, check_crc, config, exact = args
    if not exact:
        try:
            # a piece that starts in zeros is past the end of the data (the pre-allocated
            # tail of the newest file): no resync through them. Were a record there after all
            # (a body of zeros across the cut), the piece is scanned again from the chain.
            lo = None if _zeros_at(path, lo) else find_record_start(path, file_base, lo, hi)
        except FileChangedError:
            lo = None
        if lo is None:
            return [], FileEnd(str(path), file_base, 0, hi if hi is not None else file_base, END_RANGE), 0, None
    # reuse_buffer: a batch's bytes are overwritten by the next window; dispatch_batch's
    # results are copies (tested), so every batch is finished before the next is read
    scan = FileScan(path, file_base, lo=lo, hi=hi, check_crc=check_crc, chunk_size=SCAN_WINDOW,
                    buffer=_read_buffer)
    out, records = [], 0
    try:
        for batch in scan:
            d = dispatch_batch(batch, config)
            out.append(d.compact())       # shipped back to the main process
            records += d.records
            if d.stop:                    # the broker dispatches nothing after it
                break
    except FileChangedError as exc:
        return _ship(out), FileEnd(str(path), file_base, 0, exc.offset or lo, "torn", detail=exc.message,
                                   check="commitlog.file-changed"), records, lo
    return _ship(out), scan.end, records, lo


#: bytes that must be zero at a piece's start for the piece to count as past the data
ZERO_PROBE = 64 << 10


def _zeros_at(path, pos: int) -> bool:
    return pos < file_size(path) and first_nonzero(path, pos, pos + ZERO_PROBE) is None


# --- shipping dispatch results from the workers ----------------------------------------------
# Pickled through the pool's pipe, ~90 MB of results per million records land in fresh pages of
# the main process (twice: the message, then the unpickled arrays). Instead every worker appends
# its arrays to an anonymous memory file the main process created before forking the pool, and
# returns only their places; the main process maps them (read-only): no copy, no fresh pages.
# Without memfd, or when a write fails, results go through the pipe as before.
_ARRAYS = ("cq_topic", "cq_queue_id", "cq_queue_offset", "cq_phy_offset", "cq_size", "cq_tags_code",
           "key_hash", "key_phy_offset", "key_store_timestamp", "key_record", "record_phy_offset")
_ship_fd: int | None = None                # this worker's memory file (set by _init_worker)
_ship_end = 0


@dataclass
class _Shipped:
    """Where one task's results lie in a worker's memory file."""
    slot: int
    offset: int                            # page-aligned
    length: int
    batches: list                          # per batch: (topics, records, stop, stop_at, [(dtype, count, at)])


def ignore_interrupts() -> None:
    """A pool worker leaves Ctrl-C to its parent, which ends the pool (no traceback per worker)."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _init_worker(fds: list[int], counter) -> None:
    global _ship_fd, _ship_end
    ignore_interrupts()
    with counter.get_lock():
        slot = counter.value
        counter.value += 1
    _ship_fd, _ship_end = (slot, fds[slot]) if slot < len(fds) else None, 0


def _ship(parts: list):
    global _ship_end
    if _ship_fd is None or not parts:
        return parts
    slot, fd = _ship_fd
    base = pos = end = _ship_end
    meta, views = [], []
    for d in parts:
        cols = []
        for name in _ARRAYS:
            a = np.ascontiguousarray(getattr(d, name))
            cols.append((a.dtype.str, len(a), pos - base))
            if a.nbytes:
                views.append((pos, memoryview(a.reshape(-1).view(np.uint8))))
                end = pos + a.nbytes
            pos += -(-a.nbytes // 64) * 64
        meta.append((d.topics, d.records, d.stop, d.stop_at, cols))
    try:
        for at, view in views:
            while view:
                n = os.pwrite(fd, view, at)
                view, at = view[n:], at + n
    except OSError:
        return parts
    _ship_end = -(-end // mmap.ALLOCATIONGRANULARITY) * mmap.ALLOCATIONGRANULARITY
    return _Shipped(slot, base, end - base, meta)


def _unship(shipped, fds: list[int]) -> list[BatchDispatch]:
    if not isinstance(shipped, _Shipped):
        return shipped
    if not shipped.length:
        mem = b""
    else:
        # shared and read-only, page tables filled in one call (no fault per page, no copy)
        mem = mmap.mmap(fds[shipped.slot], shipped.length, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0),
                        prot=mmap.PROT_READ, offset=shipped.offset)
    out = []
    for topics, records, stop, stop_at, cols in shipped.batches:
        arrays = [np.frombuffer(mem, dtype=np.dtype(dt), count=count, offset=at) if count else
                  np.zeros(0, np.dtype(dt)) for dt, count, at in cols]
        out.append(BatchDispatch(topics, *arrays[:10], records, arrays[10], stop, stop_at))
    return out


def default_workers() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


#: local rebuild: a file is split into pieces of at least this many bytes when there are
#: fewer files than a few per worker (so that no worker is left with a whole file to do alone)
MIN_PIECE = 16 << 20
PIECES_PER_WORKER = 8


def _pieces(files: list, workers: int) -> list[tuple]:
    """(path, base, lo, hi, exact) scan tasks: each file whole, or cut into pieces when the
    files are too few to keep ``workers`` processes equally busy. Only a file's first piece
    starts at a known record; the others start at the resync's first record (``_chained``
    checks that it is where the previous piece's chain arrived)."""
    span = sum((hi if hi is not None else size) - lo for _, _, lo, hi, size in files)
    piece = max(MIN_PIECE, -(-span // max(1, workers * PIECES_PER_WORKER)))
    out = []
    for path, base, lo, hi, size in files:
        stop = hi if hi is not None else size
        if workers <= 1 or stop - lo < 2 * piece:
            out.append((path, base, lo, hi, True))
            continue
        cuts = list(range(lo, stop, piece))
        if stop - cuts[-1] < piece // 2:          # no sliver at the end
            cuts.pop()
        for k, at in enumerate(cuts):
            out.append((path, base, at, cuts[k + 1] if k + 1 < len(cuts) else hi, k == 0))
    return out


def _chained(tasks: list, results, fds: list[int]):
    """In CommitLog order, per piece: (path, base, its dispatches, the file's end or None).

    The end is given with the piece where the file's walk ended (BLANK, zero, corrupt, the
    last piece); the pieces after it are drained and dropped. A piece is used only where
    the previous piece's chain arrived at its first record; when the resync started
    elsewhere (a record spanning the cut, a stray anchor in a body) the piece is scanned
    again here from where the chain arrived."""
    results = iter(results)
    k = 0
    while k < len(tasks):
        j = k + 1
        while j < len(tasks) and tasks[j][0] == tasks[k][0] and not tasks[j][6]:
            j += 1
        arrived = None
        for i in range(k, j):
            task = tasks[i]
            shipped, piece_end, _, began = next(results)
            if arrived is None and i > k:             # the file ended in an earlier piece
                continue
            if i > k and began != arrived:
                shipped, piece_end, _, began = _dispatch_file((*task[:2], arrived, *task[3:6], True))
            got = _unship(shipped, fds)
            ended = i == j - 1 or piece_end.kind != END_RANGE or any(d.stop for d in got)
            arrived = None if ended else piece_end.position
            yield task[0], task[1], got, piece_end if ended else None
        k = j


def _walk(store, start: int, to_offset: int | None, check_crc: bool, progress: Progress | None,
          on_dispatch, config: DispatchConfig, workers: int = 1) -> tuple[int, int, str]:
    """Dispatch every valid record in [start, to_offset), file by file in commitlog order.

    Stops like the broker's recovery walk: a file that does not end in a BLANK is the
    last one read, and a record that fails dispatch (``BatchDispatch.stop``) is the end
    (kind ``dispatch-stop``). Files are scanned by ``workers`` processes; results are consumed in
    order, so later files' results are discarded after a break.
    Returns (records, end offset, end kind)."""
    size = store.commitlog.file_size
    segs = [s for s in store.commitlog.files if s.start + size > start
            and (to_offset is None or s.start < to_offset)]
    total_end = min(segs[-1].start + size, to_offset or 1 << 62) if segs else start
    total = max(total_end - start, 1)
    files = [(str(s.path), s.start, max(start - s.start, 0),
              None if to_offset is None or to_offset >= s.start + size else to_offset - s.start, s.size)
             for s in segs]
    pieces = _pieces(files, workers if len(files) else 1)
    tasks = [(path, base, lo, hi, check_crc, config, first) for path, base, lo, hi, first in pieces]
    records, end, kind = 0, start, "empty"
    pool = None
    fds: list[int] = []
    if workers > 1 and len(tasks) > 1:
        import multiprocessing as mp
        ctx = mp.get_context("fork")
        procs = min(workers, len(tasks))
        try:
            fds = [os.memfd_create("rmqtool-rebuild", getattr(os, "MFD_CLOEXEC", 0)) for _ in range(procs)]
        except (AttributeError, OSError):      # no memfd: results come through the pipe
            for fd in fds:
                os.close(fd)
            fds = []
        pool = ctx.Pool(procs, initializer=_init_worker, initargs=(fds, ctx.Value("i", 0)))
        results = pool.imap(_dispatch_file, tasks)
    else:
        results = map(_dispatch_file, tasks)
    try:
        for path, base, dispatches, file_end in _chained(tasks, results, fds):
            for d in dispatches:
                on_dispatch(d)
                records += d.records
                if d.stop:
                    return records, d.stop_at, END_DISPATCH_STOP
            if file_end is None:                  # more pieces of this file follow
                continue
            if file_end.kind == END_BLANK:
                end, kind = base + size, file_end.kind
            else:
                end, kind = file_end.phy_offset, file_end.kind
            if progress:
                progress(end - start, total)
            if to_offset is not None and end >= to_offset:
                return records, to_offset, "to-offset"
            if file_end.kind != END_BLANK:
                break
    finally:
        if pool is not None:
            pool.terminate()
        for fd in fds:          # the mappings made from them stay valid
            os.close(fd)
    if kind == END_RANGE and to_offset is not None:
        return records, to_offset, "to-offset"
    return records, end, kind


@dataclass
class Replay:
    """A walk already done (rebuild all): its dispatches, those past the first damage that
    were only counted, and its outcome."""
    dispatches: list
    tail: list
    outcome: WalkOutcome


def _run_walk(store, walk, start: int, to_offset: int | None, on_dispatch, on_tail, skip_corrupt: bool,
              check_crc: bool, stops: list[str], replay: Replay | None) -> WalkOutcome:
    """The rebuild's walk past damage (``truncation.walk_past_damage``), or its replay."""
    if replay is None:
        return walk_past_damage(store, walk, start, to_offset, on_dispatch, on_tail, skip_corrupt,
                                check_crc, stops)
    for d in replay.dispatches:
        on_dispatch(d)
    for d in replay.tail:
        on_tail(d)
    return replay.outcome


def _count_units(d, only: set | None) -> int:
    """CQ units one batch adds to the selected queues (``only``: None for all)."""
    if only is None:
        return len(d.cq_topic)
    return sum(1 for t, q in zip(d.cq_topic.tolist(), d.cq_queue_id.tolist())
               if queue_selected(only, d.topics[t], q))


def _note_damage(result: RebuildResult, outcome: WalkOutcome, before: int, restart=None) -> None:
    """Put a walk's early stop into the result: the damage, the counts, the restart forecast."""
    result.records, result.range_end, result.end_kind = outcome.as_tuple()
    result.damage = [d.as_dict() for d in outcome.damage]
    result.skipped, result.tail_records = outcome.skipped, outcome.tail_records
    result.before, result.data_end = before, outcome.data_end
    result.restart = restart.as_dict() if restart is not None else None


def check_rebuild_target(store, output: Path | None) -> None:
    """A rebuild needs CommitLog files, and an in-place one a store nobody else holds."""
    if not store.commitlog.files:
        raise UsageError("no commitlog files: nothing to rebuild from (wrong store path or "
                         "--commitlog-dirs?)", store.commitlog_dirs[0])
    if output is None and store.is_live():
        owner = store.lock_owner()
        who = owner.describe() if owner is not None else f"a running broker (pid {store.lock_holder()})"
        raise RefusedError(f"{who} holds the store lock; stop it, or build elsewhere with --output",
                           store.lock_path)


# --- consumequeue ---------------------------------------------------------------------------
def rebuild_consumequeue(store, topics: list[str] | None = None, queues: list[int] | None = None,
                         cq_file_size: int | None = None, to_offset: int | None = None,
                         output: Path | None = None, dry_run: bool = False, check_crc: bool = True,
                         config: DispatchConfig | None = None, progress: Progress | None = None,
                         confirm: Callable[[RebuildResult], bool] | None = None,
                         workers: int | None = None, walker=None, skip_corrupt: bool = False,
                         allow_truncate: bool = False, replay: "Replay | None" = None) -> RebuildResult:
    """Rebuild the ConsumeQueues (all, or ``topics``/``queues``) from the CommitLog.

    A walk that stops before the CommitLog's last data is refused (``TruncationRefused``,
    after ``result`` is filled for the plan) unless ``skip_corrupt`` (rebuild past it with
    the resync) or ``allow_truncate``; a dry run only reports it."""
    t0 = time.perf_counter()
    workers = workers or default_workers()
    if queues and not topics:
        raise UsageError("--queue needs --topic")
    check_rebuild_target(store, output)
    file_size = cq_file_size or store.cq_file_size() or DEFAULT_CQ_FILE_SIZE
    if file_size % CQ_UNIT_SIZE:
        raise UsageError(f"--cq-file-size {file_size} is not a multiple of {CQ_UNIT_SIZE}")
    target = store.consumequeue_dir
    result = RebuildResult("consumequeue", str(store.root), str(target),
                           str(output) if output else None, dry_run,
                           store.commitlog.min_offset, 0, "", geometry={"cq_file_size": file_size})
    if not dry_run and output is None:
        result.recovered = inst.recover_leftovers(target)
    only = None
    if topics:
        only = {(t, q) for t in topics for q in queues} if queues else {(t, None) for t in topics}
    inst.refuse_linked_topics(target, only)

    collector = CqCollector()
    config = config or DispatchConfig()
    stops: list[str] = []

    def on_dispatch(d):
        if d.stop:
            stops.append(d.stop)
        collector.add(d, only)

    def on_tail(d):
        result.tail_items += _count_units(d, only)

    walk = walker or (lambda a, b, cb: _walk(store, a, b, check_crc, progress, cb, config, workers))
    outcome = _run_walk(store, walk, store.commitlog.min_offset, to_offset, on_dispatch, on_tail,
                        skip_corrupt, check_crc, stops, replay)
    result.records, result.range_end, result.end_kind = outcome.as_tuple()
    result.warnings += stops
    layouts = {}
    skipped = [(d.offset, d.resumed_at) for d in outcome.damage] if outcome.skipped else []
    queues = collector.queues()
    for q in queues:
        problem = topic_path_problem(q.topic)
        if problem is not None:        # topic names come from data: never a path outside the store
            result.warnings.append(f"{problem}: queue {describe(q.topic)}/{q.queue_id} skipped "
                                   f"({len(q)} units not written)")
            continue
        layout = layout_cq(q, file_size, skipped)
        layouts[(q.topic, q.queue_id)] = layout
        result.units += layout.real_units
        result.warnings += layout.warnings
        for start in layout.file_starts():
            result.files_written.append({"path": f"{q.topic}/{q.queue_id}/{start:020d}", "size": file_size})
    if outcome.damage:
        def keep(topic, qid):
            return not queue_selected(only, topic, qid)
        before, _ = cq_totals(store, None if only is None else lambda t, q: not keep(t, q))
        _, carried_max = cq_totals(store, keep) if only is not None else (0, 0)
        rebuilt_max = max((int((q.phy_offset.astype(np.int64) + q.size).max()) for q in queues if len(q)),
                          default=0)
        _note_damage(result, outcome, before,
                     restart_forecast(store, max(rebuilt_max, carried_max), outcome.data_end))

    carried, links = [], []
    if target.is_dir():           # symlinks are carried as links, never followed (or refused)
        c = inst.carried_files(target, only, rebuilt=set(layouts))
        result.files_replaced += c.replaced
        carried, links = c.files, c.links
    result.files_kept = carried + links
    result.seconds = time.perf_counter() - t0
    if dry_run:
        return result
    if not allow_truncate and replay is None:
        refuse_truncation([result])
    if output is None and confirm and not confirm(result):
        return result
    build = inst.prepare_output(output) if output else inst.new_build_dir(target)
    try:
        for (topic, qid), layout in layouts.items():
            qdir = queue_dir(build, topic, qid)
            qdir.mkdir(parents=True, exist_ok=True)
            for start in layout.file_starts():
                _write_sparse(qdir / f"{start:020d}", layout.file_data(start), file_size)
                inst.crash_point("build")
        for rel in carried:
            inst.link_or_copy(target / rel, build / rel)
        for rel in links:
            inst.copy_link(target / rel, build / rel)
    except Exception:                       # a full disk, say: no half-built tree is left behind
        discard_build(build, keep_dir=output is not None)
        raise
    _finish(result, store, target, build, output)
    result.seconds = time.perf_counter() - t0
    return result


def _finish(result: RebuildResult, store, target: Path, build: Path, output: Path | None) -> None:
    if output is not None:
        inst.fsync_tree(build)
        return
    done = inst.install(target, build)
    result.backup = done.backup


def _write_sparse(path: Path, data: bytes, size: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, size)
        view, pos = memoryview(data), 0
        while view:
            n = os.pwrite(fd, view, pos)
            view, pos = view[n:], pos + n
    finally:
        os.close(fd)


# --- index ----------------------------------------------------------------------------------
def index_file_name(when_ms: int) -> str:
    """yyyyMMddHHmmssSSS in local time, as the broker names index files."""
    t = dt.datetime.fromtimestamp(when_ms / 1000)
    return t.strftime("%Y%m%d%H%M%S") + f"{when_ms % 1000:03d}"


@dataclass
class _Kept:
    files: list[Path]
    seed_phy: int = 0
    seed_ts: int = 0
    skip: int = 0


def _kept_index_files(store, geometry: IndexGeometry, from_offset: int | None) -> _Kept:
    """Leading index files entirely below ``from_offset`` that are full and sane."""
    kept = _Kept([])
    if not from_offset:
        return kept
    for path in store.index_files():
        try:
            if path.stat().st_size != geometry.file_size:
                break
            with IndexFileReader(path, geometry) as r:
                h = r.header()
                if h.index_count < geometry.index_entries or h.end_phy_offset >= from_offset:
                    break
                skip, number = 0, h.index_count - 1
                while number >= 1 and int(r.entry(number)["phy_offset"]) == h.end_phy_offset:
                    skip, number = skip + 1, number - 1
        except Exception:          # unreadable: not kept, it will be rebuilt
            break
        kept.files.append(path)
        kept.seed_phy, kept.seed_ts, kept.skip = h.end_phy_offset, h.end_timestamp, skip
    return kept


def rebuild_index(store, geometry: IndexGeometry, from_offset: int | None = None,
                  to_offset: int | None = None, output: Path | None = None, dry_run: bool = False,
                  check_crc: bool = True, config: DispatchConfig | None = None,
                  progress: Progress | None = None,
                  confirm: Callable[[RebuildResult], bool] | None = None,
                  workers: int | None = None, walker=None, skip_corrupt: bool = False,
                  allow_truncate: bool = False, replay: Replay | None = None) -> RebuildResult:
    """Rebuild the IndexFiles (those wholly below ``from_offset`` are kept) from the CommitLog.

    An early stop of the walk is handled as by ``rebuild_consumequeue``; the refusal comes
    before anything is installed (the images are built in a fresh build directory)."""
    t0 = time.perf_counter()
    workers = workers or default_workers()
    check_rebuild_target(store, output)
    target = store.index_dir
    if output is None and target.is_dir():
        inst.refuse_links_in(target)       # a linked index file would end up only in the backup
    result = RebuildResult("index", str(store.root), str(target), str(output) if output else None,
                           dry_run, 0, 0, "", geometry={"hash_slots": geometry.hash_slots,
                                                         "index_entries": geometry.index_entries})
    if not dry_run and output is None:
        result.recovered = inst.recover_leftovers(target)
    kept = _kept_index_files(store, geometry, from_offset)
    start = kept.seed_phy if kept.files else store.commitlog.min_offset
    result.range_start = start
    existing = set(store.index_files())
    result.files_kept = [p.name for p in kept.files]
    result.files_replaced = sorted(p.name for p in existing - set(kept.files))
    others = [p for p in target.iterdir() if p.is_file() and p not in existing] if target.is_dir() else []
    result.files_kept += [p.name for p in others]

    names = _name_source([p.name for p in kept.files])
    build: Path | None = None
    if not dry_run and not (output is None and confirm and not confirm(result)):
        build = inst.prepare_output(output) if output else inst.new_build_dir(target)
    images: list[tuple[str, int]] = []

    def sink(image: IndexFileImage) -> None:
        name = next(names)
        images.append((name, int(image.header["index_count"][0]) - 1))
        result.files_written.append({"path": name, "size": geometry.file_size})
        if build is not None:
            fd = os.open(build / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                image.write_to(fd)
            finally:
                os.close(fd)
            inst.crash_point("build")

    builder = IndexBuilder(geometry.hash_slots, geometry.index_entries, sink,
                           kept.seed_phy, kept.seed_ts, kept.skip)
    config = config or DispatchConfig()

    stops: list[str] = []

    def on_dispatch(d):
        if d.stop:
            stops.append(d.stop)
        builder.add(d.key_hash, d.key_phy_offset, d.key_store_timestamp, d.record_phy_offset)

    def on_tail(d):
        result.tail_items += len(d.key_hash)

    if dry_run or build is not None:
        walk = walker or (lambda a, b, cb: _walk(store, a, b, check_crc, progress, cb, config, workers))
        try:
            outcome = _run_walk(store, walk, start, to_offset, on_dispatch, on_tail, skip_corrupt, check_crc,
                                stops, replay)
            builder.finish()
        except Exception:                   # a full disk, say: no half-built index is left behind
            if build is not None:
                discard_build(build, keep_dir=output is not None)
            raise
        result.records, result.range_end, result.end_kind = outcome.as_tuple()
        result.warnings += stops
        result.entries = builder.entries
        if outcome.damage:
            _note_damage(result, outcome, _current_entries(store))
            if not dry_run and not allow_truncate and replay is None and not outcome.skipped:
                if build is not None:
                    discard_build(build, keep_dir=output is not None)
                refuse_truncation([result])
    result.entries = builder.entries
    if to_offset is not None and result.end_kind == "to-offset":
        result.warnings.append(f"records from {to_offset} on are not indexed (--to-offset)")
    if build is None:
        result.seconds = time.perf_counter() - t0
        return result
    try:
        for p in kept.files + others:
            inst.link_or_copy(p, build / p.name)
    except Exception:
        discard_build(build, keep_dir=output is not None)
        raise
    _finish(result, store, target, build, output)
    result.seconds = time.perf_counter() - t0
    return result


def _current_entries(store) -> int | None:
    """Index entries the store's IndexFiles hold now (headers' indexCount - 1, summed)."""
    total = 0
    for path in store.index_files():
        try:
            with IndexFileReader(path, store.index_geometry) as r:
                total += max(0, r.header().index_count - 1)
        except Exception:     # noqa: BLE001 - an unreadable file holds nothing we can count
            continue
    return total


def _name_source(kept_names: list[str]):
    """Fresh index file names: now (local time), strictly after every kept name."""
    now = int(time.time() * 1000)
    floor = max((int(n) for n in kept_names), default=0)
    while True:
        name = index_file_name(now)
        if int(name) > floor:
            floor = int(name)
            yield name
        now += 1


def discard_build(build: Path, keep_dir: bool) -> None:
    """Remove a build that will not be installed (``keep_dir``: empty the --output directory)."""
    if not keep_dir:
        shutil.rmtree(build, ignore_errors=True)
        return
    for child in build.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


# --- both, one pass -----------------------------------------------------------------------------
def rebuild_all(store, geometry: IndexGeometry, cq_file_size: int | None = None,
                to_offset: int | None = None, output: Path | None = None, dry_run: bool = False,
                check_crc: bool = True, config: DispatchConfig | None = None,
                progress: Progress | None = None, confirm=None,
                workers: int | None = None, skip_corrupt: bool = False,
                allow_truncate: bool = False) -> tuple[RebuildResult, RebuildResult]:
    """ConsumeQueue and IndexFiles from one pass over the CommitLog (the dispatch results
    are held in memory between the two installs, each of which is crash-safe on its own).
    The two are built and installed at the same time unless ``confirm`` asks a person.
    A walk that stops before the last data is refused before either is built (see
    ``rebuild_consumequeue``). Both results' ``seconds`` is the whole run."""
    t0 = time.perf_counter()
    check_rebuild_target(store, output)
    config = config or DispatchConfig()
    start = store.commitlog.min_offset
    held: list = []
    tail: list = []
    stops: list[str] = []

    def hold(d):
        if d.stop:
            stops.append(d.stop)
        held.append(d)

    outcome = walk_past_damage(
        store, lambda a, b, cb: _walk(store, a, b, check_crc, progress, cb, config, workers or default_workers()),
        start, to_offset, hold, tail.append, skip_corrupt, check_crc, stops)
    replay = Replay(held, tail, outcome)

    def consumequeue(dry=dry_run):
        return rebuild_consumequeue(store, cq_file_size=cq_file_size, to_offset=to_offset,
                                    output=output / "consumequeue" if output else None, dry_run=dry,
                                    check_crc=check_crc, config=config, confirm=confirm, replay=replay)

    def index(dry=dry_run):
        return rebuild_index(store, geometry, to_offset=to_offset, output=output / "index" if output else None,
                             dry_run=dry, check_crc=check_crc, config=config, confirm=confirm, replay=replay)

    if outcome.damage and not outcome.skipped and not allow_truncate and not dry_run:
        refuse_truncation([consumequeue(True), index(True)])      # the plans, then the refusal
    if output is None and confirm is not None and not getattr(confirm, "unattended", False):
        results = consumequeue(), index()          # a person answers one prompt, then the other
    else:
        results = _both(consumequeue, index)
    whole = time.perf_counter() - t0
    for r in results:
        r.seconds = whole
    return results


def _both(first, second):
    """Run ``first`` in a thread while ``second`` runs here (the two installs touch different
    directories, each with its own journal; one's fsyncs overlap the other's CPU work).
    Both finish before anything is raised; when both fail, ``second``'s error is raised."""
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(1, thread_name_prefix="rmqtool-rebuild") as pool:
        pending = pool.submit(first)
        try:
            b = second()
        except BaseException:
            pending.exception()                    # wait for it; its own error, if any, is lost
            raise
        return pending.result(), b
