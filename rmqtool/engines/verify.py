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
leaves them in a staging directory (``rmqtool.io.staging``) and the driver takes them one
at a time as its walk reaches them, so the driver holds one part, not the store's table.
"""
from __future__ import annotations

import pickle
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from rmqtool.engines import DEFAULT_SPLIT_SIZE, Engine, file_ends, plan_tasks

PART_SCHEMA = pa.schema([("task", pa.int64()), ("records", pa.int64()), ("part", pa.binary()),
                         ("ref", pa.string())])


class VerifyStage:
    """Per task and batch: (columns with task-local topic ids, findings, topic table) pickled,
    left in ``staging`` (only its reference travels back) or, without one, in the row."""

    def __init__(self, deep: bool, staging=None):
        self.deep = deep
        self.staging = staging

    def __call__(self, task, batches):
        from rmqtool.ops.verify.records import TopicTable, batch_columns, check_batch
        topics = TopicTable()
        for b in batches:
            findings = check_batch(b, deep=self.deep)
            cols = batch_columns(b, topics, self.deep)
            raws = sorted(topics.ids, key=topics.ids.__getitem__)      # raw topic bytes by local id
            blob = pickle.dumps((cols, findings, raws), protocol=5)
            row = {"task": task.task_id, "records": len(b), "part": None, "ref": None}
            if self.staging is None:
                row["part"] = blob
            else:
                row["ref"] = self.staging.put(blob)
            yield pa.RecordBatch.from_pylist([row], schema=PART_SCHEMA)


@dataclass
class FilePart:
    cols: dict
    findings: list
    topics: list            # raw topic bytes, index = the columns' topic_id


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
        """The file's parts in CommitLog order, each taken out of staging as it is reached."""
        items = self.staged.pop(path, [])
        while items:
            item = items.pop(0)
            blob = item if isinstance(item, bytes) else self.staging.take(item)
            cols, findings, raws = pickle.loads(blob)
            del blob
            yield FilePart(cols, findings, raws)

    def close(self) -> None:
        """Remove what was not taken (the whole staging directory when it is this walk's own)."""
        if self.staging is not None:
            if self.owns_staging:
                self.staging.close()
            else:
                for items in self.staged.values():
                    for item in items:
                        if isinstance(item, str):
                            self.staging.discard(item)
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
        table = engine.run(tasks, VerifyStage(deep, staging), PART_SCHEMA,
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
    column = "part" if staging is None else "ref"
    for tid, item in zip(table.column("task").to_pylist(), table.column(column).to_pylist()):
        t = task_of[tid]
        fleet.walks[t.store].staged.setdefault(t.path, []).append(item)
    return fleet


def engine_walk(engine: Engine, store, deep: bool, split_size: int | None = None) -> EngineWalk:
    """``fleet_walk`` of one store: its walk, owning the staging directory (closed with it)."""
    fleet = fleet_walk(engine, [("store", store)], deep, split_size)
    walk = fleet.walks["store"]
    walk.owns_staging = True
    return walk


def remap_topics(part: FilePart, intern) -> np.ndarray:
    """The part's topic ids in the verifier's numbering (``intern(raw bytes) -> id``)."""
    mapping = np.array([intern(raw) for raw in part.topics], dtype=np.int32)
    ids = np.asarray(part.cols["topic_id"])
    return mapping[ids] if len(ids) else ids.astype(np.int32)
