"""`rebuild --engine spark|local`: the CommitLog scan and dispatch run as engine tasks.

``engine_walker`` plugs into ``rmqtool.ops.rebuild``'s ``walker`` hook: every task scans its
byte range and runs ``dispatch.dispatch_batch`` on its record batches (the expensive
part, spread over executors); the ``BatchDispatch`` results come back in CommitLog order
and the driver lays out ConsumeQueue and IndexFiles with the same code as the local
rebuild, so the files are byte-identical by construction. The walk stops like the
broker's recovery: the first file that does not end in a BLANK is the last one used, and
nothing after a record that fails dispatch (``BatchDispatch.stop``) is used.
"""
from __future__ import annotations

import pickle

import numpy as np
import pyarrow as pa

from rmqtool.broker.dispatch import END_DISPATCH_STOP
from rmqtool.io.install import pwrite_all
from rmqtool.engines import DEFAULT_SPLIT_SIZE, Engine, file_ends, plan_tasks
from rmqtool.output.arrow import select
from rmqtool.records.scan import END_BLANK, END_EOF, END_RANGE

DISPATCH_SCHEMA = pa.schema([("task", pa.int64()), ("records", pa.int64()), ("dispatch", pa.binary()),
                             ("ref", pa.string())])


def _in_range(batches, start: int, to_offset: int | None):
    """The batches' records in [start, to_offset), batch by batch (empty ones skipped)."""
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
        from rmqtool.broker.dispatch import dispatch_batch
        for b in _in_range(batches, self.start, self.to_offset):
            d = dispatch_batch(b, self.config)
            blob = pickle.dumps(d, protocol=5)
            row = {"task": task.task_id, "records": d.records, "dispatch": None, "ref": None}
            if self.staging is None:
                row["dispatch"] = blob
            else:
                row["ref"] = self.staging.put(blob)
            yield pa.RecordBatch.from_pylist([row], schema=DISPATCH_SCHEMA)
            if d.stop:                    # the broker dispatches nothing after it
                break


