"""``verify``: run every check over a store, read-only, and assemble the report.

Order: CommitLog walk (record table, in chunks) -> every ConsumeQueue (dispatch frontier)
-> the broker's recovery walk (valid end) -> CQ and index checks (shallow, one file at a
time; deep: units and entries routed to the chunk of records they point into) -> the
joins, chunk by chunk -> checkpoint -> forecast. The index checks, which need no record, run
in a thread during the walk (``IndexPass``); their findings enter the report at their place.
Memory follows the chunk, one queue and one index file, not the store (``chunks``). ``--only``
limits which kinds *report* findings; the CommitLog walk and the queues are still read because
the cross-checks and the forecast need them.
"""
from __future__ import annotations


from dataclasses import dataclass, field

import numpy as np

from rmqtool.io.fileio import how_link_is_read
from rmqtool.io.checkpoint import CheckpointValues
from rmqtool.io.store import UNREADABLE
from rmqtool.errors import EXIT_FINDINGS, EXIT_OK, StoreLayoutError, UsageError
from rmqtool.ops.verify.checkpoint import check_checkpoint, read_checkpoint_first
from rmqtool.ops.verify.chunks import RoutedRows, SpillDir
from rmqtool.ops.verify.commitlog import CommitLogVerifier, valid_end_from_walk
from rmqtool.ops.verify.consumequeue_ext import ext_layout_checks, ext_unit_checks
from rmqtool.ops.verify.consumequeue import (UNIT_ROW, QueueUnits, not_dispatched_finding, read_queue,
                                         shallow_unit_checks, unit_rows)
from rmqtool.ops.verify.findings import ERROR, INFO, WARNING, FindingLog, FindingSink
from rmqtool.broker.queuekinds import detect as detect_queue_kinds
from rmqtool.ops.verify.joins import JoinContext, JoinState, join_chunks, join_threads
from rmqtool.ops.verify.queuekinds import batch_unit_checks, is_light_queue, lmq_unit_checks
from rmqtool.ops.verify.timer import check_timer_store
from rmqtool.ops.verify.rocksdb_cq import check_rocksdb_cq
from rmqtool.ops.verify.forecast import forecast, identify, recovery_walk, truncated_units
from rmqtool.ops.verify.index import ENTRY_ROW, check_index_file, entry_rows, not_indexed_finding

#: bytes of ConsumeQueue units (``QueueUnits``) the frontier pass keeps for the checks, so that those
#: queues are read once; queues past it are read again (memory stays bounded at any store size)
QUEUE_KEEP_BYTES = 64 << 20

KINDS = ("commitlog", "consumequeue", "index", "checkpoint")
LEVELS = ("shallow", "deep")
FAIL_ON = ("error", "warning")
_SEVERITY_KIND = {"commitlog": "commitlog", "dispatch": "commitlog", "cq": "consumequeue", "index": "index",
                  "checkpoint": "checkpoint"}


@dataclass
class VerifyOptions:
    level: str = "shallow"
    only: tuple[str, ...] = KINDS
    topic: str | None = None
    queue_id: int | None = None
    limit_per_check: int | None = 1000
    chunk_records: int | None = None     # records per join chunk (default ``chunks.CHUNK_RECORDS``)

    def validate(self) -> None:
        if self.level not in LEVELS:
            raise UsageError(f"--level must be one of {', '.join(LEVELS)}, not {self.level!r}")
        for kind in self.only:
            if kind not in KINDS:
                raise UsageError(f"--only takes {', '.join(KINDS)}, not {kind!r}")
        if self.queue_id is not None and self.topic is None:
            raise UsageError("--queue needs --topic")


@dataclass
class VerifyReport:
    store: str
    options: VerifyOptions
    sink: FindingSink
    summary: dict = field(default_factory=dict)
    forecast: dict = field(default_factory=dict)
    #: the forecast's ``forecast.Pending`` gatherings by name (lost, not_dispatched, not_indexed): their
    #: per-queue counts (``by_queue``) are the report's lag measures; not part of ``as_dict``
    pending: dict = field(default_factory=dict, repr=False)

    @property
    def findings(self):
        return self.sink.sorted()

    def exit_code(self, fail_on: str = "error") -> int:
        if self.sink.total(ERROR):
            return EXIT_FINDINGS
        if fail_on == "warning" and self.sink.total(WARNING):
            return EXIT_FINDINGS
        return EXIT_OK

    def as_dict(self) -> dict:
        return {"store": self.store, "level": self.options.level, "only": list(self.options.only),
                "topic": self.options.topic, "queue_id": self.options.queue_id,
                "summary": self.summary, "forecast": self.forecast,
                "findings": [f.as_dict() for f in self.findings]}


