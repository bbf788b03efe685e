"""`rebuild consumequeue|batchconsumequeue|index|all`: re-dispatch the CommitLog offline, install crash-safely.

One set of jobs (``_CqJob``, ``_BcqJob``, ``_IndexJob``; ``rebuild_ext`` for ConsumeQueueExt, the
timer wheel from ``ops/timer``) is fed by whichever engine walks the CommitLog: the ordered local
pool (``engines.ordered``) or an engine's tasks (``engine_walker``); every ``rebuild_*`` takes
``engine=`` and holds the store's writer lock itself. The CommitLog is only read, never past its valid end (the broker's recovery walk:
stop at the first record that fails, BLANK moves to the next file). The new tree is
built beside the old one and swapped in by ``rmqtool.io.install``; files that are not
rebuilt (other queues, index files kept before ``--from-offset``) are carried over as
hard links. ``--output`` builds the replacement tree elsewhere and touches nothing.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from formats import commitlog as cl
from formats.consumequeue import BCQ_UNIT_SIZE, CQ_UNIT_SIZE, DEFAULT_BCQ_FILE_SIZE, DEFAULT_CQ_FILE_SIZE
from rmqtool.io import install as inst
from rmqtool.broker.cqbuild import BcqBuilder, CqBuilder
from rmqtool.broker.queuekinds import detect as detect_queue_kinds
from rmqtool.broker.delay import store_delay_levels
from rmqtool.io.consumequeue import read_batch_queue
from rmqtool.broker.dispatch import (END_DISPATCH_STOP, BatchDispatch, DispatchConfig, IndexBuilder, IndexFileImage,
                                     IndexFileWriter, index_file_names,
                              dispatch_batch)
from rmqtool.engines import ordered
from rmqtool.errors import RefusedError, UsageError
from rmqtool.io.topicpath import queue_selected
from rmqtool.io.indexfile import IndexFileReader, IndexGeometry
from rmqtool.io.storelock import rebuild_lock, refuse_in_place_on_object_storage
from rmqtool.errors import FileChangedError
from rmqtool.io.fileio import CACHE_WINDOW
from rmqtool.records.scan import END_EOF, END_RANGE, FileEnd, FileScan, ReadBuffer, find_record_start, past_data_end
from rmqtool.broker.recovery import cq_totals
from rmqtool.ops.consumers import rebuild_moves
from rmqtool.broker.truncation import WalkOutcome, refuse_truncation, restart_forecast, walk_past_damage
from rmqtool.wording import counted

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
    # where the walk stopped before the CommitLog's last data (rmqtool.broker.truncation)
    damage: list[dict] = field(default_factory=list)
    skipped: bool = False               # --skip-corrupt: the records past each damage were rebuilt
    tail_records: int = 0               # records the resync found past the first damage
    tail_items: int = 0                 # their units / index entries (counted, or rebuilt when skipped)
    before: int | None = None           # units / index entries the current files hold (when damaged)
    data_end: int | None = None         # where the CommitLog's data ends (when damaged)
    restart: dict | None = None         # a broker restart on the rebuilt queues (truncation.RestartForecast)
    uncovered: dict | None = None       # a later segment's data the walk never reached (truncation.data_after_walk)
    consumers: list | None = None       # committed offsets whose pull answer the rebuilt queues change

    @property
    def after(self) -> int:
        """Units (consumequeue) or entries (index) the rebuilt files hold."""
        return self.units if self.kind in ("consumequeue", "batchconsumequeue") else self.entries

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        for key in ("uncovered", "consumers"):   # only a walk that left data out / a ConsumeQueue rebuild of a
            if d[key] is None:                    # store with committed offsets has the key
                del d[key]
        d["after"] = self.after
        d["messages_per_second"] = round(self.records / self.seconds) if self.seconds else None
        return d


# --- reading the commitlog ------------------------------------------------------------------
#: window of the rebuild scan: every window is read into one reused buffer and dispatched
#: before the next is read, so a file costs one window of fresh pages (not the whole file),
#: and the per-window numpy temporaries are small enough for the allocator to keep and reuse.
SCAN_WINDOW = CACHE_WINDOW


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
            lo = None if past_data_end(path, lo) else find_record_start(path, file_base, lo, hi)
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
        return ordered.ship(_pack(out)), FileEnd(str(path), file_base, 0, exc.offset or lo, "torn", detail=exc.message,
                                   check="commitlog.file-changed"), records, lo
    return ordered.ship(_pack(out)), scan.end, records, lo


# --- shipping dispatch results from the workers ----------------------------------------------
# A batch's arrays travel through the ordered pool's memory files (``engines.ordered.ship``).
_ARRAYS = ("cq_topic", "cq_queue_id", "cq_queue_offset", "cq_phy_offset", "cq_size", "cq_tags_code",
           "key_hash", "key_phy_offset", "key_store_timestamp", "key_record", "record_phy_offset")


def _pack(parts: list) -> list:
    """BatchDispatches as ``ordered.ship`` items: (topics, records, stop, stop_at, bcq) and the arrays
    (bcq: few units, pickled)."""
    return [((d.topics, d.records, d.stop, d.stop_at, d.bcq), [getattr(d, name) for name in _ARRAYS])
            for d in parts]


def _unpack(items: list) -> list[BatchDispatch]:
    out = []
    for (topics, records, stop, stop_at, bcq), arrays in items:
        out.append(BatchDispatch(topics, *arrays[:10], records, arrays[10], stop, stop_at, bcq))
    return out


def _stopped(items: list) -> bool:
    return any(meta[2] for meta, _ in items)


def _walk(store, start: int, to_offset: int | None, check_crc: bool, progress: Progress | None,
          on_dispatch, config: DispatchConfig, workers: int = 1) -> tuple[int, int, str]:
    """Dispatch every valid record in [start, to_offset), file by file in commitlog order.

    Stops like the broker's recovery walk: a file that does not end in a BLANK is the
    last one read, and a record that fails dispatch (``BatchDispatch.stop``) is the end
    (kind ``dispatch-stop``). Files are scanned by ``workers`` processes; results are consumed in
    order, so later files' results are discarded after a break.
    Returns (records, end offset, end kind)."""
    size = store.commitlog.file_size
    segs = _segments_in_range(store, start, to_offset)
    total = _walk_total(store, segs, start, to_offset)
    files = [(s.path, s.start, max(start - s.start, 0),
              None if to_offset is None or to_offset >= s.start + size else to_offset - s.start, s.size)
             for s in segs]
    tasks = [(path, base, lo, hi, check_crc, config, first)
             for path, base, lo, hi, first in ordered.pieces(files, workers if len(files) else 1)]
    records, end, kind = 0, start, "empty"

    def rescan(piece, at):                       # piece: (path, base, lo, hi, exact)
        return _dispatch_file((piece[0], piece[1], at, piece[3], check_crc, config, True))

    with ordered.OrderedPool(workers, len(tasks)) as pool:
        results = pool.map(_dispatch_file, tasks)
        for path, base, items, file_end in ordered.chained([(*t[:4], t[6]) for t in tasks], results, pool,
                                                           rescan, _stopped):
            n, stop_at = _feed(items, on_dispatch)
            del items                             # its pages are written again once released (ordered.ship)
            records += n
            if stop_at is not None:
                return records, stop_at, END_DISPATCH_STOP
            if file_end is None:                  # more pieces of this file follow
                continue
            end, kind = file_end.log_end, file_end.kind
            if progress:
                progress(end - start, total)
            if to_offset is not None and end >= to_offset:
                return records, to_offset, "to-offset"
            if file_end.ends_log:
                break
    if kind == END_RANGE and to_offset is not None:
        return records, to_offset, "to-offset"
    return records, end, kind


def _feed(items: list, on_dispatch) -> tuple[int, int | None]:
    """One piece's dispatches to ``on_dispatch``: (records, where a dispatch stop ends the walk or None)."""
    records = 0
    for d in _unpack(items):
        on_dispatch(d)
        records += d.records
        if d.stop:
            return records, d.stop_at
    return records, None


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


