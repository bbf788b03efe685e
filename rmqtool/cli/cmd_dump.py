"""`rmqtool dump commitlog|consumequeue|consumequeue-ext|index|checkpoint|dledger-entries|dledger-index`."""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import Optional

import typer

from rmqtool.cli.common import (CommitlogDirsOpt, FormatOpt, IndexEntriesOpt,
                                IndexSlotsOpt, app, emit, escape_control, format_time, note, open_store, parse_time,
                                stderr)
from rmqtool.cli.options import App, Body, Format, Layout, LayoutOpt, option
from rmqtool.ops.dump import (RecordFilter, check_range, checkpoint_rows, commitlog_rows, commitlog_target,
                          consumequeue_ext_rows, consumequeue_file_rows, consumequeue_rows, index_rows, index_target)
from rmqtool.io.consumequeue_ext import has_ext
from rmqtool.errors import EXIT_FINDINGS, CorruptDataError, StoreLayoutError, UsageError
from rmqtool.simplified import use_simplified
from rmqtool.wording import counted

dump_app = App(no_args_is_help=True, help="Dump any store file kind as a table, JSON or JSON lines.")
app.add_typer(dump_app, name="dump")

LimitOpt = option("limit", help="stop after this many rows")
TopicOpt = option("topic", help="only this topic")
QueueOpt = option("queue", help="only this queue id (with --topic)")
COMMITLOG_TABLE = ["phy_offset", "size", "kind", "topic", "queue_id", "queue_offset", "store_time",
                   "tags", "keys", "uniq_key", "body"]


def _limited(rows, limit):
    if limit is not None and limit < 0:
        raise UsageError("--limit must be >= 0")
    return rows if limit is None else itertools.islice(rows, limit)


def _damage_found(problems) -> int:
    """After every row was printed: one ``damaged: file@offset: what`` line on stderr per damaged file
    the walk went past (its first problem), and exit 1 (findings), as verify; 0 when there was none."""
    named = set()
    for exc in problems:
        if exc.path not in named:
            named.add(exc.path)
            stderr.print(f"damaged: {escape_control(str(exc))}", markup=False)
    return EXIT_FINDINGS if problems else 0


@dump_app.command("commitlog")
def dump_commitlog(
    target: str = typer.Argument(..., metavar="STORE|DIR|FILE",
                                 help="store root, commitlog directory, or one commitlog file"),
    fmt: Format = FormatOpt,
    topic: Optional[str] = TopicOpt,
    queue: Optional[int] = QueueOpt,
    from_offset: Optional[int] = option("from_offset", help="commitlog offset, inclusive"),
    to_offset: Optional[int] = option("to_offset", help="commitlog offset, exclusive"),
    begin: Optional[str] = option("begin", help="store time >= (epoch ms or ISO-8601)"),
    end: Optional[str] = option("end", help="store time <= (epoch ms or ISO-8601)"),
    limit: Optional[int] = LimitOpt,
    body: Optional[Body] = typer.Option(
        None, "--body", show_default="raw for json/jsonl, none for table",
        help="how to show message bodies (raw: base64 of the stored bytes, which write reads back byte-exact)"),
    commitlog_dirs: str = CommitlogDirsOpt,
    layout: Layout = LayoutOpt,
    base_offset: Optional[int] = typer.Option(None, "--base-offset", metavar="OFFSET",
                                              help="a single renamed file's start offset (its name is not 20 digits)"),
):
    """Every record (MESSAGE, BLANK, and where the data ends) with file, position and offset."""
    body = body or ("none" if fmt == "table" else "raw")
    if use_simplified(target, layout):
        from rmqtool.simplified import ops
        rows = ops.commitlog_rows(target, body, from_offset, to_offset, topic)
        emit(_limited(rows, limit), fmt, ops.COMMITLOG_COLUMNS if fmt == "table" else None)
        return
    flt = RecordFilter(topic, queue, from_offset, to_offset, parse_time(begin, "--begin"),
                       parse_time(end, "--end"))
    check_range(flt)
    store, files = commitlog_target(target, lambda p: open_store(p, commitlog_dirs), base_offset)
    damage = _Damage(live=bool(getattr(store, "is_live", lambda: False)()))
    as_text = fmt == "table" and body == "text"     # a table shows text bodies, binary ones as a hex preview
    rows = damage.watch(_limited(commitlog_rows(store, flt, body="base64" if as_text else body, files=files), limit))
    if body == "text":
        rows = _codec_hints(rows)
    if fmt == "table":
        rows = ({**r, "store_time": format_time(r.get("store_timestamp")),
                 "body": _table_body(r, as_text)} for r in rows)
        emit(rows, "table", COMMITLOG_TABLE)
    else:
        emit(_records_then_ends(rows) if fmt in ("csv", "tsv") else rows, fmt)
    return _damage_found(damage.problems)