def _geometry(store, sink: FindingSink):
    try:
        return store.index_geometry
    except StoreLayoutError as exc:
        if store.requested_index_geometry is not None:
            return store.requested_index_geometry
        sink.add("index.file-size", exc.path, None, exc.message + "; index files not checked", excerpt=False)
        return None


#: how many times verify reads a store again when ``write`` swapped in a new root meanwhile
READ_ATTEMPTS = 4


def verify(store, options: VerifyOptions | None = None, progress=None, engine=None,
           split_size: int | None = None, prepared=None) -> VerifyReport:
    """Verify a store without writing anything; findings go into the report, never raised.

    ``engine`` (an ``rmqtool.engines.Engine``) runs the CommitLog walk and the per-record
    checks as tasks over ``split_size`` byte ranges; the report is the same as without it.
    ``prepared``: that walk already run for this store (``engine_walk.fleet_walk``: a fleet's
    walks as one engine run); it is used by the first read of the store.

    ``rmqtool write`` replaces the whole root at once (``rmqtool.io.install``); a run during
    which that happened read parts of two versions, so it is repeated on the new root, up
    to ``READ_ATTEMPTS`` runs; ``summary["reread_after_replace"]`` counts the repeats and
    ``commitlog.replaced`` is reported when even the last run saw a replacement.
    """
    options = options or VerifyOptions()
    options.validate()
    for attempt in range(READ_ATTEMPTS):
        before = store.identity()
        if progress is not None and hasattr(progress, "restart"):
            progress.restart()
        report = _verify_once(store, options, progress, engine, split_size, prepared if attempt == 0 else None)
        if store.identity() == before:
            break
        if attempt + 1 < READ_ATTEMPTS:
            store = store.reopen()
    else:
        report.sink.add("commitlog.replaced", store.root, None,
                        f"the store root was replaced while it was read, {READ_ATTEMPTS} runs in a row: "
                        "findings may mix two versions of the store", excerpt=False)
        _count_findings(report.summary, report.sink)
    report.summary["reread_after_replace"] = attempt
    return report


def verify_stores(stores, options: VerifyOptions | None = None, progress_for=None, engine=None,
                  split_size: int | None = None):
    """``verify`` of every ``(name, Store)`` in turn: yields ``(name, report)``. With an ``engine``
    and several stores, all their CommitLog walks run first as the tasks of one engine run
    (``engine_walk.fleet_walk``). ``progress_for(store)``: a progress callable for that store's
    walk (closed, when it has ``close``, once the store is done)."""
    stores = list(stores)
    if engine is None or len(stores) < 2:
        fleet = None
    else:
        from rmqtool.ops.verify.engine_walk import fleet_walk
        fleet = fleet_walk(engine, stores, (options or VerifyOptions()).level == "deep", split_size)
    try:
        for name, store in stores:
            progress = progress_for(store) if progress_for is not None else None
            try:
                report = verify(store, options, progress=progress, engine=engine, split_size=split_size,
                                prepared=None if fleet is None else fleet.walks.get(name))
            finally:
                if hasattr(progress, "close"):
                    progress.close()
            yield name, report
    finally:
        if fleet is not None:
            fleet.close()


def _queue_bytes(qu: QueueUnits) -> int:
    """The bytes a queue's units hold (its column arrays)."""
    return sum(a.nbytes for a in (qu.offset, qu.size, qu.tags, qu.qoff, qu.file_idx, qu.position))


def _verify_once(store, options: VerifyOptions, progress, engine, split_size, prepared=None) -> VerifyReport:
    spill = SpillDir()
    try:
        return _verify_chunked(store, options, progress, engine, split_size, spill, prepared)
    finally:
        spill.close()


