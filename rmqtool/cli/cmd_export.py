"""`rmqtool export STORE... -o DIR`: records to Parquet / JSON lines, partitioned by topic."""
from __future__ import annotations

from typing import List, Optional

import typer

from rmqtool.cli.common import (IdleIoOpt, MaxReadRateOpt, gentle, CommitlogDirsOpt, app, emit,
                                open_store, parse_time, stderr, EngineOptions, with_engine_options)
from rmqtool.cli.options import ExportBody, ExportFormat, option
from rmqtool.ops.dump import RecordFilter, check_range
from rmqtool.errors import writing_to
from rmqtool.wording import counted



@app.command("export")
@with_engine_options
def export_command(
    stores: List[str] = typer.Argument(..., metavar="STORE...", help="store roots (several paths or a quoted glob)"),
    to: str = option("output", ..., metavar="DIR|URI",
                     help="destination directory or storage URI (s3://bucket/prefix, gs://, hdfs://): where every "
                          "task writes its part files (for Spark: a place every executor reaches)"),
    fmt: ExportFormat = typer.Option(ExportFormat.parquet, "--format", "-f", help="the format of the files written"),
    topic: Optional[str] = option("topic", help="only this topic"),
    queue: Optional[int] = option("queue", help="only this queue id (with --topic)"),
    from_offset: Optional[int] = option("from_offset", help="commitlog offset, inclusive"),
    to_offset: Optional[int] = option("to_offset", help="commitlog offset, exclusive"),
    begin: Optional[str] = option("begin", help="store time >= (epoch ms or ISO-8601)"),
    end: Optional[str] = option("end", help="store time <= (epoch ms or ISO-8601)"),
    body: ExportBody = typer.Option(ExportBody.raw, "--body",
                                    help="message bodies as stored (raw), as UTF-8 text (inflated), or none"),
    force: bool = typer.Option(False, "--force", help="replace a previous export in --output"),
    max_read_rate: Optional[float] = MaxReadRateOpt,
    idle_io: bool = IdleIoOpt,
    engine_options: EngineOptions = EngineOptions(),
    commitlog_dirs: str = CommitlogDirsOpt,
):
    """Export every MESSAGE of one or many stores, one row each with its store name."""
    from rmqtool.io.stores import open_stores
    from rmqtool.ops.export import export
    fmt, body = fmt.value, body.value
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
