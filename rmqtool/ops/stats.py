"""`stats`: what a store holds, per topic and queue, per CommitLog file and over time — messages,
bytes, first/last store time, write rate. One walk of the CommitLog (``records.scan``), columns
aggregated per batch with numpy; memory grows with the number of queues and time buckets only."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rmqtool.ops.verify.records import TopicTable
from rmqtool.records.scan import FileEnd, RecordBatch, walk_store

BUCKETS = {"minute": 60_000, "hour": 3_600_000, "day": 86_400_000}


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
    total: _Acc = field(default_factory=_Acc)

    def rows(self) -> list[dict]:
        out = [{"kind": "queue", "store": self.store, "topic": t, "queue_id": q, **a.row()}
               for (t, q), a in sorted(self.queues.items())]
        out += [{"kind": "file", "store": self.store, **f} for f in self.files]
        out += [{"kind": "bucket", "store": self.store, "bucket_start": b, "bucket_ms": self.bucket_ms,
                 "messages": v[0], "bytes": v[1]} for b, v in sorted(self.buckets.items())]
        out.append({"kind": "total", "store": self.store, "queues": len(self.queues), **self.total.row()})
        return out


def store_stats(store, name: str, by: str | None = None) -> StoreStats:
    st = StoreStats(name, bucket_ms=BUCKETS[by] if by else None)
    topics = TopicTable()
    file_acc = _Acc()
    for item in walk_store(store):
        if isinstance(item, RecordBatch):
            if not len(item):
                continue
            tid = topics.topic_ids(item).astype(np.int64)
            qid = np.asarray(item.queue_id, dtype=np.int64)
            size = np.asarray(item.size, dtype=np.int64)
            ts = np.asarray(item.store_timestamp, dtype=np.int64)
            key = (tid << 32) | (qid & 0xFFFFFFFF)
            keys, inv = np.unique(key, return_inverse=True)
            n = np.bincount(inv)
            b = np.bincount(inv, weights=size).astype(np.int64)
            lo = np.full(len(keys), np.iinfo(np.int64).max)
            hi = np.full(len(keys), np.iinfo(np.int64).min)
            np.minimum.at(lo, inv, ts)
            np.maximum.at(hi, inv, ts)
            for k, c, by_, l_, h_ in zip(keys.tolist(), n.tolist(), b.tolist(), lo.tolist(), hi.tolist()):
                qk = (topics.names[k >> 32], int(np.int32(k & 0xFFFFFFFF)))
                st.queues.setdefault(qk, _Acc()).add(c, by_, l_, h_)
            batch_bytes, tmin, tmax = int(size.sum()), int(ts.min()), int(ts.max())
            st.total.add(len(item), batch_bytes, tmin, tmax)
            file_acc.add(len(item), batch_bytes, tmin, tmax)
            if st.bucket_ms:
                starts, binv = np.unique(ts // st.bucket_ms * st.bucket_ms, return_inverse=True)
                for s_, c, by_ in zip(starts.tolist(), np.bincount(binv).tolist(),
                                      np.bincount(binv, weights=size).astype(np.int64).tolist()):
                    cur = st.buckets.setdefault(s_, [0, 0])
                    cur[0] += c
                    cur[1] += by_
        elif isinstance(item, FileEnd):
            st.files.append({"file": item.path, "file_size": item.file_size, "data_end": item.position,
                             "fill": round(item.position / item.file_size, 4) if item.file_size else None,
                             "end": item.kind, **file_acc.row()})
            file_acc = _Acc()
    return st


def sparkline(values: list[int]) -> str:
    """The values as a line of block characters, lowest to highest."""
    if not values:
        return ""
    blocks = "▁▂▃▄▅▆▇█"
    top = max(values) or 1
    return "".join(blocks[min(len(blocks) - 1, v * len(blocks) // (top + 1))] for v in values)
