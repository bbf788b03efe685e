"""`rmqtool stats STORE...`: messages, bytes and rates per topic, per queue, per CommitLog file, over time."""
from __future__ import annotations

from typing import List, Optional

import typer

from rmqtool.cli.common import (CommitlogDirsOpt, FormatOpt, IdleIoOpt, MaxReadRateOpt, gentle, app,
                                emit, escape_control, format_time, human_size, open_stores,
                                EngineOptions, with_engine_options)
from rmqtool.cli.options import Bucket, Format
from rmqtool.cli.rows import check_kind, emit_kinds, prose
from rmqtool.errors import UsageError
from rmqtool.wording import counted


@app.command("stats")
@with_engine_options
def stats_command(
    stores: List[str] = typer.Argument(..., metavar="STORE...", help="store roots (or quoted globs)"),
    by: Optional[Bucket] = typer.Option(None, "--by", help="also count per time bucket"),
    kind: Optional[str] = typer.Option(None, "--kind", metavar="KIND", help="print only this kind of row: topic | queue | file | "
                                       "bucket (with --by) | total (default: every kind, one table or CSV "
                                       "section each)"),
    max_read_rate: Optional[float] = MaxReadRateOpt,
    idle_io: bool = IdleIoOpt,
    fmt: Format = FormatOpt,
    commitlog_dirs: str = CommitlogDirsOpt,
    engine_options: EngineOptions = EngineOptions(),
):
    """What a store holds: per topic (the largest first: which topic fills the disk), per queue
    (messages, bytes, first/last store time, rate), per CommitLog file (time range, fill) and in total;
    with --by, per time bucket, drawn as a sparkline in tables. Every row names its kind."""
    from rmqtool.ops.stats import ROW_KINDS, sparkline, stats
    check_kind(kind, ROW_KINDS)
    gentle(max_read_rate, idle_io)
    by = None if by is None else by.value
    if by is None and kind == "bucket":
        raise UsageError("--kind bucket counts per time bucket: add --by minute|hour|day")
    opened = open_stores(stores, commitlog_dirs)
    from rmqtool.cli.progress import Progress
    with engine_options.open() as eng, Progress("stats") as bar:
        results = stats(opened, by, engine=eng, split_size=engine_options.split_size,
                        progress=bar)    # several stores: one engine run
    wanted = ROW_KINDS if kind is None else (kind,)
    if fmt != "table":
        emit_kinds((row for r in results for row in r.rows() if row["kind"] in wanted), fmt, ROW_KINDS)
        return
    fleet = len(results) > 1
    for r in results:
        rows = r.rows()
        for k in wanted:
            table = [dict(x, **_people(x)) for x in rows if x["kind"] == k]
            if table:
                emit(table, "table", TABLE_COLUMNS[k], title=escape_control(f"{r.store}: {TITLES[k]}"
                                                                             if fleet or k == "topic" else TITLES[k]))
        if r.buckets and "bucket" in wanted:
            counts = [v[0] for _, v in sorted(r.buckets.items())]
            prose().print(f"per {by}: {sparkline(counts)}  (max {counted(max(counts), 'message')})", markup=False)


#: the columns of each kind's table (the machine formats carry every field, epoch ms and bytes exact)
TABLE_COLUMNS = {
    "topic": ["topic", "queues", "messages", "size", "share", "first", "last", "messages_per_second"],
    "queue": ["topic", "queue_id", "messages", "size", "first", "last", "messages_per_second"],
    "file": ["name", "messages", "size", "filled", "end", "first", "last"],
    "bucket": ["start", "messages", "size"],
    "total": ["topics", "queues", "messages", "size", "first", "last", "messages_per_second"],
}
TITLES = {"topic": "topics, the largest first", "queue": "queues", "file": "commitlog files",
          "bucket": "time buckets", "total": "total"}


def _people(row: dict) -> dict:
    """A row's table cells for people: times in ISO, sizes in KB/MB, fractions in percent."""
    out = {"size": human_size(row["bytes"])}
    if "first_store_time" in row:
        out.update(first=format_time(row["first_store_time"]), last=format_time(row["last_store_time"]))
    if row.get("share") is not None:
        out["share"] = f"{row['share']:.1%}"
    if row["kind"] == "file":
        out.update(name=row["file"].rsplit("/", 1)[-1],
                   filled=f"{row['fill']:.0%}" if row["fill"] is not None else "")
    if row["kind"] == "bucket":
        out["start"] = format_time(row["bucket_start"])
    return out
