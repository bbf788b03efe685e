"""`query-key`, `query-id`, `query-queue`: find messages the way the broker does, offline."""
from __future__ import annotations

from typing import List, Optional

import typer

from rmqtool.cli.common import (BodyOpt, CommitlogDirsOpt, FormatOpt, IndexEntriesOpt,
                                IndexSlotsOpt, app, emit, format_time, note, open_store, open_stores,
                                parse_time, EngineOptions, with_engine_options)
from rmqtool.cli.options import Body, Boundary, Format, Layout, LayoutOpt, option
from rmqtool.cli.rows import prose
from rmqtool.output.schema import record_to_dict
from rmqtool.errors import EXIT_FINDINGS, UsageError
from rmqtool.wording import agree, counted

TABLE_COLUMNS = ["phy_offset", "topic", "queue_id", "queue_offset", "store_time", "keys", "uniq_key"]


def _notes(notes) -> None:
    for n in dict.fromkeys(notes):
        note(n)


def _table_rows(records: list[dict], extra: list[str]) -> list[dict]:
    rows = []
    for r in records:
        row = dict(r)
        row["store_time"] = format_time(r.get("store_timestamp"))
        rows.append(row)
    return rows


def _render(records: list[dict], fmt: str, extra: list[str], title: str) -> None:
    if fmt == "table":
        emit(_table_rows(records, extra), "table", TABLE_COLUMNS + extra, title=title)
    else:
        emit(records, fmt)


@app.command("query-key")
@with_engine_options
def query_key_command(
    stores: List[str] = typer.Argument(..., metavar="STORE... KEY",
                                       help="store root(s) (several paths or quoted globs: a fleet), then the "
                                            "message key (a KEYS token) or UNIQ_KEY"),
    topic: Optional[str] = option("topic", help="topic; default: every topic named by consumequeue/ "
                                                "directories and config/topics.json"),
    begin: Optional[str] = option("begin", help="earliest store time (epoch ms or ISO-8601, UTC default)"),
    end: Optional[str] = option("end", help="latest store time (epoch ms or ISO-8601, UTC default)"),
    max_num: Optional[int] = option("limit", help="at most N results (no cap by default)"),
    raw: bool = typer.Option(False, "--raw", help="upstream's unconfirmed hash hits in upstream's order "
                                                   "(--limit capped at 64 like the broker)"),
    scan: bool = typer.Option(False, "--scan", help="ignore the index: scan the whole CommitLog"),
    fmt: Format = FormatOpt,
    body: Body = BodyOpt,
    commitlog_dirs: str = CommitlogDirsOpt,
    index_slots: int = IndexSlotsOpt,
    index_entries: int = IndexEntriesOpt,
    engine_options: EngineOptions = EngineOptions(),
    layout: Layout = LayoutOpt,
):
    """Messages carrying KEY (KEYS token or UNIQ_KEY) via the index, confirmed on the CommitLog.

    With several stores each is searched (--limit applies per store) and every row names
    its store; --scan --engine spark (or --jobs N) scans them all in one engine run."""
    from rmqtool.ops.query.bykey import LONG_MAX
    from rmqtool.ops.query.keyscan import query_key_stores
    from rmqtool.simplified import use_simplified
    if len(stores) < 2:
        raise UsageError("query-key needs a STORE and a KEY")
    *paths, key = stores
    if len(paths) == 1 and use_simplified(paths[0], layout):     # the article's store: KEY is a msgId
        from rmqtool.cli import simplified_store as simplified_cli
        raise typer.Exit(simplified_cli.query_key(paths[0], key, fmt, body))
    if raw and scan:
        raise UsageError("--raw reads the index only; it cannot be combined with --scan")
    lo = parse_time(begin, "--begin")
    hi = parse_time(end, "--end")
    lo, hi = 0 if lo is None else lo, LONG_MAX if hi is None else hi
    opened = open_stores(paths, commitlog_dirs, index_slots, index_entries)
    from rmqtool.cli.progress import Progress
    with engine_options.open(scan_option=scan) as eng, Progress("query-key: scanning") as bar:
        results = query_key_stores(opened, key, topic, lo, hi, max_num=max_num, raw=raw, scan=scan, engine=eng,
                                   split_size=engine_options.split_size, progress=bar)
    fleet = len(opened) > 1
    rows, records, unconfirmed = [], [], 0
    for name, res in results:
        _notes([f"{name}: {n}" if fleet else n for n in res.notes])
        unconfirmed += res.unconfirmed
        if raw:
            rows += [dict(order=i, **({"store": name} if fleet else {}), **r) for i, r in enumerate(res.raw)]
        for h in ([] if raw else res.hits):
            rec = h.record(body)
            if fleet:
                rec["store"] = name
            records.append(rec)
    if raw:
        emit(rows, fmt, (["store"] if fleet else []) + ["order", "topic", "phy_offset"],
             title="unconfirmed index hits")
        found = bool(rows)
    else:
        title = f"messages with key {key!r}"
        if fmt == "table" and fleet:
            emit(_table_rows(records, []), "table", ["store"] + TABLE_COLUMNS + ["matched_by", "indexed"],
                 title=title)
        else:
            _render(records, fmt, ["matched_by", "indexed"], title)
        if unconfirmed:
            note(f"{counted(unconfirmed, 'index hash hit')} {agree(unconfirmed, 'was another key', 'were other keys')} "
                 "or outside the window (not reported; see --raw)")
        found = bool(records)
    if not found:
        raise typer.Exit(EXIT_FINDINGS)



