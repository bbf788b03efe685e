"""`verify --engine spark|local --jobs N`: the CommitLog walk of verify as engine tasks.

Every task walks its byte range and runs the per-batch verify work on its records
(``check_batch``: body CRC, ``__CRC32#``, stored offset; ``batch_columns``: topic ids,
tagsCode, index key hashes), which is where verify spends its time. The driver gets one
row per batch back, in CommitLog order, re-numbers the task-local topic ids into the
verifier's topic table and continues exactly like the sequential walk: how each file
ended (BLANK size, bytes after it, torn tail, corruption) is judged on the driver, and a
file whose walk stopped on bad bytes is carved past the corruption there (rare, so
sequential). Findings and the record table are therefore identical to the local walk.

The parts (record columns of a batch) do not travel back with the job's rows: each task
leaves them in a staging directory (``rmqtool.io.staging``) and returns what the driver
needs without them (record count, first and last offset, findings, topic names). The driver
never reads them: its record chunks refer to them (``chunks.StagedPart``) and the join tasks
(``ops.verify.engine_joins``) read them there. Without a staging location (a cluster without
``--staging``) the parts travel back in the rows and the driver holds one at a time.
"""
from __future__ import annotations

import pickle
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from rmqtool.broker.delay import store_delay_levels
from rmqtool.engines import DEFAULT_SPLIT_SIZE, Engine, file_ends, plan_tasks

PART_SCHEMA = pa.schema([("task", pa.int64()), ("records", pa.int64()), ("first", pa.int64()),
                         ("last", pa.int64()), ("meta", pa.binary()), ("part", pa.binary()), ("ref", pa.string())])


class VerifyStage:
    """Per task and batch: the columns (task-local topic ids) pickled, left in ``staging`` (only
    its reference travels back) or, without one, in the row; beside them (``meta``) the
    findings and the topic names by local id."""

    def __init__(self, deep: bool, staging=None, delay_levels_ms: dict | None = None):
        self.deep = deep
        self.staging = staging
        self.delay_levels_ms = delay_levels_ms or {}    # store name -> its delay table (tagsCode)

    def __call__(self, task, batches):
        from rmqtool.ops.verify.records import TopicTable, batch_columns, check_batch
        topics = TopicTable()
        for b in batches:
            findings = check_batch(b, deep=self.deep)
            cols = batch_columns(b, topics, self.deep, self.delay_levels_ms.get(task.store))
            raws = sorted(topics.ids, key=topics.ids.__getitem__)      # raw topic bytes by local id
            blob = pickle.dumps(cols, protocol=5)
            phy = cols["phy"]
            row = {"task": task.task_id, "records": len(b), "first": int(phy[0]) if len(b) else None,
                   "last": int(phy[-1]) if len(b) else None, "meta": pickle.dumps((findings, raws), protocol=5),
                   "part": None, "ref": None}
            if self.staging is None:
                row["part"] = blob
            else:
                row["ref"] = self.staging.put(blob)
            yield pa.RecordBatch.from_pylist([row], schema=PART_SCHEMA)


@dataclass
class FilePart:
    records: int
    first: int | None       # CommitLog offsets of the first and last record
    last: int | None
    findings: list
    topics: list            # raw topic bytes, index = the columns' topic_id
    blob: bytes | None      # the pickled columns, when they travelled in the row
    ref: str | None         # else where they are in staging

    def cols(self, staging) -> dict:
        """The columns (read on this process: only when they cannot be left where they are)."""
        blob = self.blob if self.blob is not None else staging.take(self.ref)
        return pickle.loads(blob)


@dataclass
class EngineWalk:
    """What the engine's tasks found, per CommitLog file: its parts (read back one at a time by
    ``parts``) and where its walk stopped."""
    staged: dict = field(default_factory=dict)    # path -> [part bytes or staging ref] in CommitLog order
    ends: dict = field(default_factory=dict)      # path -> (end kind, in-file position)
    tasks: int = 0
    staging: object = None
    owns_staging: bool = True                     # False: one staging shared by a fleet's walks

    def parts(self, path: str):
        """The file's parts in CommitLog order (without their columns: ``FilePart.cols``)."""
        items = self.staged.pop(path, [])
        while items:
            records, first, last, meta, blob, ref = items.pop(0)
            findings, raws = pickle.loads(meta)
            yield FilePart(records, first, last, findings, raws, blob, ref)

    def keep_staging(self) -> None:
        """The parts adopted by reference stay: closing this walk no longer removes its staging
        (the caller closes ``staging`` once the joins have read them)."""
        self.owns_staging = False

    def close(self) -> None:
        """Remove what was not taken (the whole staging directory when it is this walk's own)."""
        if self.staging is not None:
            if self.owns_staging:
                self.staging.close()
            else:
                for items in self.staged.values():
                    for item in items:
                        if item[-1] is not None:
                            self.staging.discard(item[-1])
            self.staging = None
        self.staged.clear()


@dataclass
class FleetWalk:
    """The walks of several stores, run as the tasks of one engine run, and their shared staging."""
    walks: dict                                   # store name -> EngineWalk
    staging: object = None

    def close(self) -> None:
        for walk in self.walks.values():
            walk.close()
        if self.staging is not None:
            self.staging.close()
            self.staging = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def fleet_walk(engine: Engine, stores, deep: bool, split_size: int | None = None) -> FleetWalk:
    """Run the verify stage over every CommitLog file of every ``(name, Store)`` in one engine
    run (no CRC stop, like verify). The caller closes the result when it has taken the parts."""
    stores = list(stores)
    tasks = plan_tasks(stores, split_size or DEFAULT_SPLIT_SIZE, check_crc=False)
    tasks = [t for t in tasks if t.hi > t.lo]          # empty files are judged by the driver
    staging = engine.open_staging() if tasks else None
    fleet = FleetWalk({name: EngineWalk(staging=staging, owns_staging=False) for name, _ in stores}, staging)
    try:
        delays = {name: store_delay_levels(store) for name, store in stores} if deep else None
        table = engine.run(tasks, VerifyStage(deep, staging, delays), PART_SCHEMA,
                           on_discard=None if staging is None else staging.discard_rows)
    except BaseException:
        fleet.close()
        raise
    ends = file_ends(engine.tasks, engine.statuses) if tasks else {}
    task_of = {t.task_id: t for t in engine.tasks}
    for t in tasks:
        walk = fleet.walks[t.store]
        walk.tasks += 1
        walk.ends[t.path] = ends[t.path]
    # engine.run returns rows in task order; a file's tasks are planned in byte order
    names = ("task", "records", "first", "last", "meta", "part", "ref")
    for tid, *item in zip(*(table.column(name).to_pylist() for name in names)):
        t = task_of[tid]
        fleet.walks[t.store].staged.setdefault(t.path, []).append(tuple(item))
    return fleet


def engine_walk(engine: Engine, store, deep: bool, split_size: int | None = None) -> EngineWalk:
    """``fleet_walk`` of one store: its walk, owning the staging directory (closed with it)."""
    fleet = fleet_walk(engine, [("store", store)], deep, split_size)
    walk = fleet.walks["store"]
    walk.owns_staging = True
    return walk


def topic_mapping(part: FilePart, intern) -> np.ndarray:
    """The run's topic id of each of the part's local ones (``intern(raw bytes) -> id``)."""
    return np.array([intern(raw) for raw in part.topics], dtype=np.int32)
