"""`rmqtool stats STORE...`: messages, bytes and rates per topic/queue, per CommitLog file, over time."""
from __future__ import annotations

from typing import List, Optional

import typer

from rmqtool.errors import UsageError
from rmqtool.cli.common import (FORMATS, CommitlogDirsOpt, EngineOpt, JobsOpt, MasterOpt, RemoteOpt, SparkConfOpt,
                                SplitOpt, make_engine, FormatOpt, IdleIoOpt, MaxReadRateOpt, gentle, app, check_choice, emit, escape_control,
                                format_time, human_size, open_stores, stdout)


@app.command("stats")
def stats_command(
    stores: List[str] = typer.Argument(..., help="store roots (or quoted globs)"),
    by: Optional[str] = typer.Option(None, "--by", help="also count per time bucket: minute | hour | day"),
    max_read_rate: Optional[float] = MaxReadRateOpt,
    idle_io: bool = IdleIoOpt,
    fmt: str = FormatOpt,
    commitlog_dirs: str = CommitlogDirsOpt,
    engine: str = EngineOpt,
    jobs: int = JobsOpt,
    master: Optional[str] = MasterOpt,
    remote: Optional[str] = RemoteOpt,
    spark_conf: Optional[List[str]] = SparkConfOpt,
    split_size: Optional[int] = SplitOpt,
):
    """What a store holds: per topic and queue (messages, bytes, first/last store time, rate), per CommitLog
    file (time range, fill) and in total; with --by, per time bucket, drawn as a sparkline in tables."""
    from rmqtool.ops.stats import BUCKETS, sparkline, stats_with_engine, store_stats
    check_choice(fmt, FORMATS, "--format")
    gentle(max_read_rate, idle_io)
    if by is not None:
        check_choice(by, tuple(BUCKETS), "--by")
    if jobs < 0:
        raise UsageError(f"--jobs must be 0 (one per CPU) or positive, not {jobs}")
    if split_size is not None and split_size <= 0:
        raise UsageError(f"--split-size must be positive, not {split_size}")
    opened = open_stores(stores, commitlog_dirs)
    if engine == "local" and jobs == 1:
        results = [store_stats(s, name, by) for name, s in opened]
    else:                        # every store's walk as the tasks of one run
        with make_engine(engine, jobs, master, remote, spark_conf) as eng:
            results = stats_with_engine(eng, opened, by, split_size)
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
            f"total: {t['messages']} messages, {human_size(t['bytes'])} in {len(r.queues)} queues, "
            f"{format_time(t['first_store_time'])} .. {format_time(t['last_store_time'])}"
            + (f", {t['messages_per_second']} messages/s" if t["messages_per_second"] else "")), markup=False)
        if r.buckets:
            counts = [v[0] for _, v in sorted(r.buckets.items())]
            stdout.print(f"per {by}: {sparkline(counts)}  (max {max(counts)} messages)", markup=False)
