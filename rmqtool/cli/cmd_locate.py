"""`rmqtool locate`: the file and position of a commitlog offset or a queue offset."""
from __future__ import annotations

from typing import Optional

import typer

from rmqtool.cli.common import CommitlogDirsOpt, FormatOpt, app, emit, open_store
from rmqtool.cli.options import Format, Layout, LayoutOpt, option
from rmqtool.cli.rows import field_rows
from rmqtool.errors import EXIT_FINDINGS, UsageError
from rmqtool.ops.locate import locate_offset, locate_queue_offset
from rmqtool.simplified import use_simplified


@app.command("locate")
def locate_command(
    store: str = typer.Argument(..., metavar="STORE", help="store root"),
    offset: Optional[int] = typer.Argument(None, metavar="OFFSET", help="commitlog (physical) offset"),
    topic: Optional[str] = option("topic", help="the topic of --queue-offset"),
    queue: Optional[int] = option("queue", help="the queue id of --queue-offset (with --topic)"),
    queue_offset: Optional[int] = typer.Option(None, "--queue-offset", metavar="N",
                                               help="a queue offset of --topic/--queue to locate"),
    fmt: Format = FormatOpt,
    commitlog_dirs: str = CommitlogDirsOpt,
    layout: Layout = LayoutOpt,
):
    """Which file and position hold OFFSET (and the record containing it), or a queue offset."""
    if offset is not None and (topic or queue is not None or queue_offset is not None):
        raise UsageError("give either OFFSET or --topic/--queue/--queue-offset, not both")
    simplified = use_simplified(store, layout)
    s = None if simplified else open_store(store, commitlog_dirs)
    if simplified:
        from rmqtool.simplified import ops
        if offset is None and queue_offset is None:
            raise UsageError("give a commitlog OFFSET or --queue-offset (the simplified store has one queue)")
        result = ops.locate_offset(store, offset) if offset is not None else ops.locate_queue_offset(
            store, queue_offset)
    elif offset is not None:
        result = locate_offset(s, offset)
    elif topic is not None and queue is not None and queue_offset is not None:
        result = locate_queue_offset(s, topic, queue, queue_offset)
    else:
        raise UsageError("give a commitlog OFFSET, or --topic, --queue and --queue-offset")
    if fmt == "table":                   # one object: a vertical table, nested fields named with dots
        emit(field_rows(result), "table", ["field", "value"])
    else:
        emit([result], fmt)
    if not result.get("found"):
        raise typer.Exit(EXIT_FINDINGS)
