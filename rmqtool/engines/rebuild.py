"""`rebuild --engine spark|local`: the CommitLog scan and dispatch run as engine tasks.

``engine_walker`` plugs into ``rmqtool.rebuild``'s ``walker`` hook: every task scans its
byte range and runs ``dispatch.dispatch_batch`` on its record batches (the expensive
part, spread over executors); the ``BatchDispatch`` results come back in CommitLog order
and the driver lays out ConsumeQueue and IndexFiles with the same code as the local
rebuild, so the files are byte-identical by construction. The walk stops like the
broker's recovery: the first file that does not end in a BLANK is the last one used.
"""
from __future__ import annotations

import pickle

import numpy as np
import pyarrow as pa

from rmqtool.engines import DEFAULT_SPLIT_SIZE, Engine, plan_tasks
from rmqtool.engines.arrow import select
from rmqtool.scan import END_BLANK, END_EOF, END_RANGE

DISPATCH_SCHEMA = pa.schema([("task", pa.int64()), ("records", pa.int64()), ("dispatch", pa.binary())])


class DispatchStage:
    """Per task: records in [start, to_offset) -> pickled ``BatchDispatch`` per batch."""

    def __init__(self, config, start: int, to_offset: int | None):
        self.config, self.start, self.to_offset = config, start, to_offset

    def __call__(self, task, batches):
        from rmqtool.dispatch import dispatch_batch
        rows = []
        for b in batches:
            keep = b.phy_offset >= self.start
            if self.to_offset is not None:
                keep &= b.phy_offset < self.to_offset
            if not keep.any():
                continue
            if not keep.all():
                b = select(b, np.flatnonzero(keep))
            rows.append({"task": task.task_id, "records": len(b),
                         "dispatch": pickle.dumps(dispatch_batch(b, self.config), protocol=5)})
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=DISPATCH_SCHEMA)


def file_ends(tasks, statuses) -> dict[str, tuple[str, int]]:
    """Per CommitLog file: (end kind, in-file position) of its one sequential walk."""
    by_file: dict = {}
    for t in sorted(tasks, key=lambda t: (t.path, t.lo)):
        by_file.setdefault(t.path, []).append(t)
    ends = {}
    for path, ts in by_file.items():
        kind, pos = END_EOF, ts[-1].hi
        for t in ts:
            st = statuses[t.task_id]
            if t.skip or st.start is None:
                continue
            if st.end_kind != END_RANGE:
                kind, pos = st.end_kind, st.end_pos
                break
        ends[path] = (kind, pos)
    return ends


def engine_walker(engine: Engine, store, check_crc: bool, config, split_size: int = DEFAULT_SPLIT_SIZE,
                  progress=None):
    """A ``walker(start, to_offset, on_dispatch) -> (records, end, kind)`` for rmqtool.rebuild."""
    def walk(start: int, to_offset: int | None, on_dispatch):
        size = store.commitlog.file_size
        tasks = plan_tasks([("store", store)], split_size, (start, to_offset), check_crc=check_crc)
        table = engine.run(tasks, DispatchStage(config, start, to_offset), DISPATCH_SCHEMA)
        ends = file_ends(engine.tasks, engine.statuses)
        task_file = {t.task_id: t for t in engine.tasks}
        payload = {}
        for tid, n, blob in zip(table.column("task").to_pylist(), table.column("records").to_pylist(),
                                table.column("dispatch").to_pylist()):
            payload.setdefault(tid, []).append((n, blob))
        records, end, kind = 0, start, "empty"
        segs = [s for s in store.commitlog.files if s.start + size > start
                and (to_offset is None or s.start < to_offset)]
        total = max(min(segs[-1].start + size, to_offset or 1 << 62) - start, 1) if segs else 1
        for seg in segs:
            for t in sorted((t for t in task_file.values() if t.path == str(seg.path)), key=lambda t: t.lo):
                for n, blob in payload.get(t.task_id, ()):
                    records += n
                    on_dispatch(pickle.loads(blob))
            fkind, fpos = ends.get(str(seg.path), (END_EOF, seg.size))
            end, kind = (seg.start + size, fkind) if fkind == END_BLANK else (seg.start + fpos, fkind)
            if progress:
                progress(end - start, total)
            if to_offset is not None and end >= to_offset:
                return records, to_offset, "to-offset"
            if fkind != END_BLANK:
                break
        if kind == END_RANGE and to_offset is not None:
            return records, to_offset, "to-offset"
        return records, end, kind
    return walk


class engine_walker_for:
    """Context manager for the CLI: ``None`` (rmqtool.rebuild's own walk) for ``local``,
    else a walker on a Spark session that is stopped on exit if it was started here."""

    def __init__(self, engine: str, store, check_crc: bool, progress=None, master=None, remote=None,
                 spark_conf=None):
        from rmqtool.engines import ENGINES
        from rmqtool.errors import UsageError
        if engine not in ENGINES:
            raise UsageError(f"--engine must be one of {', '.join(ENGINES)}, not {engine!r}")
        self.args = (engine, store, check_crc, progress, master, remote, spark_conf or ())
        self.engine = None

    def __enter__(self):
        from rmqtool.dispatch import DispatchConfig
        from rmqtool.engines import get_engine
        name, store, check_crc, progress, master, remote, conf = self.args
        if name == "local":
            return None
        self.engine = get_engine(name, master=master, remote=remote, spark_conf=conf)
        return engine_walker(self.engine, store, check_crc, DispatchConfig(), progress=progress)

    def __exit__(self, *exc):
        if self.engine is not None:
            self.engine.close()