def check_rebuild_target(store, output: Path | None, dry_run: bool = False) -> None:
    """A rebuild needs CommitLog files, and an in-place one a store nobody else holds."""
    from rmqtool.io.storage import is_uri, mangled_uri
    if not store.commitlog.files:
        raise UsageError("no commitlog files: nothing to rebuild from (wrong store path or "
                         "--commitlog-dirs?)", store.commitlog_dirs[0])
    refuse_in_place_on_object_storage(store, output, dry_run)
    if output is not None and (is_uri(output) or mangled_uri(output)):
        raise UsageError("--output must be a local directory (the rebuilt files are installed from it)",
                         output)
    if output is None and store.rocksdb_cq:
        raise RefusedError("the store keeps its ConsumeQueues in RocksDB (consumequeue/), which rmqtool never "
                           "writes; build the file-based form elsewhere with --output DIR", store.root / "consumequeue")
    if output is None and store.is_live():
        owner = store.lock_owner()
        who = owner.describe() if owner is not None else f"a running broker (pid {store.lock_holder()})"
        raise RefusedError(f"{who} holds the store lock; stop it, or build elsewhere with --output",
                           store.lock_path)


def dispatch_config(store, config: DispatchConfig | None = None, multi_dispatch: bool | None = None) -> DispatchConfig:
    """The dispatch settings of the broker that wrote ``store`` (its delay table,
    ``delay.store_delay_levels``; ``queuekinds.detect``: multi-dispatch when it holds light
    queues, its BatchCQ topics), unless ``config`` is given."""
    if config is not None:
        return config
    return DispatchConfig(store_delay_levels(store), kinds=detect_queue_kinds(store, multi_dispatch))


