"""`rmqtool stats STORE...`: messages, bytes and rates per topic/queue, per CommitLog file, over time."""
from __future__ import annotations

from typing import List, Optional

import typer

from rmqtool.cli.common import (FORMATS, CommitlogDirsOpt, FormatOpt, IdleIoOpt, MaxReadRateOpt, gentle, app,
                                check_choice, emit, escape_control, format_time, human_size, open_stores,
                                stdout, EngineOptions, with_engine_options)
from rmqtool.wording import counted


@app.command("stats")
@with_engine_options
def stats_command(
    stores: List[str] = typer.Argument(..., help="store roots (or quoted globs)"),
    by: Optional[str] = typer.Option(None, "--by", help="also count per time bucket: minute | hour | day"),
    max_read_rate: Optional[float] = MaxReadRateOpt,
    idle_io: bool = IdleIoOpt,
    fmt: str = FormatOpt,
    commitlog_dirs: str = CommitlogDirsOpt,
    engine_options: EngineOptions = EngineOptions(),
):
    """What a store holds: per topic and queue (messages, bytes, first/last store time, rate), per CommitLog
    file (time range, fill) and in total; with --by, per time bucket, drawn as a sparkline in tables."""
    from rmqtool.ops.stats import BUCKETS, sparkline, stats
    check_choice(fmt, FORMATS, "--format")
    gentle(max_read_rate, idle_io)
    if by is not None:
        check_choice(by, tuple(BUCKETS), "--by")
    opened = open_stores(stores, commitlog_dirs)
    from rmqtool.cli.progress import Progress
    with engine_options.open() as eng, Progress("stats") as bar:
        results = stats(opened, by, engine=eng, split_size=engine_options.split_size,
                        progress=bar)    # several stores: one engine run
    if fmt != "table":
        emit((row for r in results for row in r.rows()), fmt)
        return
    for r in results:
        rows = r.rows()
        queues = [dict(x, first=format_time(x["first_store_time"]), last=format_time(x["last_store_time"]),
                       size=human_size(x["bytes"])) for x in rows if x["kind"] == "queue"]
        emit(queues, "table", ["topic", "queue_id", "messages", "size", "first", "last", "messages_per_second"],
             title=f"{r.store}: topics and queues")
        files = [dict(x, name=x["file"].rsplit("/", 1)[-1], first=format_time(x["first_store_time"]),
                      last=format_time(x["last_store_time"]), size=human_size(x["bytes"]),
                      filled=f"{x['fill']:.0%}" if x["fill"] is not None else "")
                 for x in rows if x["kind"] == "file"]
        emit(files, "table", ["name", "messages", "size", "filled", "end", "first", "last"], title="commitlog files")
        t = r.total.row()
        stdout.print(escape_control(
            f"total: {counted(t['messages'], 'message')}, {human_size(t['bytes'])} in {counted(len(r.queues), 'queue')}, "
            f"{format_time(t['first_store_time'])} .. {format_time(t['last_store_time'])}"
            + (f", {t['messages_per_second']} messages/s" if t["messages_per_second"] else "")), markup=False)
        if r.buckets:
            counts = [v[0] for _, v in sorted(r.buckets.items())]
            stdout.print(f"per {by}: {sparkline(counts)}  (max {counted(max(counts), 'message')})", markup=False)