def _verify_chunked(store, options: VerifyOptions, progress, engine, split_size, spill: SpillDir,
                    prepared=None) -> VerifyReport:
    deep = options.level == "deep"
    owner = store.lock_owner()        # a broker, or an rmqtool writer: either is changing the store
    live = owner is not None
    checkpoint = read_checkpoint_first(store)
    sink = FindingSink(options.limit_per_check)
    muted = FindingSink(0)
    want = set(options.only)

    def out(kind):
        return sink if kind in want else muted

    # 0. symlinks inside the store: listed, never followed
    for path, dest in store.symlinks():
        sink.add("store.symlink", path, None, f"symlink to {dest!r}: {how_link_is_read(path)} (write refuses it, "
                 "rebuild carries it over as a link)", excerpt=False)

    # 0b. config files that cannot be loaded (the broker falls back to the .bak, and so does rmqtool)
    for name, value in store.config().items():
        if isinstance(value, str) and value.startswith(UNREADABLE):
            sink.add("store.config", store.config_dir / name, None,
                     f"{value[len(UNREADABLE):]}: not used (nor a readable .bak)", excerpt=False)

    # 1. CommitLog: the walk's record table, in chunks of consecutive records
    clv = CommitLogVerifier(store, out("commitlog"), deep=deep, live=live, progress=progress,
                            report_records="commitlog" in want, spill=spill, chunk_records=options.chunk_records)
    clv.check_layout()
    # 5, begun now: the index files are checked in a thread while the walk runs (their entries
    # routed to the record chunks as the walk makes them), their findings given to the sink at 5
    index_pass = IndexPass(store, deep, live, clv.chunks)
    spill.on_close(index_pass.stop)          # whatever ends this run: the thread first, then the spill
    records = clv.walk(engine, split_size, prepared)
    tid = records.topics.lookup(options.topic) if options.topic is not None else None

    # 2. the dispatch frontier: the furthest unit of every ConsumeQueue; the queues read here are kept
    #    for 4 with their findings (``FindingLog``) while they fit ``QUEUE_KEEP_BYTES``, the rest read again
    refs = list(store.queues())
    dispatch_from = 0
    min_qoffs = {}
    kept: dict[int, tuple[QueueUnits, FindingLog]] = {}
    room = QUEUE_KEEP_BYTES
    for k, ref in enumerate(refs):
        log = FindingLog()
        qu = read_queue(store, ref, log)
        min_qoffs[(ref.topic, ref.queue_id)] = qu.min_qoff
        if len(qu.offset):
            dispatch_from = max(dispatch_from, int((qu.offset + qu.size).max()))
        size = _queue_bytes(qu)
        if size <= room:
            kept[k] = (qu, log)
            room -= size
        del qu, log

    # 3. the broker's recovery walk
    replay = None
    if deep and not clv.file_changed:
        replay = lambda start: valid_end_from_walk(clv, records, start)   # noqa: E731
    walk = recovery_walk(store, dispatch_from, replay)
    end = walk["valid_end"]

    # 4. ConsumeQueue checks, one queue at a time; deep: units routed to their records' chunk
    #    (a light queue's units are checked against the records that name it, one by one)
    kinds = detect_queue_kinds(store)
    units = expired = 0
    cq_sink = out("consumequeue")
    checked_queues: list[QueueUnits] = []
    routed_units = RoutedRows("units", UNIT_ROW, records)
    truncated = []
    for k, ref in enumerate(refs):
        chosen = (options.topic is None or ref.topic == options.topic) and (
            options.queue_id is None or ref.queue_id == options.queue_id)
        if k in kept:
            qu, log = kept.pop(k)
            log.replay(cq_sink if chosen else muted)
        else:
            qu = read_queue(store, ref, cq_sink if chosen else muted)
        cut = truncated_units(qu, end)
        if cut is not None:
            truncated.append(cut)
        if not chosen:
            continue
        units += len(qu.offset)
        expired += shallow_unit_checks(qu, store, end, cq_sink, live)
        qu.ext = ext_unit_checks(qu, store, cq_sink)
        if deep and is_light_queue(kinds, qu.topic):
            lmq_unit_checks(qu, store, kinds, end, cq_sink)
        elif deep:
            live_units = qu.offset >= store.commitlog.min_offset
            routed_units.add(unit_rows(qu, len(checked_queues))[live_units], qu.offset[live_units])
            checked_queues.append(_queue_header(qu))
    ext_layout_checks(store, cq_sink, options.topic, options.queue_id)
    truncated.sort(key=lambda t: (t["topic"], t["queue_id"]))
    batch_offsets = np.zeros(0, np.int64)
    batch_tids = np.asarray([t for t in (records.topics.lookup(n) for n in kinds.batch_cq_topics)
                             if t is not None and t >= 0], dtype=np.int32)
    if deep:                     # BatchConsumeQueues: each unit against its record
        parts = [batch_unit_checks(store, ref, end, cq_sink) for ref in store.queues(batch=True)
                 if (options.topic is None or ref.topic == options.topic)]
        batch_offsets = np.sort(np.concatenate(parts)) if parts else batch_offsets

    # 5. index files (checked during the walk, ``IndexPass``): their findings, states and routed entries
    ix_sink = out("index")
    geometry, states, routed_entries = index_pass.result(ix_sink)
    usable = [s for s in states if s.usable]
    frontier = max((s.header.end_phy_offset for s in usable), default=None)
    lo = min((s.header.begin_phy_offset for s in usable), default=0)

    # 6. the joins, one chunk of records (one CommitLog range) at a time: here, or as engine tasks
    physic_ts = checkpoint.physic_msg_timestamp if isinstance(checkpoint, CheckpointValues) else None
    ctx = JoinContext(store, records.topics, records.files, deep, frozenset(want), options.limit_per_check, end,
                      dispatch_from, min_qoffs, tid, options.queue_id, batch_tids, batch_offsets, checked_queues,
                      states, geometry, bool(usable), lo, frontier, physic_ts, clv.damaged)
    joined = JoinState.start(ctx, sink)
    parts = None
    if engine is not None:
        from rmqtool.ops.verify.engine_joins import engine_joins
        parts = engine_joins(engine, ctx, records, routed_units, routed_entries)
    if parts is None:
        chunks = ((records.chunk(k), routed_units.take(k), routed_entries.take(k)) for k in range(len(records)))
        join_chunks(ctx, joined, chunks, threads=join_threads(len(records)))
    else:
        try:
            for part in parts:
                joined.merge(part)
        finally:
            parts.close()             # the staging directory goes even when a merge fails
    times, lost, not_dispatched, not_indexed = joined.times, joined.lost, joined.not_dispatched, joined.not_indexed
    if deep:
        not_dispatched_finding(not_dispatched, dispatch_from, cq_sink)
        if usable:
            joined.past_end.report(geometry, end, ix_sink)
            not_indexed_finding(not_indexed, frontier, ix_sink)
    entries = sum(s.count for s in states)

    # 7. checkpoint
    index_end_ts = max((s.header.end_timestamp for s in usable), default=None)
    cp = check_checkpoint(store, checkpoint, times, end, index_end_ts, out("checkpoint"))
    rocks = check_rocksdb_cq(store, out("consumequeue"))     # a RocksDB ConsumeQueue's own tables
    timer = check_timer_store(store, out("commitlog"), end)      # a 5.x timer store, when there is one

    # 8. forecast and summary
    for pending in (lost, not_dispatched, not_indexed):
        identify(store, pending.listing)
    fc = forecast(store, walk, truncated, states, cp, dispatch_from, frontier, not_dispatched, not_indexed, lost)
    moves = consumer_moves(store, fc)
    if moves is not None:                # only stores with a consumerOffset.json have the key
        fc["consumer_restart"] = moves
    summary = {
        "live": live,
        "lock_owner": owner.describe() if owner is not None else None,
        "commitlog": {"files": len(store.commitlog.files), "bytes": clv.bytes, "records": clv.records,
                      "carved_records": clv.carved, "valid_end": end},
        "consumequeue": {"queues": sum(1 for ref in refs if (options.topic is None or ref.topic == options.topic)
                                       and (options.queue_id is None or ref.queue_id == options.queue_id)),
                         "units": units, "expired_units": expired},
        "index": {"files": len(states), "entries": entries},
        "checkpoint": {"present": cp is not None},
        **({"timer": timer} if timer is not None else {}),
        **({"rocksdb_consumequeue": rocks} if rocks is not None else {}),
    }
    _count_findings(summary, sink)
    return VerifyReport(str(store.root), options, sink, summary, fc,
                        pending={"lost": lost, "not_dispatched": not_dispatched, "not_indexed": not_indexed})


