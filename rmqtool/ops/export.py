"""`export`: the records of one or many stores to Parquet or JSON lines, partitioned by topic.

Layout of the destination (hive style, readable by pyarrow/pandas, DuckDB and Spark)::

    DIR/topic=<encoded topic>/part-<task>.parquet | .jsonl
    DIR/_topics.json      every partition directory -> its exact topic name
    DIR/_SUCCESS          written last

Topic names come from the data, so they are encoded before they touch a path: every
UTF-8 byte outside ``[A-Za-z0-9._|-]`` becomes ``%XX`` (so ``/``, ``\\``, NUL, ``=``,
``%`` and control characters never reach the file system, and a name can never be
``.``/``..`` or hidden since the segment always starts with ``topic=``). Readers decode
``%XX`` back (pyarrow's ``segment_encoding="uri"``, Spark's partition discovery). An
empty topic is ``__HIVE_DEFAULT_PARTITION__`` (null when read back). A name whose encoding
is longer than ``MAX_ENCODED`` bytes is cut and suffixed with ``~`` and a hash of the
name; ``_topics.json`` keeps the exact name. Parquet files carry every schema column
except ``topic`` (the directory is the column); JSON lines carry every column.

Each task writes its own files (temporary name, renamed when complete), so Spark
executors write straight to DIR, which must therefore be on storage they all reach.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa

from rmqtool.ops.dump import RecordFilter
from rmqtool.engines import Engine, Task, plan_tasks
from rmqtool.output.arrow import arrow_schema, batch_to_arrow, json_line, rows_for_json, select
from rmqtool.errors import RefusedError, UsageError

EXPORT_FORMATS = ("parquet", "jsonl")
MAX_ENCODED = 200
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._|-")
SUMMARY_SCHEMA = pa.schema([("topic", pa.string()), ("dir", pa.string()), ("file", pa.string()),
                            ("rows", pa.int64())])


def encode_topic(topic: str | None) -> str:
    """The partition directory name (``topic=...``) for a topic; see the module docstring."""
    if not topic:
        return f"topic={NULL_PARTITION}"
    raw = topic.encode("utf-8", "surrogatepass")
    enc = "".join(chr(b) if b in _SAFE else f"%{b:02X}" for b in raw)
    if enc == NULL_PARTITION:
        enc = "%5F" + enc[1:]
    if len(enc) > MAX_ENCODED:
        cut = enc[:MAX_ENCODED - 40]
        if "%" in cut[-2:]:
            cut = cut[:cut.rindex("%")]
        enc = f"{cut}~{hashlib.sha256(raw).hexdigest()[:32]}"
    return f"topic={enc}"


def parquet_schema(body: str) -> pa.Schema:
    schema = arrow_schema(body)
    return schema.remove(schema.get_field_index("topic"))


@dataclass
class ExportStage:
    """The per-task stage: filter, convert, write one file per topic, report what it wrote."""
    dest: str
    fmt: str
    body: str
    flt: RecordFilter

    def __post_init__(self):
        from rmqtool.io.outputdir import output_dir
        self.out = output_dir(self.dest)        # resolved once; travels with the stage to workers

    def __call__(self, task: Task, batches):
        import pyarrow.compute as pc
        parts = PartWriters(self, task)
        try:
            for b in batches:
                mask = self.flt.batch_mask(b)
                if not mask.any():
                    continue
                if not mask.all():
                    b = select(b, np.flatnonzero(mask))
                rb = batch_to_arrow(b, task.store, self.body)
                enc = rb.column("topic").dictionary_encode()
                for k, topic in enumerate(enc.dictionary.to_pylist()):
                    part = rb.filter(pc.equal(enc.indices, k)) if len(enc.dictionary) > 1 else rb
                    parts.write(topic, part)
            rows = parts.finish()
        except BaseException:
            parts.discard()
            raise
        yield pa.RecordBatch.from_pylist(rows, schema=SUMMARY_SCHEMA)

    def output(self):
        return self.out

    def open_writer(self, out, path: str):
        """(writer, its sink) for one part file."""
        if self.fmt == "parquet":
            import pyarrow.parquet as pq
            if not out.remote:             # pyarrow's own file: no Python file object in between
                return pq.ParquetWriter(path, parquet_schema(self.body)), None
            sink = out.open(path, text=False)
            return pq.ParquetWriter(sink, parquet_schema(self.body)), sink
        return out.open(path, text=True), None

    def write_part(self, writer, part: pa.RecordBatch) -> None:
        if self.fmt == "parquet":
            writer.write_batch(part.drop_columns(["topic"]))
        else:
            writer.write("".join(json_line(r) + "\n" for r in rows_for_json(part)))


#: open part files per export task at most: a store with 10,000 topics must not need 10,000 file
#: descriptors. A topic whose writer is closed to make room goes on in a new part file.
MAX_OPEN_PARTS = 64


class PartWriters:
    """One task's part files, at most ``MAX_OPEN_PARTS`` open (the least recently written is closed
    and finished first). Part names are deterministic: ``part-<task>.<ext>``, then ``part-<task>-<n>``."""

    def __init__(self, stage: ExportStage, task: Task):
        self.stage, self.task = stage, task
        self.out = stage.output()
        self.ext = "parquet" if stage.fmt == "parquet" else "jsonl"
        self.open: dict[str, list] = {}            # topic -> [tmp, final, writer, rows, sink]; insertion = recency
        self.parts: dict[str, int] = {}            # topic -> parts begun
        self.done: list[dict] = []
        self.made_dirs: list[str] = []

    def write(self, topic: str, part: pa.RecordBatch) -> None:
        entry = self.open.pop(topic, None)
        if entry is None:
            while len(self.open) >= MAX_OPEN_PARTS:
                oldest = next(iter(self.open))
                self._close(oldest, self.open.pop(oldest))
            entry = self._begin(topic)
        self.open[topic] = entry                   # most recently written last
        self.stage.write_part(entry[2], part)
        entry[3] += part.num_rows

    def _begin(self, topic: str) -> list:
        d = self.out.join(self.stage.dest, encode_topic(topic))
        if self.out.makedirs(d):            # else an earlier part's, or another task's
            self.made_dirs.append(d)
        n = self.parts.get(topic, 0)
        self.parts[topic] = n + 1
        name = f"part-{self.task.task_id:06d}{f'-{n}' if n else ''}.{self.ext}"
        final = self.out.join(d, name)
        tmp = self.out.temporary(final)
        entry = [tmp, final, None, 0, None]
        self.open[topic] = entry                   # registered before opening: discard() finds it
        entry[2], entry[4] = self.stage.open_writer(self.out, tmp)
        return self.open.pop(topic)

    def _close(self, topic: str, entry: list) -> None:
        tmp, final, writer, count, sink = entry
        writer.close()
        if sink is not None:
            sink.close()
        self.out.publish(tmp, final)
        self.done.append({"topic": topic, "dir": final.rsplit("/", 2)[-2], "file": final, "rows": count})

    def finish(self) -> list[dict]:
        while self.open:
            topic = next(iter(self.open))
            self._close(topic, self.open.pop(topic))
        return self.done

    def discard(self) -> None:
        """After a failure: no part of this task is left, nor a directory it made."""
        for tmp, _final, writer, _, sink in self.open.values():
            try:
                for w in (writer, sink):
                    if w is not None:
                        w.close()
            except Exception:      # noqa: BLE001 - closing a failed writer (ENOSPC) may fail again
                pass
            finally:
                self.out.remove(tmp)
        for row in self.done:
            self.out.remove(row["file"])
        self.open, self.done = {}, []
        for d in reversed(self.made_dirs):
            self.out.remove_dir(d)


def _outputs_remover(out):
    def remove(table: pa.Table) -> None:
        for f in table.column("file").to_pylist():
            if f:
                out.remove(f)
    return remove


def _remove_partial_export(out, existed: bool) -> None:
    """A failed export leaves nothing: its topic directories (the destination was empty, or held
    only a previous export that --force removed) and the destination if it made it."""
    for name in out.names():
        if name.startswith("topic=") and out.is_child_dir(name):
            out.remove_child(name)
    if not existed:
        out.remove_root()


def prepare_destination(out, stores: Sequence, force: bool) -> None:
    """Refuse a non-empty destination (unless --force and it only holds a previous export)
    and any destination inside a store we read."""
    from rmqtool.io import storage
    dest = storage.path(out.root)
    for s in stores:
        if isinstance(dest, Path) and isinstance(s, Path):
            s, d = s.resolve(), dest.resolve()
            inside = d == s or s in d.parents
        else:
            inside = str(dest) == str(s) or str(dest).startswith(str(s).rstrip("/") + "/")
        if inside:
            raise RefusedError("export destination is inside a store being read", dest)
    if out.exists() and not out.is_dir():
        raise RefusedError("export destination exists and is not a directory", dest)
    names = out.names()
    if names:
        if not force:
            raise RefusedError("export destination is not empty (use --force to replace a previous export)",
                               dest)
        ours = [n for n in names if n.startswith("topic=") or n in ("_SUCCESS", "_topics.json")]
        others = [n for n in names if n not in ours]
        if others:
            raise RefusedError(f"--force only replaces a previous export; {others[0]} is not one", dest)
        for n in ours:
            out.remove_child(n)
    out.create_root()


def export(stores: Sequence[tuple[str, object]], dest: str | Path, engine: Engine | None = None,
           fmt: str = "parquet", body: str = "none", flt: RecordFilter | None = None,
           split_size: int | None = None, force: bool = False, progress=None) -> dict:
    """Export every record of ``stores`` (``(name, Store)`` pairs) to ``dest``; returns a summary.
    ``engine``: where the tasks run (None: in this process); ``progress(done, total)``: CommitLog
    bytes walked (``Engine.run``)."""
    if engine is None:
        from rmqtool.engines import get_engine
        with get_engine("local") as local:
            return export(stores, dest, local, fmt, body, flt, split_size, force, progress)
    from rmqtool.engines import DEFAULT_SPLIT_SIZE
    if fmt not in EXPORT_FORMATS:
        raise UsageError(f"--format must be one of {', '.join(EXPORT_FORMATS)}, not {fmt!r}")
    if body not in ("none", "raw", "text"):
        raise UsageError(f"--body must be one of none, raw, text, not {body!r}")
    from rmqtool.io import storage
    from rmqtool.io.outputdir import output_dir
    flt = flt or RecordFilter()
    dest = str(storage.path(dest)) if storage.is_uri(dest) else str(storage.path(dest).absolute())
    out = output_dir(dest)
    existed = out.exists()
    prepare_destination(out, [s.root for _, s in stores], force)
    tasks = plan_tasks(stores, split_size or DEFAULT_SPLIT_SIZE, (flt.from_offset, flt.to_offset))
    stage = ExportStage(dest, fmt, body, flt)
    try:
        table = engine.run(tasks, stage, SUMMARY_SCHEMA, on_discard=_outputs_remover(out), progress=progress)
    except BaseException:
        _remove_partial_export(out, existed)
        raise
    summary = table.to_pylist()
    topics: dict[str, str] = {}
    per_topic: dict[str, int] = {}
    for r in summary:
        topics[r["dir"]] = r["topic"]
        per_topic[r["topic"]] = per_topic.get(r["topic"], 0) + r["rows"]
    out.write_text("_topics.json", json.dumps(topics, ensure_ascii=False, indent=1, sort_keys=True))
    out.write_text("_SUCCESS", "")
    return {"destination": dest, "format": fmt, "engine": engine.name, "tasks": len(tasks),
            "files": len(summary), "rows": sum(per_topic.values()), "topics": per_topic,
            "stores": [name for name, _ in stores]}