def check_no_cq_ext(store) -> None:
    """Refuse a ConsumeQueue rebuild that does not rebuild ConsumeQueueExt files (``rebuild
    consumequeue``, the distributed rebuild) of a store that keeps ``consumequeue_ext/`` (4.x
    ``enableConsumeQueueExt``): its CQ units hold ext addresses where the rebuild would write tag
    hashes (docs/format-cq-ext.md; ``rebuild_all`` rebuilds both, ``ops/rebuild_ext``)."""
    from rmqtool.io.consumequeue_ext import EXT_DIR, has_ext
    if has_ext(store.root):
        raise RefusedError("the store keeps ConsumeQueueExt files (enableConsumeQueueExt): its ConsumeQueue "
                           "units hold addresses into them, which this rebuild does not regenerate; it would put "
                           "tag hashes where the addresses are and break the broker's tag/SQL filtering "
                           "(`rebuild all` rebuilds both)", store.root / EXT_DIR)


def check_queue_kinds(store, topics: list[str] | None, config: DispatchConfig) -> None:
    """Refuse a ConsumeQueue rebuild that would drop light queues (``%LMQ%…``) because
    multi-dispatch was turned off for it; a rebuild of other topics (``--topic``) keeps them.
    BatchCQ topics are never written to ``consumequeue/`` (their ``batchconsumequeue/`` stays).
    """
    if config.kinds.multi_dispatch:
        return
    lmq = sorted({r.topic for r in store.queues() if r.topic.startswith(cl.LMQ_TOPIC_PREFIX)})
    lost = [t for t in lmq if topics is None or t in topics]
    if lost:
        raise RefusedError(f"the store holds {counted(len(lost), 'light queue topic')} ({', '.join(lost[:3])}"
                           f"{', …' if len(lost) > 3 else ''}) filled by multi-dispatch, which is off for this "
                           "rebuild: it would drop them; drop --no-multi-dispatch, or rebuild the other topics "
                           "with --topic (these are kept)", store.consumequeue_dir)


# --- the walk on an engine ---------------------------------------------------------------------
# With an engine (Spark), every task scans its byte range of the CommitLog and dispatches its
# record batches (the expensive part, spread over executors); the ``BatchDispatch`` results come
# back in CommitLog order and the jobs above build the files here, as from the local pool's walk.
# The walk stops like the broker's recovery: the first file that does not end in a BLANK is the
# last one used, and nothing after a record that fails dispatch (``BatchDispatch.stop``) is used.
def _dispatch_schema():
    import pyarrow as pa
    return pa.schema([("task", pa.int64()), ("records", pa.int64()), ("dispatch", pa.binary()),
                      ("ref", pa.string())])


def _in_range(batches, start: int, to_offset: int | None):
    """The batches' records in [start, to_offset), batch by batch (empty ones skipped)."""
    import numpy as np
    from rmqtool.output.arrow import select
    for b in batches:
        keep = b.phy_offset >= start
        if to_offset is not None:
            keep &= b.phy_offset < to_offset
        if not keep.any():
            continue
        yield b if keep.all() else select(b, np.flatnonzero(keep))


class DispatchStage:
    """Per task: records in [start, to_offset) -> pickled ``BatchDispatch`` per batch, left in
    ``staging`` (the row carries its reference) or, without one, in the row."""

    def __init__(self, config, start: int, to_offset: int | None, staging=None):
        self.config, self.start, self.to_offset = config, start, to_offset
        self.staging = staging

    def __call__(self, task, batches):
        import pickle
        import pyarrow as pa
        schema = _dispatch_schema()
        for b in _in_range(batches, self.start, self.to_offset):
            d = dispatch_batch(b, self.config)
            blob = pickle.dumps(d, protocol=5)
            row = {"task": task.task_id, "records": d.records, "dispatch": None, "ref": None}
            if self.staging is None:
                row["dispatch"] = blob
            else:
                row["ref"] = self.staging.put(blob)
            yield pa.RecordBatch.from_pylist([row], schema=schema)
            if d.stop:                    # the broker dispatches nothing after it
                break