class IndexPass:
    """Step 5 of a verify, run in a thread from the start of the CommitLog walk: every index file's
    shallow checks, one file at a time; deep: its entries routed to their records' chunk as the walk
    makes the chunks (``RoutedRows.add_during_walk``; the routing waits for the walk where it must).
    The findings are kept (``FindingLog``) and given to the report's sink by ``result``, at the point
    of the run where the checks used to run after the walk: the report is the same. ``DURING_WALK``
    False: the thread starts in ``result``, after the walk (the order of the sequential run, which
    the tests compare with)."""

    DURING_WALK = True

    def __init__(self, store, deep: bool, live: bool, chunks):
        import threading
        self.store, self.deep, self.live = store, deep, live
        self.log = FindingLog()
        self.routed = RoutedRows("entries", ENTRY_ROW, chunks)
        self.geometry = None
        self.states: list = []
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="rmqtool-verify-index", daemon=True)
        if self.DURING_WALK:
            self._thread.start()

    def _run(self) -> None:
        try:
            store, routed = self.store, self.routed
            self.geometry = _geometry(store, self.log) if store.index_files() else None
            if self.geometry is None:
                return

            def router(file_no):
                def route(entries, first):
                    rows = entry_rows(entries, first, file_no)
                    routed.add_during_walk(rows, rows["phy"])
                return route
            for path in store.index_files():
                self.states.append(check_index_file(path, self.geometry, self.log, self.live,
                                                    on_entries=router(len(self.states)) if self.deep else None))
        except BaseException as exc:       # noqa: BLE001 - raised in the verify's thread by ``result``
            self._error = exc

    def join(self) -> None:
        if self._thread.ident is not None:
            self._thread.join()

    def stop(self) -> None:
        """End the thread (a walk that failed leaves it waiting for chunks: it gives up)."""
        self.routed.chunks.abandon()
        self.join()

    def result(self, sink: FindingSink) -> tuple:
        """(geometry, index file states, routed entries), the findings given to ``sink``."""
        if self._thread.ident is None:
            self._thread.start()
        self.join()
        if self._error is not None:
            raise self._error
        self.log.replay(sink)
        return self.geometry, self.states, self.routed