def _records_then_ends(rows):
    """CSV/TSV: one section per row kind. The records stream as they come; the rows where a file's
    data ends (its BLANK, the data end; at most one per file) follow them under their own header,
    instead of a new section after every file."""
    ends = []
    for row in rows:
        if "end" in row:
            ends.append(row)
        else:
            yield row
    yield from ends


def _table_body(row: dict, as_text: bool):
    """A record's body as a table cell: the text when it is UTF-8, else ``hex:`` and its first bytes (no
    replacement characters in a table); the end row's detail for non-records."""
    from formats.commitlog import COMPRESSED_FLAG
    body = row.get("body")
    if as_text and row.get("inflated_body_length") is None and (row.get("sys_flag") or 0) & COMPRESSED_FLAG:
        return f"({row.get('note')})"           # not inflated: a hint, never the compressed bytes
    if not body:
        return row.get("detail")
    if not as_text:
        return body[:60]
    import base64
    raw = base64.b64decode(body)
    try:
        return raw.decode("utf-8")[:60]
    except UnicodeDecodeError:
        return "hex:" + raw[:24].hex() + ("…" if len(raw) > 24 else "")


def _codec_hints(rows):
    """The rows as they are; after the last, one note per codec a compressed body needed that is
    not installed (the body is null, its row's ``note`` says why)."""
    missing: dict[str, int] = {}
    for r in rows:
        if r.get("compression") and "not installed" in (r.get("note") or ""):
            missing[r["compression"]] = missing.get(r["compression"], 0) + 1
        yield r
    for codec, n in missing.items():
        note(f"{counted(n, 'body', 'bodies')} compressed with {codec} not shown as text: the {codec} "
             "codec is not installed (pip install 'rmqtool[codecs]')")


class _Damage:
    """The END rows where a file's walk stopped on torn or corrupt bytes (the walk goes on with the
    next file), as errors naming the file and position. On a store a broker holds, a torn record
    is the live tail being written, not damage."""

    def __init__(self, live: bool):
        self.live = live
        self.problems: list[CorruptDataError] = []

    def watch(self, rows):
        for r in rows:
            if r.get("kind") == "END" and r.get("end") in ("torn", "corrupt") and not (
                    self.live and r.get("end") == "torn"):
                self.problems.append(CorruptDataError(
                    f"the walk of this file stopped on {r['end']} data: {r.get('detail') or r['end']}"
                    f"{' (' + r['check'] + ')' if r.get('check') else ''}; the rows before it were printed",
                    r["file"], r["position"]))
            yield r


