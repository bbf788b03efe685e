"""The joins of one chunk of records (one CommitLog range) with what was routed to it.

``JoinContext`` holds what every chunk's joins read besides the chunk itself (valid end,
frontiers, queue headers, index file states, the selection): small, the same for every
chunk. ``JoinState`` gathers what the joins find (findings, record times, the pending
listings, index entries past the end, the queue offsets carried); ``join_chunk`` adds one
chunk to it. The sequential path feeds one state chunk after chunk; engine tasks
(``rmqtool.ops.verify.engine_joins``) each give a fresh state for their chunk, and the driver
``merge``s them in chunk order into the one the sequential path would have gathered.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rmqtool.ops.verify.checkpoint import RecordTimes
from rmqtool.ops.verify.chunks import runs
from rmqtool.ops.verify.commitlog import QueueOffsetCheck
from rmqtool.ops.verify.consumequeue import deep_unit_checks, missing_units, queue_part
from rmqtool.ops.verify.findings import FindingSink
from rmqtool.ops.verify.forecast import Pending
from rmqtool.ops.verify.index import PastEnd, deep_index_checks, missing_keys
from rmqtool.ops.verify.queuekinds import batch_dispatched, missing_batch_units
from rmqtool.ops.verify.records import RecordTable, TopicTable


@dataclass
class JoinContext:
    """What the joins of every chunk read besides the chunk (pickled into engine tasks)."""
    store: object
    topics: TopicTable
    files: list
    deep: bool
    want: frozenset                  # the kinds whose findings are reported
    limit: int | None                # findings kept per check
    end: int                         # the CommitLog's valid end
    dispatch_from: int
    min_qoffs: dict
    tid: int | None                  # --topic's id (None: every topic)
    queue_id: int | None
    batch_tids: np.ndarray
    batch_offsets: np.ndarray
    queues: list                     # ``QueueUnits`` headers of the queues whose units were routed
    states: list                     # ``IndexFileState`` of every index file
    geometry: object
    usable: bool                     # some index file holds entries
    lo: int                          # the indexed range [lo, frontier)
    frontier: int | None
    physic_ts: int | None
    damaged: list = field(default_factory=list)

    def selected(self, table: RecordTable) -> np.ndarray:
        c = table.cols
        mask = np.ones(len(table), dtype=bool)
        if self.tid is not None:
            mask &= c["topic_id"] == self.tid
            if self.queue_id is not None:
                mask &= c["queue_id"] == self.queue_id
        return mask


@dataclass
class JoinState:
    """What the joins gather, chunk after chunk."""
    sink: FindingSink
    times: RecordTimes
    queue_offsets: QueueOffsetCheck | None
    want: frozenset                  # the kinds whose findings are kept (the others go to ``muted``)
    lost: Pending = field(default_factory=Pending)
    not_dispatched: Pending = field(default_factory=Pending)
    not_indexed: Pending = field(default_factory=Pending)
    past_end: PastEnd = field(default_factory=PastEnd)
    muted: FindingSink = field(default_factory=lambda: FindingSink(0))

    @classmethod
    def start(cls, ctx: JoinContext, sink: FindingSink | None = None, task: bool = False) -> "JoinState":
        """A state for the first chunk (``sink``: the run's), or for one engine task's chunk."""
        sink = sink if sink is not None else FindingSink(ctx.limit)
        queue_offsets = None
        if ctx.deep and "commitlog" in ctx.want:
            queue_offsets = QueueOffsetCheck(sink, ctx.tid, ctx.queue_id if ctx.tid is not None else None,
                                             ctx.damaged, skip_topics=ctx.batch_tids, keep_firsts=task)
        return cls(sink, RecordTimes(ctx.end, ctx.physic_ts), queue_offsets, ctx.want)

    def out(self, kind: str) -> FindingSink:
        return self.sink if kind in self.want else self.muted

    def merge(self, later: "JoinState") -> None:
        """Go on with ``later``, the state of the next chunk gathered on its own (an engine task)."""
        if self.queue_offsets is not None:
            self.queue_offsets.stitch(later.queue_offsets)     # the boundary: each queue's first record
        self.sink.merge(later.sink)
        self.times.merge(later.times)
        self.lost.merge(later.lost)
        self.not_dispatched.merge(later.not_dispatched)
        self.not_indexed.merge(later.not_indexed)
        self.past_end.merge(later.past_end)


#: most threads the joins use (each holds one chunk of records and what was routed to it)
MAX_JOIN_THREADS = 4


def join_threads(chunks: int) -> int:
    """Threads for joining ``chunks`` chunks: one per CPU this process may run on
    (``engines.default_jobs``), at most ``MAX_JOIN_THREADS`` and never more than there are chunks."""
    from rmqtool.engines import default_jobs
    return max(1, min(default_jobs(), MAX_JOIN_THREADS, chunks))


def join_chunks(ctx: JoinContext, state: JoinState, chunks, threads: int = 1) -> None:
    """``join_chunk`` over every (table, units, entries) of ``chunks`` (loaded in order, here),
    into ``state``. With ``threads`` > 1 the chunks are joined by a thread pool (the core's loops
    and numpy's large operations release the GIL), each into a fresh state merged in chunk order
    as an engine task's is (``JoinState.merge``): the same state, at most ``threads`` + 1 chunks
    held at once."""
    if threads <= 1:
        for table, units, entries in chunks:
            join_chunk(ctx, state, table, units, entries)
        return
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    def alone(table, units, entries) -> JoinState:
        part = JoinState.start(ctx, task=True)
        join_chunk(ctx, part, table, units, entries)
        return part

    with ThreadPoolExecutor(threads, thread_name_prefix="rmqtool-join") as pool:
        running = deque()
        try:
            for table, units, entries in chunks:
                running.append(pool.submit(alone, table, units, entries))
                del table, units, entries
                if len(running) >= threads:
                    state.merge(running.popleft().result())
            while running:
                state.merge(running.popleft().result())
        finally:
            for job in running:
                job.cancel()


def join_chunk(ctx: JoinContext, state: JoinState, table: RecordTable, units: np.ndarray,
               entries: np.ndarray) -> None:
    """Every check that joins records with units and entries, over one chunk (``units``,
    ``entries``: the rows routed to it); what it finds goes into ``state``."""
    cq_sink, ix_sink = state.out("consumequeue"), state.out("index")
    chosen = ctx.selected(table)
    state.times.add(table)
    state.lost.add(table, [int(i) for i in np.flatnonzero(chosen & (table.cols["phy"] >= ctx.end))])
    if state.queue_offsets is not None:
        state.queue_offsets.feed(table)
    if ctx.deep:
        found = np.zeros(len(table), dtype=bool)
        if len(ctx.batch_tids):       # BatchCQ topics are dispatched to their BatchConsumeQueue
            found |= np.isin(table.cols["topic_id"], ctx.batch_tids)
            missing_batch_units(table, batch_dispatched(table, ctx.batch_tids, ctx.batch_offsets), ctx.batch_tids,
                                ctx.dispatch_from, ctx.end, cq_sink, chosen)
        for q, part in _groups(_by(units, "queue"), "queue"):
            deep_unit_checks(queue_part(ctx.queues[q], part), table, ctx.store, ctx.end, cq_sink, found)
        state.not_dispatched.add(table, missing_units(table, found, ctx.min_qoffs, ctx.dispatch_from, ctx.end,
                                                      cq_sink, chosen))
    else:
        state.not_dispatched.add(table, _past(table, ctx.dispatch_from, ctx.end, chosen, dispatchable=True))
    if not ctx.usable:
        return
    if ctx.deep:
        pairs = [deep_index_checks(ctx.states[f], ctx.geometry, part, table, ctx.store, ctx.end, ix_sink, chosen,
                                   state.past_end)
                 for f, part in _groups(_by(entries, "file"), "file")]
        indexed = np.concatenate(pairs) if pairs else np.zeros(0, np.int64)
        state.not_indexed.add(table, missing_keys(table, indexed, ctx.lo, ctx.frontier, ctx.end, ix_sink, chosen))
    else:
        state.not_indexed.add(table, _past(table, ctx.frontier + 1, ctx.end, chosen, dispatchable=False))


def _by(rows: np.ndarray, key: str) -> np.ndarray:
    """Rows ordered by ``key``, keeping their order within a key (already so: no copy)."""
    keys = rows[key]
    if len(keys) < 2 or (keys[1:] >= keys[:-1]).all():
        return rows
    return rows[np.argsort(keys, kind="stable")]


def _groups(rows: np.ndarray, key: str):
    """(key value, its rows in their order) for each value present, ascending."""
    for value, lo, hi in runs(rows[key]):
        yield value, rows[lo:hi]


def _past(table, frontier: int, end: int, selected, dispatchable: bool) -> list[int]:
    """Shallow-level listing of records in [frontier, end) (no per-key join)."""
    from rmqtool.broker.dispatch import goes_to_consumequeue, goes_to_index
    c = table.cols
    if not len(table):
        return []
    mask = selected & ~c["carved"] & (c["phy"] >= frontier) & (c["phy"] + c["size"] <= end)
    if dispatchable:
        mask &= goes_to_consumequeue(c["tx"])
    else:
        mask &= goes_to_index(c["tx"])
    return [int(i) for i in np.flatnonzero(mask)]