def engine_walker(engine, store, check_crc: bool, config, split_size: int | None = None, progress=None):
    """A ``walk(start, to_offset, on_dispatch) -> (records, end, kind)`` whose scan and dispatch run
    as ``engine``'s tasks (``split_size`` bytes of CommitLog each)."""
    import pickle
    from rmqtool.engines import DEFAULT_SPLIT_SIZE, file_ends, plan_tasks
    split_size = split_size or DEFAULT_SPLIT_SIZE

    def walk(start: int, to_offset: int | None, on_dispatch):
        tasks = plan_tasks([("store", store)], split_size, (start, to_offset), check_crc=check_crc,
                           exact_start=True)
        staging = engine.open_staging() if tasks else None
        try:
            return _adopt(engine, store, tasks, staging, start, to_offset, on_dispatch)
        finally:
            if staging is not None:
                staging.close()

    def _adopt(engine, store, tasks, staging, start, to_offset, on_dispatch):
        table = engine.run(tasks, DispatchStage(config, start, to_offset, staging), _dispatch_schema(),
                           on_discard=None if staging is None else staging.discard_rows)
        ends = file_ends(engine.tasks, engine.statuses)
        task_file = {t.task_id: t for t in engine.tasks}
        payload = {}
        column = "dispatch" if staging is None else "ref"
        for tid, n, item in zip(table.column("task").to_pylist(), table.column("records").to_pylist(),
                                table.column(column).to_pylist()):
            payload.setdefault(tid, []).append((n, item))
        del table
        records = 0
        total = _walk_total(store, _segments_in_range(store, start, to_offset), start, to_offset)
        reached, outcome = files_reached(store, ends, start, to_offset)
        for seg, end in reached:
            for t in sorted((t for t in task_file.values() if t.path == str(seg.path)), key=lambda t: t.lo):
                for n, item in payload.pop(t.task_id, ()):
                    d = pickle.loads(item if staging is None else staging.take(item))
                    records += n
                    on_dispatch(d)
                    if d.stop:
                        return records, d.stop_at, END_DISPATCH_STOP
            if progress:
                progress(end - start, total)
        return (records, *outcome)
    return walk


def _segments_in_range(store, start: int, to_offset: int | None) -> list:
    """The CommitLog files a walk of [start, to_offset) reads."""
    size = store.commitlog.file_size
    return [s for s in store.commitlog.files if s.start + size > start
            and (to_offset is None or s.start < to_offset)]


def _walk_total(store, segs: list, start: int, to_offset: int | None) -> int:
    """The bytes a walk of ``segs`` from ``start`` covers at most (its progress total, at least 1)."""
    if not segs:
        return 1
    return max(min(segs[-1].start + store.commitlog.file_size, to_offset or 1 << 62) - start, 1)


def files_reached(store, ends: dict, start: int, to_offset: int | None) -> tuple[list, tuple[int, str]]:
    """The broker's walk over whole files from ``start``, given how each file's scan ended
    (``file_ends``): the files it reaches, each with the offset reached after it, and where it
    ends (offset, kind), as ``rmqtool.ops.rebuild`` reports them. A file not ending in a
    BLANK ends the walk."""
    reached = []
    end, kind = start, "empty"
    for seg in _segments_in_range(store, start, to_offset):
        kind, position = ends.get(str(seg.path), (END_EOF, seg.size))
        file_end = FileEnd(str(seg.path), seg.start, seg.size, position, kind)
        end = file_end.log_end
        reached.append((seg, end))
        if to_offset is not None and end >= to_offset:
            return reached, (to_offset, "to-offset")
        if file_end.ends_log:
            break
    if kind == END_RANGE and to_offset is not None:
        return reached, (to_offset, "to-offset")
    return reached, (end, kind)