@dump_app.command("consumequeue")
def dump_consumequeue(
    target: str = typer.Argument(..., metavar="STORE|FILE", help="store root or one ConsumeQueue file"),
    fmt: Format = FormatOpt,
    topic: Optional[str] = TopicOpt,
    queue: Optional[int] = QueueOpt,
    limit: Optional[int] = LimitOpt,
    cq_file_size: Optional[int] = option("cq_file_size", help="mappedFileSizeConsumeQueue"),
    layout: Layout = LayoutOpt,
):
    """Every unit of every ConsumeQueue (or of one file), up to its logical end."""
    if use_simplified(target, layout):
        from rmqtool.simplified import ops
        emit(_limited(ops.consumer_queue_rows(target), limit), fmt, ops.CQ_COLUMNS if fmt == "table" else None)
        return
    p = Path(target)
    problems: list = []           # wrong-size files: an error after the rows they still yield
    store = None if p.is_file() else open_store(target)
    rows = consumequeue_file_rows(p, cq_file_size, problems) if store is None else consumequeue_rows(
        store, topic, queue, problems)
    columns = ["topic", "queue_id", "queue_offset", "kind", "commitlog_offset", "size", "tags_code", "file", "position"]
    if has_ext(p.parent.parent.parent.parent if store is None else store.root):
        columns[7:7] = ["ext_address", "store_timestamp", "filter_bitmap"]   # tags_code: the ext unit's
    emit(_limited(rows, limit), fmt, columns)
    return _damage_found([StoreLayoutError(f"ConsumeQueue file {message}; the whole units it holds were printed",
                                           path, size) for path, size, message in problems])


@dump_app.command("consumequeue-ext")
def dump_consumequeue_ext(
    target: str = typer.Argument(..., metavar="STORE", help="store root"),
    fmt: Format = FormatOpt,
    topic: Optional[str] = TopicOpt,
    queue: Optional[int] = QueueOpt,
    limit: Optional[int] = LimitOpt,
):
    """Every ConsumeQueueExt unit (4.x enableConsumeQueueExt) with its file, position and address, and
    where each file's data ends."""
    store = open_store(target)
    if not has_ext(store.root):
        raise UsageError("the store has no consumequeue_ext/ (written only by a broker with "
                         "enableConsumeQueueExt=true)", store.root)
    problems: list = []
    emit(_limited(consumequeue_ext_rows(store, topic, queue, problems), limit), fmt,
         ["topic", "queue_id", "kind", "ext_address", "size", "tags_code", "store_timestamp", "bitmap_size",
          "filter_bitmap", "file", "position"])
    return _damage_found(problems)


@dump_app.command("index")
def dump_index(
    target: str = typer.Argument(..., metavar="STORE|FILE", help="store root or one index file"),
    fmt: Format = FormatOpt,
    header_only: bool = typer.Option(False, "--header-only", help="only the 40-byte headers"),
    from_offset: Optional[int] = option("from_offset", help="index entries pointing at or after this commitlog offset"),
    to_offset: Optional[int] = option("to_offset", help="index entries pointing before this commitlog offset"),
    limit: Optional[int] = LimitOpt,
    index_slots: int = IndexSlotsOpt,
    index_entries: int = IndexEntriesOpt,
    layout: Layout = LayoutOpt,
):
    """Index file headers and entries (1 .. indexCount-1), with each entry's slot and time."""
    if use_simplified(target, layout):
        from rmqtool.simplified import ops
        rows = ops.index_rows(target, header_only, from_offset, to_offset)
        emit(_limited(rows, limit), fmt, ops.INDEX_COLUMNS if fmt == "table" else None)
        return
    files, geometry = index_target(target, lambda p: open_store(p, None, index_slots, index_entries),
                                   index_slots, index_entries)
    flt = RecordFilter(from_offset=from_offset, to_offset=to_offset)
    problems: list = []                 # damaged files: the walk goes on with the next one
    rows = _limited(index_rows(files, geometry, header_only, flt, problems), limit)
    emit(rows, fmt, ["kind", "file", "entry", "key_hash", "slot", "phy_offset", "time_diff", "prev_index",
                     "begin_timestamp", "end_timestamp", "begin_phy_offset", "end_phy_offset",
                     "hash_slot_count", "index_count"])
    return _damage_found(problems)


@dump_app.command("checkpoint")
def dump_checkpoint(
    target: str = typer.Argument(..., metavar="STORE|FILE", help="store root or the checkpoint file"),
    fmt: Format = FormatOpt,
):
    """The checkpoint's timestamps and offsets, with upstream's derived minimums."""
    rows = list(checkpoint_rows(target, lambda p: open_store(p)))
    if fmt == "table":
        from rmqtool.cli.rows import field_rows
        for r in rows:
            for k in ("physic_msg_timestamp", "logics_msg_timestamp", "index_msg_timestamp", "min_timestamp"):
                r[k + "_utc"] = format_time(r[k])
        emit(field_rows(rows[0]), "table", ["field", "value"])
    else:
        emit(rows, fmt)


