"""`rmqtool query-delayed STORE...` (delayed messages not yet delivered) and `rmqtool query-transactions
STORE...` (5.x transactions not yet resolved): the work the broker keeps in its own queues."""
from __future__ import annotations

from typing import List, Optional

import typer

from rmqtool.cli.common import CommitlogDirsOpt, FormatOpt, app, emit, note, open_stores, parse_time, say_loads
from rmqtool.cli.options import Format, option
from rmqtool.errors import EXIT_FINDINGS, UsageError
from rmqtool.wording import counted


def _check_limit(limit: Optional[int]) -> None:
    if limit is not None and limit <= 0:
        raise UsageError(f"--limit must be positive, not {limit}")


def _print(all_rows: list[dict], fmt: str, columns: list[str], fleet: bool) -> None:
    """The rows (their epoch-ms columns shown as times in a table, as every table shows them)."""
    columns = (["store"] if fleet else []) + columns
    emit(all_rows, fmt, columns)
    if not all_rows:
        raise typer.Exit(EXIT_FINDINGS)


@app.command("query-delayed")
def query_delayed_command(
    stores: List[str] = typer.Argument(..., metavar="STORE...", help="store roots (or quoted globs)"),
    topic: Optional[str] = option("topic", help="only messages for this real topic"),
    limit: Optional[int] = option("limit", help="at most N rows (per store)"),
    fmt: Format = FormatOpt,
    commitlog_dirs: str = CommitlogDirsOpt,
):
    """Delayed messages the broker has not delivered yet: for each delay level, the units of its
    SCHEDULE_TOPIC_XXXX queue (queue id = level - 1) from the offset the schedule service resumes
    from (config/delayOffset.json as the broker loads and clamps it) to the queue's max after the
    restart the recovery forecast predicts, with the real topic and queue, keys, store time and due
    time (the ConsumeQueue's tagsCode: store time + the level's delay). One line per level with
    messages waiting goes to stderr. Exit 0 when some are pending, 1 when none."""
    from rmqtool.ops.pending import DELAYED_COLUMNS, delayed
    _check_limit(limit)
    opened = open_stores(stores, commitlog_dirs)
    fleet = len(opened) > 1
    all_rows = []
    for name, store in opened:
        store.require_root()
        got = delayed(store, topic=topic, limit=limit)
        say_loads(name, got.loads, fleet)
        at = f"{name}: " if fleet else ""
        for lv in got.queues:
            moved = ""
            if lv["file_offset"] is not None and lv["offset_after_load"] != lv["file_offset"]:
                moved = f" (delayOffset.json says {lv['file_offset']}: the broker clamps it to its queue)"
            if lv["pending"] or moved:
                table = "" if lv["in_table"] else ", not in the broker's delay table: never delivered"
                note(f"{at}level {lv['delay_level']}{table}: queue {lv['queue_id']} [{lv['min_offset']}, "
                     f"{lv['max_offset']}), resumes at {lv['offset_after_load']}{moved}: {lv['pending']} waiting")
        all_rows += [{"store": name, **r} if fleet else r for r in got.rows]
    _print(all_rows, fmt, DELAYED_COLUMNS, fleet)


@app.command("query-transactions")
def query_transactions_command(
    stores: List[str] = typer.Argument(..., metavar="STORE...", help="store roots (or quoted globs)"),
    topic: Optional[str] = option("topic", help="only half messages for this real topic"),
    limit: Optional[int] = option("limit", help="at most N rows (per store)"),
    at: Optional[str] = typer.Option(None, "--at", metavar="TIME",
                                     help="give ages as of this time (epoch ms or ISO-8601, UTC default; "
                                          "default: now)"),
    fmt: Format = FormatOpt,
    commitlog_dirs: str = CommitlogDirsOpt,
):
    """5.x transactions not yet resolved: half messages of RMQ_SYS_TRANS_HALF_TOPIC at or past the
    offset the broker's transaction check resumes from (the committed offset of group
    CID_RMQ_SYS_TRANS in config/consumerOffset.json, the queue's min when it has none) that no op
    message of RMQ_SYS_TRANS_OP_HALF_TOPIC names (committed or rolled back), with their real topic
    and queue, producer group, transaction id (UNIQ_KEY), store time, age and how often the broker
    has checked them. One line per half queue goes to stderr. Exit 0 when some are pending, 1 when none."""
    from rmqtool.ops.pending import TRANSACTION_COLUMNS, transactions
    _check_limit(limit)
    now_ms = parse_time(at, "--at")
    opened = open_stores(stores, commitlog_dirs)
    fleet = len(opened) > 1
    all_rows = []
    for name, store in opened:
        store.require_root()
        got = transactions(store, topic=topic, limit=limit, now_ms=now_ms)
        say_loads(name, got.loads, fleet)
        at = f"{name}: " if fleet else ""
        for q in got.queues:
            where = ("the queue's min: no committed offset of CID_RMQ_SYS_TRANS" if q["check_offset"] is None
                     else f"committed offset {q['check_offset']}")
            note(f"{at}half queue {q['queue_id']} [{q['min_offset']}, {q['max_offset']}): the check resumes at "
                 f"{q['start_offset']} ({where}); {counted(q['op_messages'], 'op message')}; {q['pending']} unresolved")
        all_rows += [{"store": name, **r} if fleet else r for r in got.rows]
    _print(all_rows, fmt, TRANSACTION_COLUMNS, fleet)
