"""`verify --engine spark|local --jobs N`: verify's joins as engine tasks, one per chunk of records.

Each chunk's records are parts in staging already (left there by the walk's tasks,
``ops.verify.engine_walk``; the few this process walked itself are put there now); the driver adds
the ConsumeQueue units and index entries routed to the chunk (``ops.verify.chunks``) and
runs one task per chunk: the task reads its parts, joins
its chunk (``ops.verify.joins.join_chunk``, the checks of the sequential path) into a fresh
state and leaves that state in staging: findings capped per check and counted in full, the
record times, the capped pending listings, the queue offsets at the chunk's edges. The
driver takes the states one at a time in chunk order and merges them (``JoinState.merge``:
the queue offset continuity across chunk edges is checked there, on one record per queue).
"""
from __future__ import annotations

import pickle
from dataclasses import replace

import pyarrow as pa

JOIN_SCHEMA = pa.schema([("chunk", pa.int64()), ("ref", pa.string())])


class CommitLogOnly:
    """The store as the joins use it (``commitlog``: min offset, locate), without the rest of
    what a ``Store`` caches (a RocksDB ConsumeQueue's units) travelling into every task."""

    def __init__(self, store):
        self.commitlog = store.commitlog


class JoinStage:
    """Per task: one chunk taken from staging, joined, its state left in staging."""

    def __init__(self, ctx, staging):
        self.ctx, self.staging = ctx, staging

    def __call__(self, item):
        from rmqtool.ops.verify.joins import JoinState, join_chunk
        from rmqtool.ops.verify.records import RecordTable
        k, ref, parts = item
        units, entries = pickle.loads(self.staging.read(ref))
        table = RecordTable.from_parts([part.load() for part in parts], self.ctx.topics, self.ctx.files)
        state = JoinState.start(self.ctx, task=True)
        join_chunk(self.ctx, state, table, units, entries)
        out = self.staging.put(pickle.dumps(state, protocol=5))
        yield pa.RecordBatch.from_pylist([{"chunk": k, "ref": out}], schema=JOIN_SCHEMA)


def engine_joins(engine, ctx, records, routed_units, routed_entries):
    """The chunks' states in chunk order (an iterator taking each from staging as it is reached),
    or None when the engine's tasks reach no staging (a cluster without ``--staging``): the
    driver then joins the chunks itself."""
    staging = engine.open_staging()
    if staging is None:
        return None
    try:
        items = []
        for k in range(len(records)):
            blob = pickle.dumps((routed_units.take(k), routed_entries.take(k)), protocol=5)
            items.append((k, staging.put(blob), records.staged(k, staging)))
            del blob
        task_ctx = replace(ctx, store=CommitLogOnly(ctx.store), topics=_plain(ctx.topics))
        table = engine.map(items, JoinStage(task_ctx, staging), JOIN_SCHEMA)
    except BaseException:
        staging.close()
        raise
    if table.column("chunk").to_pylist() != list(range(len(items))):
        staging.close()
        raise RuntimeError("the engine did not return one join state per chunk")
    inputs = [ref for _, ref, _ in items]
    inputs += [part.ref for _, _, parts in items for part in parts if part.staging is staging]   # put here
    return _states(staging, table.column("ref").to_pylist(), inputs)


def _states(staging, refs: list[str], inputs: list[str]):
    try:
        for ref in inputs:
            staging.discard(ref)
        for ref in refs:
            yield pickle.loads(staging.take(ref))
    finally:
        staging.close()


def _plain(topics):
    """The topic table without the walk's lookup caches (names and ids are all the joins read)."""
    from rmqtool.ops.verify.records import TopicTable
    return TopicTable(list(topics.names), dict(topics.ids), dict(topics.by_name))