def engine_walker(engine: Engine, store, check_crc: bool, config, split_size: int = DEFAULT_SPLIT_SIZE,
                  progress=None):
    """A ``walker(start, to_offset, on_dispatch) -> (records, end, kind)`` for rmqtool.ops.rebuild."""
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
        size = store.commitlog.file_size
        table = engine.run(tasks, DispatchStage(config, start, to_offset, staging), DISPATCH_SCHEMA,
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
        segs = _segments_in_range(store, start, to_offset)
        total = max(min(segs[-1].start + size, to_offset or 1 << 62) - start, 1) if segs else 1
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


# --- the distributed shape: executors write the files --------------------------------------------
CQ_ROWS = pa.schema([("topic", pa.string()), ("queue_id", pa.int64()), ("task", pa.int64()),
                     ("ord", pa.int64()), ("queue_offset", pa.int64()), ("phy_offset", pa.int64()),
                     ("size", pa.int64()), ("tags_code", pa.int64())])
KEY_ROWS = pa.schema([("task", pa.int64()), ("ord", pa.int64()), ("key_hash", pa.int64()),
                      ("phy_offset", pa.int64()), ("store_timestamp", pa.int64())])
PASS1 = pa.schema([("task", pa.int64()), ("cq_file", pa.string()), ("key_file", pa.string()),
                   ("cq_rows", pa.int64()), ("key_rows", pa.int64()), ("records", pa.int64()),
                   ("max_record_phy", pa.int64()), ("stops", pa.string()), ("stop_at", pa.int64())])
CQ_WRITTEN = pa.schema([("topic", pa.string()), ("queue_id", pa.int64()), ("units", pa.int64()),
                        ("files", pa.string()), ("warnings", pa.string())])
INDEX_WRITTEN = pa.schema([("file_no", pa.int64()), ("name", pa.string()), ("entries", pa.int64()),
                           ("last_phy", pa.int64()), ("last_ts", pa.int64())])


class DispatchRowsStage:
    """Pass 1, per task: dispatch its records and write CQ unit rows and index key rows
    (in broker order: ``ord`` numbers them within the task) to Parquet under ``work``."""

    def __init__(self, work: str, config, start: int, to_offset: int | None, cq: bool, index: bool):
        self.work, self.config, self.start, self.to_offset = work, config, start, to_offset
        self.cq, self.index = cq, index

    def __call__(self, task, batches):
        import os
        import pyarrow.parquet as pq
        from rmqtool.broker.dispatch import dispatch_batch
        names = {"cq": os.path.join(self.work, f"cq-{task.task_id:06d}.parquet"),
                 "key": os.path.join(self.work, f"key-{task.task_id:06d}.parquet")}
        writers = {"cq": pq.ParquetWriter(names["cq"], CQ_ROWS) if self.cq else None,
                   "key": pq.ParquetWriter(names["key"], KEY_ROWS) if self.index else None}
        n_cq = n_key = records = 0
        max_phy, stops, stop_at = -1, [], -1
        try:
            for b in _in_range(batches, self.start, self.to_offset):
                d = dispatch_batch(b, self.config)
                records += d.records
                if d.stop:
                    stops.append(d.stop)
                    stop_at = d.stop_at
                if len(d.record_phy_offset):
                    max_phy = max(max_phy, int(d.record_phy_offset.max()))
                m = len(d.cq_topic)
                if writers["cq"] is not None and m:
                    writers["cq"].write_batch(pa.RecordBatch.from_arrays([
                        pa.array(d.topics, pa.string()).take(pa.array(d.cq_topic.astype(np.int64))),
                        pa.array(d.cq_queue_id.astype(np.int64)), pa.array(np.full(m, task.task_id)),
                        pa.array(np.arange(n_cq, n_cq + m, dtype=np.int64)),
                        pa.array(d.cq_queue_offset.astype(np.int64)), pa.array(d.cq_phy_offset.astype(np.int64)),
                        pa.array(d.cq_size.astype(np.int64)), pa.array(d.cq_tags_code.astype(np.int64))],
                        schema=CQ_ROWS))
                    n_cq += m
                k = len(d.key_hash)
                if writers["key"] is not None and k:
                    writers["key"].write_batch(pa.RecordBatch.from_arrays([
                        pa.array(np.full(k, task.task_id)), pa.array(np.arange(n_key, n_key + k, dtype=np.int64)),
                        pa.array(d.key_hash.astype(np.int64)), pa.array(d.key_phy_offset.astype(np.int64)),
                        pa.array(d.key_store_timestamp.astype(np.int64))], schema=KEY_ROWS))
                    n_key += k
                if d.stop:                # the broker dispatches nothing after it
                    break
        finally:
            for w in writers.values():
                if w is not None:
                    w.close()
        yield pa.RecordBatch.from_pylist([{
            "task": task.task_id, "cq_file": names["cq"] if self.cq else None,
            "key_file": names["key"] if self.index else None, "cq_rows": n_cq, "key_rows": n_key,
            "records": records, "max_record_phy": max_phy, "stops": "\n".join(stops),
            "stop_at": stop_at}], schema=PASS1)


def _remove_pass1(table: pa.Table) -> None:
    import os
    for col in ("cq_file", "key_file"):
        for f in table.column(col).to_pylist():
            if f and os.path.exists(f):
                os.unlink(f)


class CqFileWriter:
    """Pass 2 (one task per group of queues): the units of each (topic, queue), sorted in
    broker order, laid out like the broker and written as that queue's files."""

    def __init__(self, out: str, file_size: int):
        self.out, self.file_size = out, file_size

    def __call__(self, batches):
        cur, parts = None, []
        for b in batches:
            topic = b.column("topic").to_pylist()
            qid = b.column("queue_id").to_numpy()
            cols = [b.column(c).to_numpy() for c in ("queue_offset", "phy_offset", "size", "tags_code")]
            cut = [0] + [i for i in range(1, len(topic)) if topic[i] != topic[i - 1] or qid[i] != qid[i - 1]] \
                + [len(topic)]
            for lo, hi in zip(cut, cut[1:]):
                if lo == hi:
                    continue
                key = (topic[lo], int(qid[lo]))
                if key != cur:
                    if cur is not None:
                        yield self._flush(cur, parts)
                    cur, parts = key, []
                parts.append([c[lo:hi] for c in cols])
        if cur is not None:
            yield self._flush(cur, parts)

    def _flush(self, key, parts) -> pa.RecordBatch:
        import os
        from pathlib import Path
        from rmqtool.broker.dispatch import QueueUnits, layout_cq
        from rmqtool.io.topicpath import describe, queue_dir, topic_path_problem
        topic, qid = key
        q = QueueUnits(topic, qid, *[np.concatenate([p[i] for p in parts]) for i in range(4)])
        problem = topic_path_problem(topic)
        if problem is not None:
            return pa.RecordBatch.from_pylist([{
                "topic": topic, "queue_id": qid, "units": 0, "files": "",
                "warnings": f"{problem}: queue {describe(topic)}/{qid} skipped ({len(q)} units not written)"}],
                schema=CQ_WRITTEN)
        layout = layout_cq(q, self.file_size)
        qdir = queue_dir(Path(self.out), topic, qid)
        qdir.mkdir(parents=True, exist_ok=True)
        files = []
        for start in layout.file_starts():
            path = qdir / f"{start:020d}"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.ftruncate(fd, self.file_size)
                pwrite_all(fd, layout.file_data(start), 0)
            finally:
                os.close(fd)
            files.append(f"{topic}/{qid}/{start:020d}")
        return pa.RecordBatch.from_pylist([{"topic": topic, "queue_id": qid, "units": layout.real_units,
                                            "files": "\n".join(files), "warnings": "\n".join(layout.warnings)}],
                                          schema=CQ_WRITTEN)


class IndexFileWriter:
    """Pass 2 (one task per index file): the file's entry range in broker order, preceded by
    the previous file's last key (its end timestamp seeds the header), written as one file."""

    def __init__(self, out: str, hash_slots: int, index_entries: int, names: list[str]):
        self.out, self.slots, self.entries, self.names = out, hash_slots, index_entries, names

    def __call__(self, batches):
        cur, parts = None, []
        for b in batches:
            fno = b.column("file_no").to_numpy()
            cut = [0] + list(np.flatnonzero(np.diff(fno)) + 1) + [len(fno)]
            for lo, hi in zip(cut, cut[1:]):
                if lo == hi:
                    continue
                if int(fno[lo]) != cur:
                    if cur is not None:
                        yield self._write(cur, parts)
                    cur, parts = int(fno[lo]), []
                parts.append(b.slice(lo, hi - lo))
        if cur is not None:
            yield self._write(cur, parts)

    def _write(self, file_no: int, parts) -> pa.RecordBatch:
        import os
        from rmqtool.broker.dispatch import build_index_image
        t = pa.Table.from_batches(parts)
        seed = t.column("is_seed").to_numpy(zero_copy_only=False)
        kh, ph, ts = (t.column(c).to_numpy() for c in ("key_hash", "phy_offset", "store_timestamp"))
        seed_phy = int(ph[seed][-1]) if seed.any() else 0
        seed_ts = int(ts[seed][-1]) if seed.any() else 0
        keys = ~seed
        image = build_index_image(kh[keys], ph[keys], ts[keys], self.slots, self.entries, seed_phy, seed_ts)
        name = self.names[file_no]
        fd = os.open(os.path.join(self.out, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            image.write_to(fd)
        finally:
            os.close(fd)
        return pa.RecordBatch.from_pylist([{"file_no": file_no, "name": name, "entries": int(keys.sum()),
                                            "last_phy": int(ph[keys][-1]), "last_ts": int(ts[keys][-1])}],
                                          schema=INDEX_WRITTEN)


def _segments_in_range(store, start: int, to_offset: int | None) -> list:
    size = store.commitlog.file_size
    return [s for s in store.commitlog.files if s.start + size > start
            and (to_offset is None or s.start < to_offset)]


def files_reached(store, ends: dict, start: int, to_offset: int | None) -> tuple[list, tuple[int, str]]:
    """The broker's walk over whole files from ``start``, given how each file's scan ended
    (``file_ends``): the files it reaches, each with the offset reached after it, and where it
    ends (offset, kind), as ``rmqtool.ops.rebuild`` reports them. A file not ending in a
    BLANK ends the walk."""
    size = store.commitlog.file_size
    reached = []
    end, kind = start, "empty"
    for seg in _segments_in_range(store, start, to_offset):
        fkind, fpos = ends.get(str(seg.path), (END_EOF, seg.size))
        end, kind = (seg.start + size, fkind) if fkind == END_BLANK else (seg.start + fpos, fkind)
        reached.append((seg, end))
        if to_offset is not None and end >= to_offset:
            return reached, (to_offset, "to-offset")
        if fkind != END_BLANK:
            break
    if kind == END_RANGE and to_offset is not None:
        return reached, (to_offset, "to-offset")
    return reached, (end, kind)


def walk_outcome(store, tasks, statuses, start: int, to_offset: int | None) -> tuple[set, int, str]:
    """Which tasks the broker's walk reaches (``files_reached``) and (end offset, end kind)."""
    reached, (end, kind) = files_reached(store, file_ends(tasks, statuses), start, to_offset)
    paths = {str(seg.path) for seg, _ in reached}
    return {t.task_id for t in tasks if t.path in paths}, end, kind


def _shuffle(engine, files: list[str], prepare, key: list[str], order: list[str], fn, schema: pa.Schema,
             partitions: int) -> pa.Table:
    """Rows of Parquet ``files`` -> ``prepare`` -> grouped by ``key`` onto tasks, sorted by
    key + order within each -> ``fn`` per task. Spark: repartition + sortWithinPartitions +
    mapInArrow (executors read and write); local: one sorted table in this process."""
    if not files:
        return schema.empty_table()
    if engine.name == "spark":
        from pyspark.sql.pandas.types import from_arrow_schema
        df = prepare(engine.spark.read.parquet(*files), True)
        df = df.repartition(max(partitions, 1), *key).sortWithinPartitions(*(key + order))
        from rmqtool.engines.spark import job_error
        out = df.mapInArrow(fn, from_arrow_schema(schema))
        try:
            table = out.toArrow() if hasattr(out, "toArrow") else pa.Table.from_pandas(out.toPandas())
        except Exception as exc:
            raise job_error(exc) from None
        return table.select(schema.names).cast(schema)
    import pyarrow.parquet as pq
    table = prepare(pa.concat_tables([pq.read_table(f) for f in files]), False)
    table = table.sort_by([(c, "ascending") for c in key + order])
    return pa.Table.from_batches(list(fn(iter(table.to_batches(max_chunksize=1 << 16)))), schema)


def _index_prepare(offsets: np.ndarray, cap: int, n_files: int):
    """Adds ordinal (global entry number), file_no and the previous file's last key as a seed row."""
    def prepare(data, spark: bool):
        if spark:
            from pyspark.sql import functions as F
            off = F.element_at(F.array(*[F.lit(int(x)) for x in offsets]), F.col("task").cast("int") + 1)
            df = data.withColumn("ordinal", off + F.col("ord"))
            df = df.withColumn("file_no", F.floor(F.col("ordinal") / F.lit(cap)).cast("long"))
            seeds = (df.where((F.col("ordinal") % cap == cap - 1) & (F.col("file_no") + 1 < n_files))
                     .withColumn("file_no", F.col("file_no") + 1).withColumn("is_seed", F.lit(True)))
            return df.withColumn("is_seed", F.lit(False)).unionByName(seeds)
        ordinal = offsets[data.column("task").to_numpy()] + data.column("ord").to_numpy()
        file_no = ordinal // cap
        table = data.append_column("ordinal", pa.array(ordinal)).append_column("file_no", pa.array(file_no))
        table = table.append_column("is_seed", pa.array(np.zeros(len(ordinal), dtype=bool)))
        pick = np.flatnonzero((ordinal % cap == cap - 1) & (file_no + 1 < n_files))
        seeds = table.take(pa.array(pick))
        seeds = seeds.set_column(seeds.schema.get_field_index("file_no"), "file_no",
                                 pa.array(file_no[pick] + 1))
        seeds = seeds.set_column(seeds.schema.get_field_index("is_seed"), "is_seed",
                                 pa.array(np.ones(len(pick), dtype=bool)))
        return pa.concat_tables([table, seeds])
    return prepare


def distributed_rebuild(engine: Engine, store, *, cq_out=None, index_out=None, cq_file_size: int = 0,
                        geometry=None, check_crc: bool = True, config=None, to_offset: int | None = None,
                        split_size: int = DEFAULT_SPLIT_SIZE, work_dir=None) -> dict:
    """Rebuild the whole ConsumeQueue tree (into ``cq_out``) and/or all IndexFiles (into
    ``index_out``) with the Spark shape: pass 1 dispatches byte ranges on the executors and
    writes unit/key rows; pass 2 gives each (topic, queue) to one task that writes its CQ
    files, and orders keys globally (per-task counts -> prefix sums -> entry ordinal) so
    that each IndexFile is one entry range written by one task."""
    import shutil
    import tempfile
    import time
    from pathlib import Path
    from rmqtool.broker.dispatch import build_index_image, index_file_name
    from rmqtool.ops.rebuild import dispatch_config
    config = dispatch_config(store, config)
    outs = [Path(p) for p in (cq_out, index_out) if p is not None]
    for p in outs:
        p.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".rmqtool-work-", dir=work_dir or outs[0].parent))
    try:
        start = store.commitlog.min_offset
        tasks = plan_tasks([("store", store)], split_size, (start, to_offset), check_crc=check_crc)
        stage = DispatchRowsStage(str(work), config, start, to_offset, cq_out is not None, index_out is not None)
        p1 = engine.run(tasks, stage, PASS1, on_discard=_remove_pass1)
        valid, end, kind = walk_outcome(store, engine.tasks, engine.statuses, start, to_offset)
        rows = sorted((r for r in p1.to_pylist() if r["task"] in valid), key=lambda r: r["task"])
        stopped = next((i for i, r in enumerate(rows) if r["stop_at"] >= 0), None)
        if stopped is not None:           # nothing after a failed dispatch: later tasks are dropped
            end, kind = rows[stopped]["stop_at"], END_DISPATCH_STOP
            rows = rows[:stopped + 1]
        out = {"records": sum(r["records"] for r in rows), "range_start": start, "range_end": end,
               "end_kind": kind, "warnings": [s for r in rows for s in r["stops"].split("\n") if s],
               "cq_files": [], "units": 0, "index_files": [], "entries": 0}
        slots = 4 * (getattr(engine, "parallelism", lambda: 1)())
        if cq_out is not None:
            written = _shuffle(engine, [r["cq_file"] for r in rows if r["cq_rows"]], lambda d, s: d,
                               ["topic", "queue_id"], ["task", "ord"], CqFileWriter(str(cq_out), cq_file_size),
                               CQ_WRITTEN, slots)
            for r in sorted(written.to_pylist(), key=lambda r: (r["topic"], r["queue_id"])):
                out["units"] += r["units"]
                out["cq_files"] += [f for f in r["files"].split("\n") if f]
                out["warnings"] += [w for w in r["warnings"].split("\n") if w]
        if index_out is not None:
            cap = geometry.index_entries - 1
            counts = np.zeros(len(tasks) and max(t.task_id for t in tasks) + 1, dtype=np.int64)
            for r in rows:
                counts[r["task"]] = r["key_rows"]
            offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
            total = int(counts.sum())
            n_files = -(-total // cap)
            now = int(time.time() * 1000)
            names = [index_file_name(now + i) for i in range(n_files + 1)]
            written = _shuffle(engine, [r["key_file"] for r in rows if r["key_rows"]],
                               _index_prepare(offsets, cap, n_files), ["file_no"], ["ordinal"],
                               IndexFileWriter(str(index_out), geometry.hash_slots, geometry.index_entries, names),
                               INDEX_WRITTEN, n_files)
            done = sorted(written.to_pylist(), key=lambda r: r["file_no"])
            out["entries"] = sum(r["entries"] for r in done)
            out["index_files"] = [r["name"] for r in done]
            # the broker opens one more file when a record arrives after the last one filled
            max_phy = max((r["max_record_phy"] for r in rows), default=-1)
            last = done[-1] if done else None
            if (last is None and max_phy >= 0) or (last is not None and last["entries"] == cap
                                                    and max_phy > last["last_phy"]):
                seed_phy, seed_ts = (last["last_phy"], last["last_ts"]) if last else (0, 0)
                image = build_index_image(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64),
                                          geometry.hash_slots, geometry.index_entries, seed_phy, seed_ts)
                import os
                fd = os.open(Path(index_out) / names[n_files], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    image.write_to(fd)
                finally:
                    os.close(fd)
                out["index_files"].append(names[n_files])
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def engine_rebuild(kind: str, store, engine: Engine, *, geometry=None, cq_file_size: int | None = None,
                   to_offset: int | None = None, output=None, check_crc: bool = True, confirm=None,
                   split_size: int = DEFAULT_SPLIT_SIZE, allow_truncate: bool = False):
    """`rebuild consumequeue|index` of the whole tree with ``distributed_rebuild``, installed
    with the same crash-safe protocol as the local rebuild (or built into ``output``)."""
    import os
    import time
    from pathlib import Path
    from formats.consumequeue import CQ_UNIT_SIZE, DEFAULT_CQ_FILE_SIZE
    from rmqtool.io import install as inst
    from rmqtool.errors import UsageError
    from rmqtool.ops.rebuild import RebuildResult, check_no_cq_ext, check_rebuild_target
    t0 = time.perf_counter()
    check_rebuild_target(store, output)
    cq = kind == "consumequeue"
    if cq:
        check_no_cq_ext(store)
    target = store.consumequeue_dir if cq else store.index_dir
    file_size = (cq_file_size or store.cq_file_size() or DEFAULT_CQ_FILE_SIZE) if cq else 0
    if cq and file_size % CQ_UNIT_SIZE:
        raise UsageError(f"--cq-file-size {file_size} is not a multiple of {CQ_UNIT_SIZE}")
    result = RebuildResult(kind, str(store.root), str(target), str(output) if output else None, False,
                           store.commitlog.min_offset, 0, "",
                           geometry={"cq_file_size": file_size} if cq else
                           {"hash_slots": geometry.hash_slots, "index_entries": geometry.index_entries})
    if output is None:
        result.recovered = inst.recover_leftovers(target)
    carried = []
    if target.is_dir():
        indexes = {p.name for p in store.index_files()} if not cq else set()
        for dirpath, _, filenames in os.walk(target):
            rel_dir = Path(dirpath).relative_to(target)
            for f in filenames:
                rel = str(rel_dir / f)
                replaced = len(rel_dir.parts) == 2 if cq else (not rel_dir.parts and f in indexes)
                (result.files_replaced if replaced else carried).append(rel)
    result.files_kept = carried
    if output is None and confirm and not confirm(result):
        result.seconds = time.perf_counter() - t0
        return result
    build = inst.prepare_output(Path(output)) if output else inst.new_build_dir(target)
    out = distributed_rebuild(engine, store, cq_out=build if cq else None, index_out=None if cq else build,
                              cq_file_size=file_size, geometry=geometry, check_crc=check_crc,
                              to_offset=to_offset, split_size=split_size, work_dir=build)
    result.records, result.range_end, result.end_kind = out["records"], out["range_end"], out["end_kind"]
    if not allow_truncate:
        _refuse_early_stop(store, result, build, output is not None, to_offset, check_crc)
    result.units, result.entries, result.warnings = out["units"], out["entries"], out["warnings"]
    if cq:
        result.files_written = [{"path": p, "size": file_size} for p in out["cq_files"]]
    else:
        result.files_written = [{"path": p, "size": geometry.file_size} for p in out["index_files"]]
        if to_offset is not None and result.end_kind == "to-offset":
            result.warnings.append(f"records from {to_offset} on are not indexed (--to-offset)")
    for rel in carried:
        (build / rel).parent.mkdir(parents=True, exist_ok=True)
        inst.link_or_copy(target / rel, build / rel)
    if output is not None:
        inst.fsync_tree(build)
    else:
        result.backup = inst.install(target, build).backup
    result.seconds = time.perf_counter() - t0
    return result


def _refuse_early_stop(store, result, build, is_output: bool, to_offset, check_crc: bool) -> None:
    """Refuse (removing the build) when the walk stopped with records after the stop: the
    local path measures and skips such damage (``--skip-corrupt`` runs there)."""
    from rmqtool.ops.rebuild import discard_build
    from rmqtool.records.scan import END_ZERO, next_record_after
    from rmqtool.broker.truncation import STOP_KINDS, data_after_walk, describe_stop, refuse_truncation
    end, kind = result.range_end, result.end_kind
    if to_offset is not None and end >= to_offset:
        return
    after = next_record_after(store, end, kind, to_offset) if kind in STOP_KINDS else None
    if after is None or (kind == END_ZERO and after == end):
        result.uncovered = data_after_walk(store, end) if to_offset is None else None
        if result.uncovered is not None:            # a later segment's data no walk reached
            discard_build(build, keep_dir=is_output)
            refuse_truncation([result])
        return
    result.damage = [describe_stop(store, end, kind, after, check_crc, result.warnings).as_dict()]
    discard_build(build, keep_dir=is_output)
    refuse_truncation([result])


def rebuild_with_engine(kind: str, store, engine_name: str, master=None, remote=None, spark_conf=(),
                        selective: bool = False, local_call=None, progress=None, check_crc: bool = True,
                        **options):
    """The CLI's entry for ``--engine spark``: whole trees with ``engine_rebuild`` (executors
    write the files); a selective rebuild (``--topic``/``--queue``/``--from-offset``/
    ``--dry-run``) runs ``local_call(walker)``, i.e. rmqtool.ops.rebuild with the scan and
    dispatch on the executors and the layout on the driver."""
    from rmqtool.engines import get_engine
    with get_engine(engine_name, master=master, remote=remote, spark_conf=spark_conf or ()) as eng:
        if selective:
            from rmqtool.ops.rebuild import dispatch_config
            return local_call(engine_walker(eng, store, check_crc, dispatch_config(store), progress=progress))
        return engine_rebuild(kind, store, eng, check_crc=check_crc, **options)
