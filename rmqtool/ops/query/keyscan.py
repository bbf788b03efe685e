"""`query-key --scan --engine spark|--jobs N`: the CommitLog scan for a key as engine tasks.

Each task runs ``rmqtool.broker.indexkeys.scan_batch`` (the local scan's matcher) on its
record batches and returns only the matching offsets; the driver reads those records
back and answers like ``rmqtool.ops.query.bykey.query_key(scan=True)``. ``query_key_stores``
is the operation `query-key` runs: with or without an engine.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:                   # the executor loads only when a scan runs on one (start-up of a query)
    from rmqtool.engines import Engine


def matches_schema():
    """The rows a scan task returns (pyarrow loads only when an engine runs: the local query needs none)."""
    import pyarrow as pa
    return pa.schema([("store", pa.string()), ("phy_offset", pa.int64()), ("match", pa.string()),
                      ("scanned", pa.int64())])


class KeyScanStage:
    def __init__(self, key: str, topic: str | None, begin: int, end: int, uniq_only: bool, rollback: bool):
        self.args = (key, topic, begin, end, uniq_only, rollback)

    def __call__(self, task, batches):
        import pyarrow as pa
        from rmqtool.broker.indexkeys import scan_batch
        phy, kinds, scanned = [], [], 0
        for b in batches:
            for row, kind in scan_batch(b, *self.args):
                phy.append(int(b.phy_offset[row]))
                kinds.append(kind)
            if len(b):
                scanned += int(b.position[-1] + b.size[-1] - b.position[0])
        yield pa.RecordBatch.from_pydict({"store": [task.store] * (len(phy) + 1), "phy_offset": phy + [-1],
                                          "match": kinds + [None], "scanned": [0] * len(phy) + [scanned]},
                                         schema=matches_schema())


def query_key_stores(stores, key: str, topic: str | None = None, begin: int = 0, end: int = (1 << 63) - 1,
                     max_num: int | None = None, raw: bool = False, scan: bool = False, engine: Engine | None = None,
                     split_size: int | None = None, progress=None):
    """``query_key`` of every ``(name, Store)``: ``[(name, KeyResult)]`` in the order given. With an
    ``engine`` the CommitLog scan (``scan``) runs as its tasks, all stores in one run.
    ``progress(done, total)``: bytes scanned (in-process: of each store's scan in turn)."""
    from rmqtool.errors import UsageError
    from rmqtool.ops.query.bykey import query_key
    stores = list(stores)
    if engine is None:
        return [(name, query_key(s, key, topic, begin, end, max_num=max_num, raw=raw, scan=scan, progress=progress))
                for name, s in stores]
    if raw or not scan:
        raise UsageError(f"--engine {engine.name} / --jobs run the CommitLog scan: add --scan"
                         + (" (--raw reads the index only)" if raw else ""))
    return query_key_scan_stores(stores, key, engine, topic, begin, end, max_num, split_size=split_size,
                                 progress=progress)


def query_key_scan(store, key: str, engine: Engine, topic: str | None = None, begin: int = 0,
                   end: int = (1 << 63) - 1, max_num: int | None = None, uniq_only: bool = False,
                   rollback: bool = False, split_size: int | None = None, progress=None):
    """``query_key(..., scan=True)`` with the scan on ``engine``; returns a ``KeyResult``."""
    return query_key_scan_stores([("store", store)], key, engine, topic, begin, end, max_num, uniq_only,
                                 rollback, split_size, progress)[0][1]


def query_key_scan_stores(stores, key: str, engine: Engine, topic: str | None = None, begin: int = 0,
                          end: int = (1 << 63) - 1, max_num: int | None = None, uniq_only: bool = False,
                          rollback: bool = False, split_size: int | None = None, progress=None):
    """The key scan over several ``(name, Store)`` in one engine job: ``[(name, KeyResult)]``
    in the order given; ``max_num`` applies to each store."""
    from rmqtool.errors import UsageError
    from rmqtool.ops.query.bykey import Hit, KeyResult, store_topics
    from rmqtool.records.single import RecordReader
    if not key:
        raise UsageError("the key is empty")
    if max_num is not None and max_num <= 0:
        raise UsageError(f"--limit must be positive, not {max_num}")
    from rmqtool.engines import DEFAULT_SPLIT_SIZE, plan_tasks
    tasks = plan_tasks(list(stores), split_size or DEFAULT_SPLIT_SIZE)
    table = engine.run(tasks, KeyScanStage(key, topic, begin, end, uniq_only, rollback), matches_schema(),
                       progress=progress)
    names = table.column("store").to_pylist()
    scanned = table.column("scanned").to_pylist()
    phys = table.column("phy_offset").to_pylist()
    kinds = table.column("match").to_pylist()
    out = []
    for name, store in stores:
        res = KeyResult()
        res.topics = [topic] if topic is not None else store_topics(store)
        res.scanned_bytes = sum(n for sn, n in zip(names, scanned) if sn == name)
        found = {}
        reader = RecordReader(store)
        try:
            for sn, phy, kind in zip(names, phys, kinds):
                if sn != name or phy < 0 or phy in found:
                    continue
                batch = reader.read(phy)
                if batch is not None:
                    found[phy] = Hit(batch, 0, phy, kind, False)
        finally:
            reader.close()
        hits = sorted(found.values(), key=lambda h: -h.phy_offset)
        res.hits = hits[:max_num] if max_num is not None else hits
        out.append((name, res))
    return out
