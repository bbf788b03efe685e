"""`rmqtool export STORE... --to DIR`: records to Parquet / JSON lines, partitioned by topic."""
from __future__ import annotations

from typing import List, Optional

import typer

from rmqtool.cli.common import (IdleIoOpt, MaxReadRateOpt, gentle, CommitlogDirsOpt, app, check_choice, emit,
                                open_store, parse_time, stderr, EngineOptions, with_engine_options)
from rmqtool.ops.dump import RecordFilter, check_range
from rmqtool.errors import writing_to
from rmqtool.wording import counted



@app.command("export")
@with_engine_options
def export_command(
    stores: List[str] = typer.Argument(..., help="store roots (several paths or a quoted glob)"),
    to: str = typer.Option(..., "--to", help="destination directory or storage URI (s3://bucket/prefix, gs://, hdfs://): where every task "
                       "writes its part files (for Spark: a place every executor reaches)"),
    fmt: str = typer.Option("parquet", "--format", "-f", help="parquet | jsonl"),
    topic: Optional[str] = typer.Option(None, "--topic", help="only this topic"),
    queue: Optional[int] = typer.Option(None, "--queue", help="only this queue id (with --topic)"),
    from_offset: Optional[int] = typer.Option(None, "--from-offset", help="commitlog offset, inclusive"),
    to_offset: Optional[int] = typer.Option(None, "--to-offset", help="commitlog offset, exclusive"),
    begin: Optional[str] = typer.Option(None, "--begin", help="store time >= (epoch ms or ISO-8601)"),
    end: Optional[str] = typer.Option(None, "--end", help="store time <= (epoch ms or ISO-8601)"),
    body: str = typer.Option("raw", "--body", help="raw (the stored bytes; default) | text (UTF-8, inflated) | none"),
    force: bool = typer.Option(False, "--force", help="replace a previous export in --to"),
    max_read_rate: Optional[float] = MaxReadRateOpt,
    idle_io: bool = IdleIoOpt,
    engine_options: EngineOptions = EngineOptions(),
    commitlog_dirs: str = CommitlogDirsOpt,
):
    """Export every MESSAGE of one or many stores, one row each with its store name."""
    from rmqtool.io.stores import open_stores
    from rmqtool.ops.export import EXPORT_FORMATS, export
    check_choice(fmt, EXPORT_FORMATS, "--format")
    check_choice(body, ("none", "raw", "text"), "--body")
    gentle(max_read_rate, idle_io)
    flt = RecordFilter(topic, queue, from_offset, to_offset, parse_time(begin, "--begin"),
                       parse_time(end, "--end"))
    check_range(flt)
    opened = open_stores(stores, lambda p: open_store(p, commitlog_dirs))
    from rmqtool.cli.progress import Progress
    with engine_options.open() as eng, writing_to(to), Progress("export") as bar:
        summary = export(opened, to, engine=eng, fmt=fmt, body=body, flt=flt, split_size=engine_options.split_size,
                         force=force, progress=bar)
    stderr.print(f"exported {counted(summary['rows'], 'record')} of {counted(len(summary['stores']), 'store')} in "
                 f"{counted(summary['tasks'], 'task')} to {summary['destination']} ({counted(summary['files'], 'file')})",
                 markup=False)
    emit([{"topic": t, "rows": n} for t, n in sorted(summary["topics"].items())], "table",
         ["topic", "rows"], title="exported")
