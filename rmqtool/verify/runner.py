"""``verify``: run every check over a store, read-only, and assemble the report.

Order: CommitLog walk (record table) -> every ConsumeQueue (dispatch frontier) ->
the broker's recovery walk (valid end) -> CQ checks -> index checks -> checkpoint ->
forecast. ``--only`` limits which kinds *report* findings; the CommitLog walk and the
queues are still read because the cross-checks and the forecast need them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rmqtool.errors import EXIT_FINDINGS, EXIT_OK, StoreLayoutError, UsageError
from rmqtool.verify.checkpoint import check_checkpoint, read_checkpoint_first
from rmqtool.verify.commitlog import CommitLogVerifier, queue_offset_findings, valid_end_from_walk
from rmqtool.verify.consumequeue import deep_unit_checks, missing_units, read_queue, shallow_unit_checks
from rmqtool.verify.findings import ERROR, INFO, WARNING, FindingSink
from rmqtool.verify.forecast import forecast, recovery_walk
from rmqtool.verify.index import check_index_file, deep_index_checks, missing_keys

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
           split_size: int | None = None) -> VerifyReport:
    """Verify a store without writing anything; findings go into the report, never raised.

    ``engine`` (an ``rmqtool.engines.Engine``) runs the CommitLog walk and the per-record
    checks as tasks over ``split_size`` byte ranges; the report is the same as without it.

    ``rmqtool write`` replaces the whole root at once (``rmqtool.install``); a run during
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
        report = _verify_once(store, options, progress, engine, split_size)
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


def _verify_once(store, options: VerifyOptions, progress, engine, split_size) -> VerifyReport:
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
        sink.add("store.symlink", path, None, f"symlink to {dest!r}: not followed (readers skip it, "
                 "writers refuse it, rebuild carries it over as a link)", excerpt=False)

    # 1. CommitLog
    clv = CommitLogVerifier(store, out("commitlog"), deep=deep, live=live, progress=progress,
                            report_records="commitlog" in want)
    clv.check_layout()
    table = clv.walk(engine, split_size)
    c = table.cols
    selected = np.ones(len(table), dtype=bool)
    tid = None
    if options.topic is not None:
        tid = table.topics.lookup(options.topic)
        selected &= c["topic_id"] == tid
        if options.queue_id is not None:
            selected &= c["queue_id"] == options.queue_id
    if deep and "commitlog" in want:
        queue_offset_findings(table, sink, tid if options.topic is not None else None, options.queue_id,
                              clv.damaged)

    # 2. every ConsumeQueue (the dispatch frontier is global)
    queues = {}
    for ref in store.queues():
        chosen = (options.topic is None or ref.topic == options.topic) and (
            options.queue_id is None or ref.queue_id == options.queue_id)
        queues[(ref.topic, ref.queue_id)] = (read_queue(store, ref, out("consumequeue") if chosen else muted),
                                             chosen)
    dispatch_from = 0
    for qu, _ in queues.values():
        if len(qu.offset):
            dispatch_from = max(dispatch_from, int((qu.offset + qu.size).max()))

    # 3. the broker's recovery walk
    replay = None
    if deep and not clv.file_changed:
        replay = lambda start: valid_end_from_walk(clv, table, start)   # noqa: E731
    walk = recovery_walk(store, dispatch_from, replay)
    end = walk["valid_end"]

    # 4. ConsumeQueue checks
    found = np.zeros(len(table), dtype=bool)
    units = expired = 0
    cq_sink = out("consumequeue")
    for qu, chosen in queues.values():
        if not chosen:
            continue
        units += len(qu.offset)
        expired += shallow_unit_checks(qu, store, end, cq_sink, live)
        if deep:
            deep_unit_checks(qu, table, store, end, cq_sink, found)
    not_dispatched = []
    if deep:
        not_dispatched = missing_units(table, found, {k: v[0] for k, v in queues.items()}, dispatch_from, end,
                                       cq_sink, selected)
    else:
        not_dispatched = _past(table, dispatch_from, end, selected, dispatchable=True)

    # 5. index files
    ix_sink = out("index")
    states = []
    geometry = _geometry(store, ix_sink) if store.index_files() else None
    if geometry is not None:
        for path in store.index_files():
            states.append(check_index_file(path, geometry, ix_sink, live))
    usable = [s for s in states if s.usable]
    frontier = max((s.header.end_phy_offset for s in usable), default=None)
    lo = min((s.header.begin_phy_offset for s in usable), default=0)
    not_indexed = []
    if usable:
        if deep:
            pairs = [deep_index_checks(s, geometry, table, store, end, ix_sink, selected) for s in usable]
            indexed = np.concatenate(pairs) if pairs else np.zeros(0, np.int64)
            not_indexed = missing_keys(table, indexed, lo, frontier, end, ix_sink, selected)
        else:
            not_indexed = _past(table, frontier + 1, end, selected, dispatchable=False)
    entries = sum(len(s.entries) for s in states)

    # 6. checkpoint
    index_end_ts = max((s.header.end_timestamp for s in usable), default=None)
    cp = check_checkpoint(store, checkpoint, table, end, index_end_ts, out("checkpoint"))

    # 7. forecast and summary
    qmap = {k: v[0] for k, v in queues.items()}
    fc = forecast(store, walk, qmap, states, cp, table, dispatch_from, frontier, not_dispatched, not_indexed)
    summary = {
        "live": live,
        "lock_owner": owner.describe() if owner is not None else None,
        "commitlog": {"files": len(store.commitlog.files), "bytes": clv.bytes, "records": clv.records,
                      "carved_records": clv.carved, "valid_end": end},
        "consumequeue": {"queues": sum(1 for _, ch in queues.values() if ch), "units": units,
                         "expired_units": expired},
        "index": {"files": len(states), "entries": entries},
        "checkpoint": {"present": cp is not None},
    }
    _count_findings(summary, sink)
    return VerifyReport(str(store.root), options, sink, summary, fc)


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


def _past(table, frontier: int, end: int, selected, dispatchable: bool) -> list[int]:
    """Shallow-level listing of records in [frontier, end) (no per-key join)."""
    from rmqtool.dispatch import goes_to_consumequeue, goes_to_index
    c = table.cols
    if not len(table):
        return []
    mask = selected & ~c["carved"] & (c["phy"] >= frontier) & (c["phy"] + c["size"] <= end)
    if dispatchable:
        mask &= goes_to_consumequeue(c["tx"])
    else:
        mask &= goes_to_index(c["tx"])
    return [int(i) for i in np.flatnonzero(mask)]
