"""`verify --engine spark|local --jobs N`: the CommitLog walk of verify as engine tasks.

Every task walks its byte range and runs the per-batch verify work on its records
(``check_batch``: body CRC, ``__CRC32#``, stored offset; ``batch_columns``: topic ids,
tagsCode, index key hashes), which is where verify spends its time. The driver gets one
row per batch back, in CommitLog order, re-numbers the task-local topic ids into the
verifier's topic table and continues exactly like the sequential walk: how each file
ended (BLANK size, bytes after it, torn tail, corruption) is judged on the driver, and a
file whose walk stopped on bad bytes is carved past the corruption there (rare, so
sequential). Findings and the record table are therefore identical to the local walk.
"""
from __future__ import annotations

import pickle
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from rmqtool.engines import DEFAULT_SPLIT_SIZE, Engine, file_ends, plan_tasks

PART_SCHEMA = pa.schema([("task", pa.int64()), ("records", pa.int64()), ("part", pa.binary())])


class VerifyStage:
    """Per task and batch: (columns with task-local topic ids, findings, topic table) pickled."""

    def __init__(self, deep: bool):
        self.deep = deep

    def __call__(self, task, batches):
        from rmqtool.ops.verify.records import TopicTable, batch_columns, check_batch
        topics = TopicTable()
        for b in batches:
            findings = check_batch(b, deep=self.deep)
            cols = batch_columns(b, topics, self.deep)
            raws = sorted(topics.ids, key=topics.ids.__getitem__)      # raw topic bytes by local id
            blob = pickle.dumps((cols, findings, raws), protocol=5)
            yield pa.RecordBatch.from_pylist([{"task": task.task_id, "records": len(b), "part": blob}],
                                             schema=PART_SCHEMA)


@dataclass
class FilePart:
    cols: dict
    findings: list
    topics: list            # raw topic bytes, index = the columns' topic_id


@dataclass
class EngineWalk:
    """What the engine's tasks found, per CommitLog file: its batches and where its walk stopped."""
    parts: dict = field(default_factory=dict)     # path -> [FilePart] in CommitLog order
    ends: dict = field(default_factory=dict)      # path -> (end kind, in-file position)
    tasks: int = 0


def engine_walk(engine: Engine, store, deep: bool, split_size: int | None = None) -> EngineWalk:
    """Run the verify stage over every CommitLog file of ``store`` (no CRC stop, like verify)."""
    tasks = plan_tasks([("store", store)], split_size or DEFAULT_SPLIT_SIZE, check_crc=False)
    tasks = [t for t in tasks if t.hi > t.lo]          # empty files are judged by the driver
    table = engine.run(tasks, VerifyStage(deep), PART_SCHEMA)
    walk = EngineWalk(ends=file_ends(engine.tasks, engine.statuses) if tasks else {}, tasks=len(tasks))
    path_of = {t.task_id: t.path for t in engine.tasks}
    # engine.run returns rows in task order; a file's tasks are planned in byte order
    for tid, blob in zip(table.column("task").to_pylist(), table.column("part").to_pylist()):
        cols, findings, raws = pickle.loads(blob)
        walk.parts.setdefault(path_of[tid], []).append(FilePart(cols, findings, raws))
    return walk


def remap_topics(part: FilePart, intern) -> np.ndarray:
    """The part's topic ids in the verifier's numbering (``intern(raw bytes) -> id``)."""
    mapping = np.array([intern(raw) for raw in part.topics], dtype=np.int32)
    ids = np.asarray(part.cols["topic_id"])
    return mapping[ids] if len(ids) else ids.astype(np.int32)