def _queue_header(qu: QueueUnits) -> QueueUnits:
    """The queue without its units (what a chunk's share of them is checked under)."""
    empty = np.zeros(0, np.int64)
    return QueueUnits(qu.topic, qu.queue_id, qu.paths, empty, empty, empty, empty, empty, empty,
                      qu.min_qoff, qu.end_qoff, qu.ext)


def _count_findings(summary: dict, sink: FindingSink) -> None:
    """The summary's finding totals: by severity, by check, and per kind."""
    summary["findings"] = {sev: sink.total(sev) for sev in (ERROR, WARNING, INFO)}
    summary["findings_not_listed"] = sink.suppressed()
    summary["checks"] = {f"{check}:{sev}": n for (check, sev), n in sorted(sink.counts.items())}
    for kind in set(_SEVERITY_KIND.values()):
        summary[kind]["findings"] = {}
    for prefix, kind in _SEVERITY_KIND.items():
        for severity, n in sink.by_kind.get(prefix, {}).items():
            summary[kind]["findings"][severity] = summary[kind]["findings"].get(severity, 0) + n


def consumer_moves(store, fc: dict) -> list[dict] | None:
    """The committed offsets the restart this forecast predicts moves (``ops/consumers.restart_moves`` on
    the forecast's valid end, without walking the CommitLog again); None without a consumerOffset.json."""
    from rmqtool.ops.consumers import forecast_restart, restart_moves
    return restart_moves(store, forecast_restart(store, fc))