ENTRY_TABLE = ["position", "index", "term", "pos", "size", "body_length", "message_phy_offset", "topic",
               "queue_id", "queue_offset", "keys"]


@dump_app.command("dledger-entries")
def dump_dledger_entries(
    target: str = typer.Argument(..., metavar="STORE", help="store root of a DLedger-mode broker"),
    fmt: Format = FormatOpt,
    limit: Optional[int] = LimitOpt,
    commitlog_dirs: str = CommitlogDirsOpt,
):
    """Every DLedger entry the walk accepts (index, term, pos, size, channel, chain/body CRC, body
    length) with the message it carries, and where each data file's entries end."""
    from rmqtool.ops.dledger import entry_rows
    rows = _limited(entry_rows(open_store(target, commitlog_dirs)), limit)
    emit(rows, fmt, ENTRY_TABLE + ["kind", "end"] if fmt == "table" else None)


@dump_app.command("dledger-index")
def dump_dledger_index(
    target: str = typer.Argument(..., metavar="STORE", help="store root of a DLedger-mode broker"),
    fmt: Format = FormatOpt,
    limit: Optional[int] = LimitOpt,
    commitlog_dirs: str = CommitlogDirsOpt,
):
    """The member's entry index (dledger-<selfId>/index/): one unit per entry index (magic, pos,
    size, index, term), up to the first unit without the entry magic."""
    from rmqtool.ops.dledger import index_rows
    rows = _limited(index_rows(open_store(target, commitlog_dirs)), limit)
    emit(rows, fmt, ["unit", "magic", "pos", "size", "index", "term", "file"] if fmt == "table" else None)


TimerPrecisionOpt = option("timer_precision_ms", help="timerPrecisionMs (default: found from the wheel, else 1000)")


@dump_app.command("timerlog")
def dump_timerlog(
    target: str = typer.Argument(..., metavar="STORE", help="store root of a broker with timerWheelEnable"),
    fmt: Format = FormatOpt,
    limit: Optional[int] = LimitOpt,
    precision_ms: Optional[int] = TimerPrecisionOpt,
):
    """Every timer log unit (timerlog/: prev pos, magic, enqueue time, slot time, the parked message's
    offset and size) and where each file's units end."""
    from rmqtool.ops.timer import timer_store, timerlog_rows
    rows = _limited(timerlog_rows(timer_store(open_store(target), precision_ms)), limit)
    emit(rows, fmt, ["kind", "pos", "prev_pos", "magic", "enqueue_time_ms", "slot_time_ms", "offset_py", "size_py",
                     "end", "detail"] if fmt == "table" else None)


@dump_app.command("timerwheel")
def dump_timerwheel(
    target: str = typer.Argument(..., metavar="STORE", help="store root of a broker with timerWheelEnable"),
    fmt: Format = FormatOpt,
    limit: Optional[int] = LimitOpt,
    precision_ms: Optional[int] = TimerPrecisionOpt,
):
    """Every wheel slot that holds something: its index, time, first and last unit, count."""
    from rmqtool.ops.timer import timer_store, timerwheel_rows
    rows = _limited(timerwheel_rows(timer_store(open_store(target), precision_ms)), limit)
    emit(rows, fmt, ["index", "time_ms", "first_pos", "last_pos", "num", "magic"] if fmt == "table" else None)


@dump_app.command("timercheck")
def dump_timercheck(
    target: str = typer.Argument(..., metavar="STORE", help="store root of a broker with timerWheelEnable"),
    fmt: Format = FormatOpt,
    precision_ms: Optional[int] = TimerPrecisionOpt,
):
    """The timer checkpoint (config/timercheck): read time, timer log flush position, timer queue offsets."""
    from rmqtool.ops.timer import timer_store, timercheck_rows
    emit(timercheck_rows(timer_store(open_store(target), precision_ms)), fmt)