@app.command("query-id")
@with_engine_options
def query_id_command(
    store: str = typer.Argument(..., metavar="STORE", help="store root"),
    msg_id: str = typer.Argument(..., metavar="ID", help="offsetMsgId or UNIQ_KEY (client message id)"),
    scan: bool = typer.Option(False, "--scan", help="ignore the index for a UNIQ_KEY: scan the CommitLog"),
    fmt: Format = FormatOpt,
    body: Body = BodyOpt,
    commitlog_dirs: str = CommitlogDirsOpt,
    index_slots: int = IndexSlotsOpt,
    index_entries: int = IndexEntriesOpt,
    engine_options: EngineOptions = EngineOptions(),
):
    """Find a message by id: an offsetMsgId if a record from that store host starts at its
    offset, otherwise a UNIQ_KEY looked up in the index of every topic (then by scan).

    What the id is (its kind; a UNIQ_KEY's client address, pid and time) is the JSON object's
    ``kind`` and ``decoded``, the last JSONL line's ``summary``, and a line before the table."""
    from rmqtool.ops.query.byid import query_id
    s = open_store(store, commitlog_dirs, index_slots, index_entries)
    from rmqtool.cli.progress import Progress
    with engine_options.open() as eng, Progress("query-id: scanning") as bar:
        res = query_id(s, msg_id, scan=scan, engine=eng, split_size=engine_options.split_size, progress=bar)
    _notes(res.notes)
    records = [h.record(body) for h in res.hits]
    for r in records:
        r["id_kind"] = res.kind
    if fmt == "json":
        emit([{"id": msg_id, "kind": res.kind, "decoded": res.decoded, "records": records}], "json")
    elif fmt == "jsonl":                 # the records, then what the id is
        emit(records + [{"summary": {"id": msg_id, "kind": res.kind, "decoded": res.decoded}}], fmt)
    elif fmt in ("csv", "tsv"):
        emit(records, fmt)
    else:
        line = f"{msg_id}: {res.kind}"
        d = res.decoded or {}
        if res.kind == "uniqKey" and d:
            line += f"  client ip {d.get('ip')}  pid {d.get('pid')}  time {format_time(d.get('timestamp'))}"
        elif res.kind == "uniqKey":
            line += "  (not in the Java client's format: not decodable)"
        prose().print(line, markup=False)
        _render(records, "table", ["id_kind"], "messages")
    if not records:
        raise typer.Exit(EXIT_FINDINGS)