def _locked(command: str):
    """Run the decorated rebuild under the store's writer lock, held as ``command``
    (``storelock.rebuild_lock``: none for ``output``, a held store refused for ``dry_run``), so
    that the operation is locked however it is called."""
    def wrap(fn):
        import functools
        import inspect
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def locked(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            a = bound.arguments
            with rebuild_lock(a["store"], command, a["dry_run"], a["output"]):
                return fn(*args, **kwargs)
        return locked
    return wrap


# --- one walk, any number of builds --------------------------------------------------------------
def _walker(store, engine, workers: int | None, split_size: int | None, check_crc: bool, progress, config):
    """The CommitLog walk of a rebuild: on ``engine``'s tasks (``engine_walker``), or, for no engine or
    the local one, on the ordered local pool (``workers`` processes, else the engine's jobs)."""
    if engine is not None and engine.name != "local":
        return engine_walker(engine, store, check_crc, config, split_size, progress)
    n = workers or (engine.jobs if engine is not None else None) or ordered.default_workers()
    return lambda a, b, cb: _walk(store, a, b, check_crc, progress, cb, config, n)


def _rebuild(store, jobs: list, start: int, to_offset: int | None, check_crc: bool, progress, config,
             walk, skip_corrupt: bool) -> WalkOutcome:
    """Walk the CommitLog once past any damage (``truncation.walk_past_damage``), each batch's
    dispatch going to every job's builder as it arrives; then each job completes its plan.
    On any failure (a full disk, Ctrl-C) every job's build is removed."""
    stops: list[str] = []

    def on_dispatch(d):
        if d.stop:
            stops.append(d.stop)
        for job in jobs:
            job.on_dispatch(d)

    def on_tail(d):
        for job in jobs:
            job.on_tail(d)

    def on_damage(damage):
        for job in jobs:
            job.on_damage(damage, skip_corrupt)

    try:
        outcome = walk_past_damage(store, walk, start, to_offset, on_dispatch, on_tail, skip_corrupt,
                                   check_crc, stops, on_damage)
        for job in jobs:
            job.result.uncovered = outcome.uncovered
            job.finish(outcome, stops)
    except BaseException:
        for job in jobs:
            job.discard()
        raise
    return outcome


class _Job:
    """One rebuild (ConsumeQueue or IndexFiles): its plan (``result``), the build directory
    its files go to while the walk runs (None for a dry run), and its install."""
    result: RebuildResult
    store = None
    target: Path
    output: Path | None = None
    build: Path | None = None

    def _open_build(self, dry_run: bool) -> None:
        if not dry_run:
            self.build, self.result.recovered = inst.open_build(self.target, self.output)

    def on_damage(self, damage, skip_corrupt: bool) -> None:
        pass

    def discard(self) -> None:
        """Remove the build (it will not be installed)."""
        if self.build is not None:
            inst.discard_build(self.build, keep_dir=self.output is not None)
            self.build = None

    def carry(self) -> None:
        """Put the files that are not rebuilt into the build (links, never followed)."""

    def install(self, confirm, allow_truncate: bool) -> None:
        """Refuse (a walk that stopped early), ask, or install the build; a refused or
        declined build is removed, and nothing in the store is touched."""
        r = self.result
        if self.build is None:
            return
        try:
            if not allow_truncate:
                refuse_truncation([r])
            if self.output is None and confirm and not confirm(r):
                self.discard()
                return
            self.carry()
        except BaseException:
            self.discard()
            raise
        _finish(r, self.store, self.target, self.build, self.output)


class _QueueTreeJob(_Job):
    """A rebuild of a tree of ``<topic>/<queueId>/`` queues: the queues not rebuilt are carried over."""
    carried: list
    links: list

    def close_builder(self, outcome: WalkOutcome, stops: list[str]) -> None:
        """The queue builder's last flush, and what the walk and the builder tell the result."""
        r = self.result
        self.builder.finish()
        r.records, r.range_end, r.end_kind = outcome.as_tuple()
        r.warnings += stops + self.builder.warnings()
        r.units = self.builder.units
        r.files_written = self.builder.files_written()

    def plan_carry(self, only) -> None:
        """Which of the target's files go over into the build (symlinks as links, never followed)."""
        if self.target.is_dir():
            c = inst.carried_files(self.target, only, rebuilt=set(self.builder.queue_keys()))
            self.result.files_replaced += c.replaced
            self.carried, self.links = c.files, c.links
        self.result.files_kept = self.carried + self.links

    def carry(self) -> None:
        for rel in self.carried:
            inst.link_or_copy(self.target / rel, self.build / rel)
        for rel in self.links:
            inst.copy_link(self.target / rel, self.build / rel)


# --- consumequeue ---------------------------------------------------------------------------
class _CqJob(_QueueTreeJob):
    def __init__(self, store, topics, queues, cq_file_size, output, dry_run: bool):
        if queues and not topics:
            raise UsageError("--queue needs --topic")
        file_size = cq_file_size or store.cq_file_size() or DEFAULT_CQ_FILE_SIZE
        if file_size % CQ_UNIT_SIZE:
            raise UsageError(f"--cq-file-size {file_size} is not a multiple of {CQ_UNIT_SIZE}")
        self.store, self.output, self.target = store, output, store.consumequeue_dir
        self.result = RebuildResult("consumequeue", str(store.root), str(self.target),
                                    str(output) if output else None, dry_run,
                                    store.commitlog.min_offset, 0, "", geometry={"cq_file_size": file_size})
        self.only = None
        if topics:
            self.only = ({(t, q) for t in topics for q in queues} if queues else {(t, None) for t in topics})
        inst.refuse_linked_topics(self.target, self.only)
        self.skipped: list[tuple[int, int]] = []     # ranges --skip-corrupt went past, as they are found
        self._open_build(dry_run)
        self.builder = CqBuilder(file_size, self.only, self.skipped, self.build)
        self.carried: list[str] = []
        self.links: list[str] = []

    def on_dispatch(self, d) -> None:
        self.builder.add(d)

    def on_tail(self, d) -> None:
        self.result.tail_items += _count_units(d, self.only)

    def on_damage(self, damage, skip_corrupt: bool) -> None:
        if skip_corrupt:
            self.skipped.append((damage.offset, damage.resumed_at))

    def finish(self, outcome: WalkOutcome, stops: list[str]) -> None:
        r, store, only = self.result, self.store, self.only
        self.close_builder(outcome, stops)
        if outcome.damage:
            def keep(topic, qid):
                return not queue_selected(only, topic, qid)
            before, _ = cq_totals(store, None if only is None else lambda t, q: not keep(t, q))
            _, carried_max = cq_totals(store, keep) if only is not None else (0, 0)
            _note_damage(r, outcome, before,
                         restart_forecast(store, max(self.builder.max_end, carried_max), outcome.data_end))
        r.consumers = rebuild_moves(store, self.builder.bounds(store.commitlog.min_offset),
                                    lambda t, q: queue_selected(only, t, q))
        self.plan_carry(only)


@_locked("rmqtool rebuild consumequeue")
def rebuild_consumequeue(store, topics: list[str] | None = None, queues: list[int] | None = None,
                         cq_file_size: int | None = None, to_offset: int | None = None,
                         output: Path | None = None, dry_run: bool = False, check_crc: bool = True,
                         config: DispatchConfig | None = None, progress: Progress | None = None,
                         confirm: Callable[[RebuildResult], bool] | None = None,
                         workers: int | None = None, skip_corrupt: bool = False,
                         allow_truncate: bool = False, engine=None, split_size: int | None = None) -> RebuildResult:
    """Rebuild the ConsumeQueues (all, or ``topics``/``queues``) from the CommitLog.

    The files are written into a build directory as the walk goes (memory does not grow with
    the store); ``confirm`` is asked with the whole plan before the build is installed. A
    walk that stops before the CommitLog's last data is refused (``TruncationRefused``, the
    plan in it) unless ``skip_corrupt`` (rebuild past it with the resync) or
    ``allow_truncate``; a dry run only reports it."""
    t0 = time.perf_counter()
    check_rebuild_target(store, output, dry_run)
    config = dispatch_config(store, config)
    check_queue_kinds(store, topics, config)
    check_no_cq_ext(store)
    job = _CqJob(store, topics, queues, cq_file_size, output, dry_run)
    _rebuild(store, [job], store.commitlog.min_offset, to_offset, check_crc, progress, config,
             _walker(store, engine, workers, split_size, check_crc, progress, config), skip_corrupt)
    job.result.seconds = time.perf_counter() - t0
    job.install(confirm, allow_truncate)
    job.result.seconds = time.perf_counter() - t0
    return job.result


# --- batchconsumequeue ----------------------------------------------------------------------
class _BcqJob(_QueueTreeJob):
    """The BatchConsumeQueues of the store's BatchCQ topics (``queuekinds``), rebuilt into
    ``batchconsumequeue/``; the queues of topics not selected are carried over."""

    def __init__(self, store, topics, file_size, output, dry_run: bool):
        self.store, self.output, self.target = store, output, store.batchconsumequeue_dir
        file_size = file_size or _batch_file_size(store) or DEFAULT_BCQ_FILE_SIZE
        if file_size % BCQ_UNIT_SIZE:
            raise UsageError(f"--bcq-file-size {file_size} is not a multiple of {BCQ_UNIT_SIZE}")
        self.result = RebuildResult("batchconsumequeue", str(store.root), str(self.target),
                                    str(output) if output else None, dry_run,
                                    store.commitlog.min_offset, 0, "", geometry={"bcq_file_size": file_size})
        self.only = {(t, None) for t in topics} if topics else None
        inst.refuse_linked_topics(self.target, self.only)
        self._open_build(dry_run)
        self.builder = BcqBuilder(file_size, self.only, self.build)
        self.carried: list[str] = []
        self.links: list[str] = []

    def on_dispatch(self, d) -> None:
        self.builder.add(d)

    def on_tail(self, d) -> None:
        self.result.tail_items += len(d.bcq) if d.bcq is not None else 0

    def finish(self, outcome: WalkOutcome, stops: list[str]) -> None:
        r = self.result
        self.close_builder(outcome, stops)
        if outcome.damage:
            _note_damage(r, outcome, sum(len(u) for ref in self.store.queues(batch=True)
                                         for _, _, u in read_batch_queue(self.store, ref)))
        self.plan_carry(self.only)


def _batch_file_size(store) -> int | None:
    """The size of the store's BatchConsumeQueue files (the broker maps each at full size)."""
    sizes = {seg.size for ref in store.queues(batch=True) for seg in store.queue(ref.topic, ref.queue_id, batch=True).files}
    return max(sizes) if sizes else None


@_locked("rmqtool rebuild batchconsumequeue")
def rebuild_batchconsumequeue(store, topics: list[str] | None = None, bcq_file_size: int | None = None,
                              to_offset: int | None = None, output: Path | None = None, dry_run: bool = False,
                              check_crc: bool = True, config: DispatchConfig | None = None,
                              progress: Progress | None = None, confirm=None, workers: int | None = None,
                              skip_corrupt: bool = False, allow_truncate: bool = False, engine=None,
                              split_size: int | None = None) -> RebuildResult:
    """Rebuild the BatchConsumeQueues (all BatchCQ topics, or ``topics``) from the CommitLog, as
    ``rebuild_consumequeue`` rebuilds ConsumeQueues (same walk, refusals and install)."""
    t0 = time.perf_counter()
    check_rebuild_target(store, output, dry_run)
    config = dispatch_config(store, config)
    if topics:
        config = DispatchConfig(config.delay_levels_ms, config.index_enabled,
                                replace(config.kinds, batch_cq_topics=config.kinds.batch_cq_topics | set(topics)))
    if not config.kinds.batch_cq_topics:
        raise UsageError("no BatchCQ topic: the store has no batchconsumequeue/ queues and config/topics.json "
                         "names none (pass --topic for a topic of queue type BatchCQ)", store.root)
    job = _BcqJob(store, topics, bcq_file_size, output, dry_run)
    _rebuild(store, [job], store.commitlog.min_offset, to_offset, check_crc, progress, config,
             _walker(store, engine, workers, split_size, check_crc, progress, config), skip_corrupt)
    job.result.seconds = time.perf_counter() - t0
    job.install(confirm, allow_truncate)
    job.result.seconds = time.perf_counter() - t0
    return job.result


def _finish(result: RebuildResult, store, target: Path, build: Path, output: Path | None) -> None:
    if output is not None:
        inst.fsync_tree(build)
        return
    done = inst.install(target, build)
    result.backup = done.backup


# --- index ----------------------------------------------------------------------------------
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


class _IndexJob(_Job):
    def __init__(self, store, geometry: IndexGeometry, from_offset: int | None, to_offset: int | None,
                 output, dry_run: bool):
        self.store, self.output, self.target, self.to_offset = store, output, store.index_dir, to_offset
        if output is None and self.target.is_dir():
            inst.refuse_links_in(self.target)     # a linked index file would end up only in the backup
        r = self.result = RebuildResult("index", str(store.root), str(self.target), str(output) if output else None,
                                        dry_run, 0, 0, "", geometry={"hash_slots": geometry.hash_slots,
                                                                     "index_entries": geometry.index_entries})
        kept = _kept_index_files(store, geometry, from_offset)
        self.start = kept.seed_phy if kept.files else store.commitlog.min_offset
        r.range_start = self.start
        existing = set(store.index_files())
        self.kept = kept.files
        self.others = ([p for p in self.target.iterdir() if p.is_file() and p not in existing]
                       if self.target.is_dir() else [])
        r.files_kept = [p.name for p in kept.files] + [p.name for p in self.others]
        r.files_replaced = sorted(p.name for p in existing - set(kept.files))
        self.geometry = geometry
        self.names = index_file_names([p.name for p in kept.files])
        self._open_build(dry_run)
        self.builder = IndexBuilder(geometry.hash_slots, geometry.index_entries, self._sink,
                                    kept.seed_phy, kept.seed_ts, kept.skip, open_file=self._open_file)

    def _open_file(self) -> IndexFileWriter:
        name = next(self.names)
        self.result.files_written.append({"path": name, "size": self.geometry.file_size})
        return IndexFileWriter(None if self.build is None else self.build / name, self.geometry)

    def _sink(self, image: IndexFileImage) -> None:
        """A file is complete (``IndexFileWriter.close`` wrote it)."""

    def on_dispatch(self, d) -> None:
        self.builder.add(d.key_hash, d.key_phy_offset, d.key_store_timestamp, d.record_phy_offset)

    def on_tail(self, d) -> None:
        self.result.tail_items += len(d.key_hash)

    def finish(self, outcome: WalkOutcome, stops: list[str]) -> None:
        r = self.result
        self.builder.finish()
        r.records, r.range_end, r.end_kind = outcome.as_tuple()
        r.warnings += stops
        r.entries = self.builder.entries
        if outcome.damage:
            _note_damage(r, outcome, _current_entries(self.store))
        if self.to_offset is not None and r.end_kind == "to-offset":
            r.warnings.append(f"records from {self.to_offset} on are not indexed (--to-offset)")

    def carry(self) -> None:
        for p in self.kept + self.others:
            inst.link_or_copy(p, self.build / p.name)


@_locked("rmqtool rebuild index")
def rebuild_index(store, geometry: IndexGeometry, from_offset: int | None = None,
                  to_offset: int | None = None, output: Path | None = None, dry_run: bool = False,
                  check_crc: bool = True, config: DispatchConfig | None = None,
                  progress: Progress | None = None,
                  confirm: Callable[[RebuildResult], bool] | None = None,
                  workers: int | None = None, skip_corrupt: bool = False,
                  allow_truncate: bool = False, engine=None, split_size: int | None = None) -> RebuildResult:
    """Rebuild the IndexFiles (those wholly below ``from_offset`` are kept) from the CommitLog.

    Each IndexFile is written as soon as it fills; the plan, the confirmation and an early
    stop of the walk are handled as by ``rebuild_consumequeue``."""
    t0 = time.perf_counter()
    check_rebuild_target(store, output, dry_run)
    config = dispatch_config(store, config)
    job = _IndexJob(store, geometry, from_offset, to_offset, output, dry_run)
    _rebuild(store, [job], job.start, to_offset, check_crc, progress, config,
             _walker(store, engine, workers, split_size, check_crc, progress, config), skip_corrupt)
    job.result.seconds = time.perf_counter() - t0
    job.install(confirm, allow_truncate)
    job.result.seconds = time.perf_counter() - t0
    return job.result


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


# --- both, one pass -----------------------------------------------------------------------------
@_locked("rmqtool rebuild all")
def rebuild_all(store, geometry: IndexGeometry, cq_file_size: int | None = None,
                to_offset: int | None = None, output: Path | None = None, dry_run: bool = False,
                check_crc: bool = True, config: DispatchConfig | None = None,
                progress: Progress | None = None, confirm=None,
                workers: int | None = None, skip_corrupt: bool = False,
                allow_truncate: bool = False, drop_filter_bitmaps: bool = False, engine=None,
                split_size: int | None = None, bcq_file_size: int | None = None) -> tuple:
    """Everything the store derives from its CommitLog, from one pass over it: ConsumeQueues,
    IndexFiles, the BatchConsumeQueues of BatchCQ topics (5.x), a 4.x store's ConsumeQueueExt
    files; then the timer wheel from the timer log (a store with ``timerlog/``). Each is built as
    the walk goes (memory does not grow with the store), then installed crash-safely on its own
    (``output``: each in its directory there, the wheel as ``output/timerwheel``). The
    ConsumeQueue and index installs run at the same time unless ``confirm`` asks a person (one
    prompt, then the other). A walk that stops before the last data is refused before anything
    is installed (see ``rebuild_consumequeue``). Returns (consumequeue, index[, batchconsumequeue]
    [, timer wheel]) results; the rebuilds' ``seconds`` is the whole run."""
    t0 = time.perf_counter()
    check_rebuild_target(store, output, dry_run)
    config = dispatch_config(store, config)
    check_queue_kinds(store, None, config)
    from rmqtool.ops.rebuild_ext import ExtRebuild, check_cq_ext
    ext = (ExtRebuild(store, output / "consumequeue_ext" if output else None, dry_run)
           if check_cq_ext(store, True, drop_filter_bitmaps) else None)
    jobs: list[_Job] = []
    try:
        cq = _CqJob(store, None, None, cq_file_size, output / "consumequeue" if output else None, dry_run)
        jobs.append(cq)
        ix = _IndexJob(store, geometry, None, to_offset, output / "index" if output else None, dry_run)
        jobs.append(ix)
        bcq = (_BcqJob(store, None, bcq_file_size, output / "batchconsumequeue" if output else None, dry_run)
               if config.kinds.batch_cq_topics else None)
        if bcq is not None:
            jobs.append(bcq)
    except BaseException:
        for job in jobs:
            job.discard()
        if ext is not None:
            ext.discard()
        raise
    # finished in this order: the index's slot table is written (its writeback started) while the
    # ConsumeQueue's last units are placed
    jobs = [ix, cq] + ([bcq] if bcq is not None else [])
    try:
        outcome = _rebuild(store, jobs, store.commitlog.min_offset, to_offset, check_crc, progress, config,
                           _walker(store, engine, workers, split_size, check_crc, progress, config), skip_corrupt)
        if ext is not None:                                # addresses into the new ext files (rebuild_ext)
            ext.run(cq.build, cq.builder.queue_keys())
            cq.result.warnings += ext.warnings
            cq.result.recovered += ext.recovered
    except BaseException:
        if ext is not None:
            ext.discard()
        raise
    results = [cq.result, ix.result] + ([bcq.result] if bcq is not None else [])
    try:
        if (outcome.damage and not outcome.skipped or outcome.uncovered) and not allow_truncate and not dry_run:
            refuse_truncation(results)                     # the plans, then the refusal
        if output is None and confirm is not None and not getattr(confirm, "unattended", False):
            cq.install(confirm, True)                      # a person answers one prompt, then the next
            ix.install(confirm, True)
        else:
            _both(lambda: cq.install(confirm, True), lambda: ix.install(confirm, True))
        if bcq is not None:
            bcq.install(confirm, True)
        if ext is not None:
            if cq.build is None:
                ext.discard()                              # the ConsumeQueues were not installed (declined, dry run)
                if dry_run:                                # one ext unit per ConsumeQueue unit
                    cq.result.geometry.update(cq_ext_file_size=ext.file_size, cq_ext_units=cq.result.units)
            else:
                cq.result.geometry.update(ext.install(set(cq.builder.queue_keys())))
    except BaseException:
        for job in jobs:
            job.discard()
        if ext is not None:
            ext.discard()
        raise
    whole = time.perf_counter() - t0
    for r in results:
        r.seconds = whole
    wheel = _timer_wheel(store, output, dry_run, confirm)
    return tuple(results) + ((wheel,) if wheel is not None else ())


def _timer_wheel(store, output: Path | None, dry_run: bool, confirm):
    """``rebuild all``'s timer wheel: regenerated from the timer log where the store has one."""
    from rmqtool.io.timerstore import TimerStore
    from rmqtool.ops.timer import build_timerwheel
    ts = TimerStore.of(store)
    if ts is None or not ts.log_dir.is_dir():
        return None
    return build_timerwheel(store, output / ts.wheel_path.name if output is not None else None, dry_run,
                            confirm=None if output is not None else confirm)


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
