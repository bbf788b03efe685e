"""`stats`: what a store holds, per topic, per queue, per CommitLog file and over time — messages,
bytes, first/last store time, write rate. One walk of the CommitLog (``records.scan``), columns
aggregated per batch with numpy; memory grows with the number of queues and time buckets only."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rmqtool.ops.verify.records import TopicTable, per_queue
from rmqtool.records.scan import FileEnd, RecordBatch, walk_progress, walk_store

BUCKETS = {"minute": 60_000, "hour": 3_600_000, "day": 86_400_000}
#: ``by="auto"`` (the report's write rate): buckets of the first of these sizes that keeps the store's
#: time span in at most ``AUTO_MAX_BUCKETS`` buckets, counted per topic too. Each size divides the next
#: and buckets start at multiples of their size, so coarsening adds whole buckets: the counts are exact.
AUTO_STEPS = (10, 100, 1_000, 5_000, 10_000, 30_000, 60_000, 300_000, 600_000, 1_800_000, 3_600_000, 21_600_000,
              86_400_000, 604_800_000)
AUTO_MAX_BUCKETS = 120
#: the kinds of row ``StoreStats.rows`` returns, in its order
ROW_KINDS = ("topic", "queue", "file", "bucket", "total")


@dataclass
class _Acc:
    messages: int = 0
    bytes: int = 0
    first: int | None = None
    last: int | None = None

    def add(self, n: int, b: int, lo: int, hi: int) -> None:
        self.messages += n
        self.bytes += b
        self.first = lo if self.first is None else min(self.first, lo)
        self.last = hi if self.last is None else max(self.last, hi)

    def row(self) -> dict:
        span = (self.last - self.first) / 1000 if self.first is not None and self.last > self.first else None
        return {"messages": self.messages, "bytes": self.bytes, "first_store_time": self.first,
                "last_store_time": self.last,
                "messages_per_second": round(self.messages / span, 3) if span else None}


@dataclass
class StoreStats:
    store: str
    queues: dict = field(default_factory=dict)      # (topic, queue id) -> _Acc
    files: list = field(default_factory=list)       # per CommitLog file
    buckets: dict = field(default_factory=dict)     # bucket start -> [messages, bytes]
    bucket_ms: int | None = None
    auto: bool = False                              # by="auto": bucket_ms grows with the span walked
    topic_buckets: dict | None = None               # by="auto": (bucket start, topic) -> [messages, bytes]
    total: _Acc = field(default_factory=_Acc)
    current_file: _Acc = field(default_factory=_Acc, repr=False)    # the file being walked

    def topics(self) -> dict:
        """topic -> (its queues' counts added up, its queue count)"""
        out: dict = {}
        for (t, _), acc in self.queues.items():
            into, n = out.get(t, (_Acc(), 0))
            _merge_acc(into, acc)
            out[t] = (into, n + 1)
        return out

    def rows(self) -> list[dict]:
        """Every row, by kind (``ROW_KINDS``): topics (the largest first, with their ``share`` of
        the store's message bytes), queues, CommitLog files, time buckets, the total."""
        topics = sorted(self.topics().items(), key=lambda item: (-item[1][0].bytes, item[0]))
        out = []
        for t, (a, n) in topics:
            counts = a.row()
            share = round(a.bytes / self.total.bytes, 4) if self.total.bytes else None
            out.append({"kind": "topic", "store": self.store, "topic": t, "queues": n,
                        "messages": counts.pop("messages"), "bytes": counts.pop("bytes"), "share": share, **counts})
        out += [{"kind": "queue", "store": self.store, "topic": t, "queue_id": q, **a.row()}
                for (t, q), a in sorted(self.queues.items())]
        out += [{"kind": "file", "store": self.store, **f} for f in self.files]
        out += [{"kind": "bucket", "store": self.store, "bucket_start": b, "bucket_ms": self.bucket_ms,
                 "messages": v[0], "bytes": v[1]} for b, v in sorted(self.buckets.items())]
        out.append({"kind": "total", "store": self.store, "topics": len(topics), "queues": len(self.queues),
                    **self.total.row()})
        return out

    def add_batch(self, batch: RecordBatch, topics: TopicTable) -> None:
        """Count one record batch of the walk (into the file being walked)."""
        if not len(batch):
            return
        tid = topics.topic_ids(batch).astype(np.int64)
        size = np.asarray(batch.size, dtype=np.int64)
        ts = np.asarray(batch.store_timestamp, dtype=np.int64)
        for t, q, c, by_, l_, h_ in per_queue(tid, batch.queue_id, ts, size):
            self.queues.setdefault((topics.names[t], q), _Acc()).add(c, by_, l_, h_)
        batch_bytes, tmin, tmax = int(size.sum()), int(ts.min()), int(ts.max())
        self.total.add(len(batch), batch_bytes, tmin, tmax)
        self.current_file.add(len(batch), batch_bytes, tmin, tmax)
        if self.auto:                   # wide enough for the span with this batch, before counting it: every
            self.coarsen(auto_step(self.total.last - self.total.first))     # bucket then lies in that span
        if self.bucket_ms:
            bstart = ts // self.bucket_ms * self.bucket_ms
            starts, binv = np.unique(bstart, return_inverse=True)
            for s_, c, by_ in zip(starts.tolist(), np.bincount(binv).tolist(),
                                  np.bincount(binv, weights=size).astype(np.int64).tolist()):
                cur = self.buckets.setdefault(s_, [0, 0])
                cur[0] += c
                cur[1] += by_
            if self.topic_buckets is not None:
                pair = (bstart // AUTO_STEPS[0] << 24) | tid       # bucket starts are multiples of the first step
                pairs, pinv = np.unique(pair, return_inverse=True)
                for p_, c, by_ in zip(pairs.tolist(), np.bincount(pinv).tolist(),
                                      np.bincount(pinv, weights=size).astype(np.int64).tolist()):
                    cur = self.topic_buckets.setdefault(((p_ >> 24) * AUTO_STEPS[0], topics.names[p_ & 0xFFFFFF]), [0, 0])
                    cur[0] += c
                    cur[1] += by_

    def coarsen(self, at_least: int = 0) -> None:
        """by="auto": the next bucket size of ``AUTO_STEPS`` while there are more than ``AUTO_MAX_BUCKETS``
        buckets (or the size is below ``at_least``); every count is kept, added into its wider bucket."""
        size = self.bucket_ms
        while size < AUTO_STEPS[-1] and (size < at_least or (self.buckets and (max(self.buckets) - min(self.buckets))
                                                             // size + 1 > AUTO_MAX_BUCKETS)):
            size = next(s for s in AUTO_STEPS if s > size)
        if size == self.bucket_ms:
            return
        self.bucket_ms = size
        for name in ("buckets", "topic_buckets"):
            old, new = getattr(self, name), {}
            if old is None:
                continue
            for key, (c, by_) in old.items():
                key = key // size * size if name == "buckets" else (key[0] // size * size, key[1])
                cur = new.setdefault(key, [0, 0])
                cur[0] += c
                cur[1] += by_
            setattr(self, name, new)

    def end_file(self, path: str, file_size: int, position: int, kind: str) -> None:
        """The walked file ends (at ``position``, how: ``kind``): its row, then the next file."""
        self.files.append({"file": path, "file_size": file_size, "data_end": position,
                           "fill": round(position / file_size, 4) if file_size else None,
                           "end": kind, **self.current_file.row()})
        self.current_file = _Acc()

    def merge(self, part: "StoreStats") -> None:
        """Add the counts of a later part of the same walk (an engine task's) to these."""
        for qk, acc in part.queues.items():
            _merge_acc(self.queues.setdefault(qk, _Acc()), acc)
        if self.auto:                   # both to the size for the span of the two: their buckets lie in it
            lo = min(x for x in (self.total.first, part.total.first) if x is not None) if part.total.messages else None
            hi = max(x for x in (self.total.last, part.total.last) if x is not None) if part.total.messages else None
            size = max(self.bucket_ms, part.bucket_ms, auto_step(hi - lo) if lo is not None else 0)
            part.coarsen(size)
            self.coarsen(size)
        for b, (c, by_) in part.buckets.items():
            cur = self.buckets.setdefault(b, [0, 0])
            cur[0] += c
            cur[1] += by_
        for b, (c, by_) in (part.topic_buckets or {}).items():
            cur = self.topic_buckets.setdefault(b, [0, 0])
            cur[0] += c
            cur[1] += by_
        _merge_acc(self.total, part.total)
        _merge_acc(self.current_file, part.current_file)


def auto_step(span_ms: int) -> int:
    """The first of ``AUTO_STEPS`` that cuts a span of ``span_ms`` into at most ``AUTO_MAX_BUCKETS`` buckets
    (wherever the span starts: a span of n steps touches at most n + 2 buckets)."""
    return next((s for s in AUTO_STEPS if span_ms // s + 2 <= AUTO_MAX_BUCKETS), AUTO_STEPS[-1])


def _merge_acc(into: _Acc, acc: _Acc) -> None:
    if acc.messages:
        into.add(acc.messages, acc.bytes, acc.first, acc.last)


def new_stats(name: str, by: str | None) -> StoreStats:
    """Empty counts of store ``name``, per time bucket as ``by`` says (None, a ``BUCKETS`` name, or "auto")."""
    if by == "auto":
        return StoreStats(name, bucket_ms=AUTO_STEPS[0], auto=True, topic_buckets={})
    return StoreStats(name, bucket_ms=BUCKETS[by] if by else None)


def store_stats(store, name: str, by: str | None = None, walked=None) -> StoreStats:
    """One sequential walk of the store's CommitLog. ``walked(path, position)``: called after
    each record batch with where the walk is."""
    st = new_stats(name, by)
    topics = TopicTable()
    for item in walk_store(store):
        if isinstance(item, RecordBatch):
            st.add_batch(item, topics)
            if walked is not None:
                walked(item.path, item.buf_base + len(item.buf))
        elif isinstance(item, FileEnd):
            st.end_file(item.path, item.file_size, item.position, item.kind)
    return st


class StatsStage:
    """Per engine task: the counts of its records, pickled (aggregates only: small)."""

    def __init__(self, by: str | None):
        self.by = by

    def __call__(self, task, batches):
        import pickle
        import pyarrow as pa
        part, topics = new_stats(task.store, self.by), TopicTable()
        for b in batches:
            part.add_batch(b, topics)
        yield pa.RecordBatch.from_pylist([{"task": task.task_id, "part": pickle.dumps(part, protocol=5)}],
                                         schema=_part_schema())


def _part_schema():
    import pyarrow as pa
    return pa.schema([("task", pa.int64()), ("part", pa.binary())])


def stats_with_engine(engine, stores, by: str | None = None, split_size: int | None = None,
                      progress=None) -> list[StoreStats]:
    """``store_stats`` of every ``(name, Store)`` with the walks of all stores as the tasks of one
    engine run; each file's tasks form one sequential walk (``engines.check_chains``), so the
    counts are those of ``store_stats``. A file no task covers (an empty one) is walked here."""
    import pickle
    from rmqtool.engines import DEFAULT_SPLIT_SIZE, file_ends, plan_tasks
    stores = list(stores)
    tasks = [t for t in plan_tasks(stores, split_size or DEFAULT_SPLIT_SIZE) if t.hi > t.lo]
    table = engine.run(tasks, StatsStage(by), _part_schema(), progress=progress) if tasks else None
    ends = file_ends(engine.tasks, engine.statuses) if tasks else {}
    parts: dict[int, list] = {}
    if table is not None:
        for tid, blob in zip(table.column("task").to_pylist(), table.column("part").to_pylist()):
            parts.setdefault(tid, []).append(blob)
    by_file: dict[tuple[str, str], list] = {}
    for t in (engine.tasks if tasks else ()):
        by_file.setdefault(t.file_key, []).append(t)
    out = []
    for name, store in stores:
        st = new_stats(name, by)
        for seg in store.commitlog.files:
            file_tasks = sorted(by_file.get((name, str(seg.path)), ()), key=lambda t: t.lo)
            if not file_tasks:
                topics = TopicTable()
                for item in walk_store(store, files=[seg]):
                    if isinstance(item, RecordBatch):
                        st.add_batch(item, topics)
                    elif isinstance(item, FileEnd):
                        st.end_file(item.path, item.file_size, item.position, item.kind)
                continue
            for t in file_tasks:
                for blob in parts.pop(t.task_id, ()):
                    st.merge(pickle.loads(blob))
            kind, pos = ends[str(seg.path)]
            st.end_file(str(seg.path), seg.size, pos, kind)
        out.append(st)
    return out


def stats(stores, by: str | None = None, engine=None, split_size: int | None = None,
          progress=None) -> list[StoreStats]:
    """``store_stats`` of every ``(name, Store)``: walked here one after the other (``engine`` None),
    else as the tasks of one run of ``engine`` (``stats_with_engine``); the counts are the same.
    ``progress(done, total)``: CommitLog bytes walked, of all the stores'."""
    stores = list(stores)
    if engine is not None:
        return stats_with_engine(engine, stores, by, split_size, progress)
    walked = walk_progress([s for _, s in stores], progress)
    return [store_stats(s, name, by, walked) for name, s in stores]


def sparkline(values: list[int]) -> str:
    """The values as a line of block characters, lowest to highest."""
    if not values:
        return ""
    blocks = "▁▂▃▄▅▆▇█"
    top = max(values) or 1
    return "".join(blocks[min(len(blocks) - 1, v * len(blocks) // (top + 1))] for v in values)