def _positional_alias(option: str, value, positional):
    """query-queue's topic and queue: the option, or the old positional form (not both, unless equal)."""
    if value is not None and positional is not None and value != positional:
        raise UsageError(f"{option} {value} and the positional {positional} disagree: give one")
    value = value if value is not None else positional
    if value is None:
        raise UsageError(f"query-queue needs {option}")
    return value


@app.command("query-queue")
def query_queue_command(
    store: str = typer.Argument(..., metavar="STORE", help="store root"),
    topic_arg: Optional[str] = typer.Argument(None, metavar="TOPIC", hidden=True,
                                              help="the topic (old positional form of --topic)"),
    queue_arg: Optional[int] = typer.Argument(None, metavar="ID", hidden=True,
                                              help="the queue id (old positional form of --queue)"),
    topic: Optional[str] = option("topic", help="the topic (required)"),
    queue: Optional[int] = option("queue", help="the queue id (required)"),
    offset: Optional[int] = typer.Option(None, "--offset", metavar="N", help="first queue offset to read"),
    count: Optional[int] = option("limit", help="units to read (default 1 with --offset)"),
    time: Optional[str] = typer.Option(None, "--time", metavar="TIME", help="queue offset for this store time "
                                       "(epoch ms or ISO-8601), as upstream HEAD"),
    boundary: Boundary = typer.Option(Boundary.lower, "--boundary", help="which offset for --time: the first "
                                      "stored at or after it (lower) or the last at or before it (upper)"),
    fmt: Format = FormatOpt,
    body: Body = BodyOpt,
    commitlog_dirs: str = CommitlogDirsOpt,
):
    """ConsumeQueue units of --topic/--queue from --offset and their records, or the queue offset for --time."""
    from rmqtool.ops.query.byqueue import QueueView
    from rmqtool.records.single import RecordReader
    topic, queue = _positional_alias("--topic", topic, topic_arg), _positional_alias("--queue", queue, queue_arg)
    boundary = boundary.value
    s = open_store(store, commitlog_dirs)
    s.require_topic(topic, queue)
    if (offset is None) == (time is None):
        raise UsageError("give exactly one of --offset N or --time T")
    if count is not None and count <= 0:
        raise UsageError(f"--limit must be positive, not {count}")
    view = QueueView(s, topic, queue)
    try:
        if time is not None:
            ts = parse_time(time, "--time")
            result = view.offset_by_time(ts, boundary)
            row = {"topic": topic, "queue_id": queue, "timestamp": ts, "boundary": boundary,
                   "queue_offset": result, "min_offset": view.min_offset, "max_offset": view.max_offset}
            if count is None:
                emit([row], fmt, list(row), title="offset by time")
                return
            note(f"{boundary} queue offset for {ts} is {result}")
            offset = result
        reader = RecordReader(s)
        records = []
        for q, phy, size, tags in view.units(offset, count or 1):
            batch = reader.read(phy)
            rec = record_to_dict(batch, 0, body=body) if batch is not None else {
                "phy_offset": phy, "note": "no complete record starts at this commitlog offset"}
            rec.update(cq_queue_offset=q, cq_commitlog_offset=phy, cq_size=size, cq_tags_code=tags)
            records.append(rec)
        reader.close()
        if not records:
            note(f"{topic}/{queue} holds queue offsets [{view.min_offset}, {view.max_offset})")
        if fmt == "table":
            emit(_table_rows(records, []), "table", ["cq_queue_offset"] + TABLE_COLUMNS + ["tags"],
                 title=f"{topic}/{queue}")
        else:
            emit(records, fmt)
        if not records:
            raise typer.Exit(EXIT_FINDINGS)
    finally:
        view.close()
