"""`rmqtool consumers STORE...` (committed offsets, lag, the restart forecast per group) and
`rmqtool reset-offsets STORE` (move a group's committed offsets offline)."""
from __future__ import annotations

from typing import List, Optional

import typer

from rmqtool.cli.common import (CommitlogDirsOpt, FormatOpt, app, emit, format_time, note, open_store, open_stores,
                                say_loads)
from rmqtool.cli.options import Format, option
from rmqtool.errors import UsageError
from rmqtool.wording import counted

TABLE_COLUMNS = ["group", "topic", "queue_id", "committed_offset", "min_offset", "max_offset", "lag",
                 "next_store_time", "lag_seconds", "restart_status", "restart_next_offset", "restart_effect",
                 "retention_file", "retention_deleted_at", "retention_loses"]


@app.command("consumers")
def consumers_command(
    stores: List[str] = typer.Argument(..., metavar="STORE...", help="store roots (or quoted globs)"),
    group: Optional[str] = option("group", help="only this consumer group"),
    topic: Optional[str] = option("topic", help="only this topic"),
    file_reserved_hours: int = typer.Option(72, "--file-reserved-hours", metavar="HOURS",
                                            help="the broker's fileReservedTime: CommitLog files older than this "
                                                 "are deleted at --delete-when"),
    delete_when: str = typer.Option("04", "--delete-when", metavar="HH[;HH...]",
                                    help="the broker's deleteWhen: the hours (local time; TZ) its cleanup deletes expired "
                                         "CommitLog files"),
    fmt: Format = FormatOpt,
    commitlog_dirs: str = CommitlogDirsOpt,
):
    """Who has read what: one row per consumer group, topic and queue of config/consumerOffset.json
    (a light-queue broker's lmqConsumerOffset.json instead, with its %LMQ% groups), read as the broker
    loads it (its .bak when the main file is empty or does not parse), on every queue kind
    (ConsumeQueue, RocksDB ConsumeQueue, BatchConsumeQueue in message offsets, light queues; classic,
    DLedger and timer stores), with the queue's min and max offset after the restart the recovery forecast
    predicts, the lag, the store time of the next unconsumed message, what upstream's getMessage
    answers at the committed offset after that restart (restart_status, restart_next_offset: where
    the broker moves the group), and when the broker's cleanup deletes the CommitLog file holding the
    next unconsumed message. A per-group summary (retry and dead-letter topic sizes) goes to stderr."""
    from rmqtool.ops.consumers import COLUMNS, consumer_rows
    if file_reserved_hours < 0:
        raise UsageError("--file-reserved-hours must be 0 or more")
    opened = open_stores(stores, commitlog_dirs)
    fleet = len(opened) > 1
    all_rows = []
    for name, store in opened:
        store.require_root()
        rows, extra = consumer_rows(store, group=group, topic=topic, reserved_hours=file_reserved_hours,
                                    delete_when=delete_when)
        say_loads(name, extra["loads"], fleet)
        if all(load.source is None and not load.problems for load in extra["loads"]):
            files = " nor ".join(f"config/{load.name}" for load in extra["loads"])
            note(f"{name + ': ' if fleet else ''}no committed offsets: the store has neither {files}")
        for g in extra["groups"]:
            moved = f", {counted(g['moved_at_restart'], 'queue')} moved at restart" if g["moved_at_restart"] else ""
            sizes = "".join(f", {k.split('_')[0]} topic {counted(g[k], 'message')}" for k in ("retry_size", "dlq_size")
                            if g[k] is not None)
            note(f"{name + ': ' if fleet else ''}group {g['group']}: {counted(g['queues'], 'queue')}, lag {g['lag']}"
                 f"{moved}{sizes}")
        for r in rows:
            all_rows.append({"store": name, **r} if fleet else r)
    columns = (["store"] if fleet else []) + (TABLE_COLUMNS if fmt == "table" else COLUMNS)
    if fmt == "table":
        all_rows = [dict(r, next_store_time=format_time(r["next_store_time"]),
                         retention_deleted_at=format_time(r["retention_deleted_at"])) for r in all_rows]
    emit(all_rows, fmt, columns)


@app.command("reset-offsets")
def reset_offsets_command(
    store_path: str = typer.Argument(..., metavar="STORE", help="store root"),
    group: str = option("group", ..., help="the consumer group to move"),
    topic: Optional[str] = option("topic", help="only this topic of the group"),
    to_time: Optional[str] = typer.Option(None, "--to-time", metavar="TIME",
                                          help="the first offset stored at or after TIME (epoch ms or ISO-8601, "
                                               "UTC default): query-queue --time's offset"),
    to_earliest: bool = typer.Option(False, "--to-earliest", help="each queue's min offset"),
    to_latest: bool = typer.Option(False, "--to-latest", help="each queue's max offset (skip everything)"),
    to_offset: Optional[int] = option("to_offset", help="this offset on every queue (clamped to min..max)"),
    shift_by: Optional[int] = typer.Option(None, "--shift-by", metavar="N",
                                           help="move by N (negative: back) from the committed offset, clamped"),
    execute: bool = typer.Option(False, "--execute", help="write config/consumerOffset.json (default: a dry run "
                                                          "that only shows old -> new per queue)"),
    fmt: Format = FormatOpt,
    commitlog_dirs: str = CommitlogDirsOpt,
):
    """Move a consumer group's committed offsets offline (mqadmin resetOffsetByTime's twin). A dry
    run unless --execute, which writes config/consumerOffset.json as the broker does (the previous
    file becomes consumerOffset.json.bak; each file written to a temporary path, fsynced, renamed;
    the replaced ones kept as <name>.backup-<UTC time>), refused while the store's lock is held."""
    from rmqtool.cli.render import parse_time
    from rmqtool.ops.reset_offsets import Target, plan, write_plan
    given = [(m, v) for m, v in (("to_time", to_time), ("to_earliest", to_earliest or None),
                                 ("to_latest", to_latest or None), ("to_offset", to_offset),
                                 ("shift_by", shift_by)) if v is not None]
    if len(given) != 1:
        raise UsageError("give exactly one of --to-time, --to-earliest, --to-latest, --to-offset, --shift-by")
    mode, value = given[0]
    if mode == "to_time":
        value = parse_time(to_time, "--to-time")
    elif mode in ("to_earliest", "to_latest"):
        value = None
    store = open_store(store_path, commitlog_dirs).require_root()
    rows = plan(store, group, Target(mode, value), topic)
    emit(rows, fmt, ["group", "topic", "queue_id", "old_offset", "new_offset", "min_offset", "max_offset",
                     "clamped", "effect"])
    if not execute:
        note("dry run: nothing written (add --execute to write config/consumerOffset.json)")
        return
    done = write_plan(store, rows)
    for line in done["recovered"]:
        note(line)
    kept = ", ".join(p for p in done["backups"].values() if p)
    note(f"wrote {done['file']} ({done['bytes']} bytes)" + (f"; originals kept as {kept}" if kept else ""))
