"""`rmqtool info STORE`: files, geometry, topics/queues, checkpoint, liveness, recovery start."""
from __future__ import annotations

from typing import Optional

import typer

from rmqtool.cli.common import (CommitlogDirsOpt, FormatOpt, IndexEntriesOpt, IndexSlotsOpt, app,
                                emit, escape_control, format_time, open_store)
from rmqtool.cli.options import Format
from rmqtool.cli.rows import check_kind, emit_kinds, field_rows, prose
from formats.checkpoint import CHECKPOINT_FILE_SIZE
from rmqtool.ops.info import store_info
from rmqtool.wording import counted


@app.command("info")
def info_command(
    store: str = typer.Argument(..., metavar="STORE", help="store root directory"),
    fmt: Format = FormatOpt,
    commitlog_dirs: str = CommitlogDirsOpt,
    index_slots: int = IndexSlotsOpt,
    index_entries: int = IndexEntriesOpt,
    count: bool = typer.Option(False, "--count", help="count every message of the store (walks every CommitLog file)"),
    kind: Optional[str] = typer.Option(None, "--kind", metavar="KIND", help="print only this kind of row: store (one row: files, "
                                       "geometry, checkpoint, liveness, recovery) | queue (one per consume queue); "
                                       "default: both, one CSV section or table each"),
):
    """Summarize a store: files, geometry, queues, checkpoint, liveness, where recovery starts.

    JSON is one object (its queues under ``queues``); JSONL and CSV/TSV rows name their kind: one
    ``store`` row (nested fields named with dots: ``commitlog.valid_end``), then one ``queue`` row per
    consume queue. A table
    shows the store as text (on stderr when stdout is not a terminal), then the queues."""
    check_kind(kind, ROW_KINDS)
    s = open_store(store, commitlog_dirs, index_slots, index_entries)
    if count:                                      # a walk of every CommitLog file: a bar on a terminal
        from rmqtool.cli.progress import Progress
        with Progress("info --count", unit="files") as bar:
            info = store_info(s, count_all=True, progress=bar)
    else:
        info = store_info(s)
    if fmt == "json" and kind is None:
        emit([info], fmt)
        return
    rows = [row for row in info_rows(info) if kind in (None, row["kind"])]
    if fmt != "table":
        emit_kinds(rows, fmt, ROW_KINDS)
        return
    if kind == "store":
        emit(field_rows({k: v for k, v in rows[0].items() if k != "kind"}), "table", ["field", "value"])
        return
    if kind is None:
        _store_lines(info)
    emit(info["queues"], "table", QUEUE_COLUMNS, title="consume queues")


#: the kinds of row ``info`` prints, in its order
ROW_KINDS = ("store", "queue")
QUEUE_COLUMNS = ["topic", "queue_id", "files", "min_offset", "max_offset", "max_phy_offset"]


def info_rows(info: dict) -> list[dict]:
    """``store_info`` as rows: the store (every field but the queues; nested fields named with dots,
    ``commitlog.valid_end``), then one row per queue."""
    store = {r["field"]: r["value"] for r in field_rows({k: v for k, v in info.items() if k != "queues"})}
    return [{"kind": "store", **store}] + [{"kind": "queue", **q} for q in info["queues"]]


def _store_lines(info: dict) -> None:
    """The store's summary as text for people (``prose``: stdout on a terminal, else stderr)."""
    out = prose()
    cl = info["commitlog"]
    out.print(f"[bold]store[/bold] {info['root']}")
    out.print(f"  live: {'yes, lock held by ' + info['lock_owner_text'] if info['live'] else 'no'}"
                 f"   abort file: {'present (last shutdown was not clean)' if info['abort'] else 'absent'}",
                 markup=False)
    from rmqtool.io.fileio import how_link_is_read
    for link in info["symlinks"]:
        out.print(f"  warning: symlink {escape_control(link['path'])} -> {escape_control(link['target'])} "
                     f"({how_link_is_read(link['path'])})", markup=False)
    out.print(f"[bold]commitlog[/bold] {counted(cl['files'], 'file')} of {cl['file_size']} bytes in "
                 f"{', '.join(cl['dirs'])}")
    how_many = (f"messages {cl['messages']} in the store, " if cl["messages"] is not None else "") + \
        f"{cl['messages_from_recovery_start']} from the recovery start file" + \
        ("" if cl["messages"] is not None else " (--count for the whole store)")
    out.print(f"  min offset {cl['min_offset']}  valid end {cl['valid_end']} ({cl['end_kind']})  {how_many}",
                 markup=False)
    if cl.get("records_past_valid_end"):
        out.print(f"  {counted(cl['records_past_valid_end'], 'record')} past the valid end: a restart truncates them "
                     "(`verify --level deep -f jsonl` lists them)", markup=False)
    for p in cl["problems"]:
        out.print(f"  [red]{p}[/red]")
    rec = info["recovery"]
    out.print(f"[bold]recovery[/bold] would start at file {rec['start_file']} ({rec['mode']}, {rec['rule']})")
    ix = info["index"]
    out.print(f"[bold]index[/bold] {counted(ix['files'], 'file')}, {ix['hash_slots']} slots x {ix['index_entries']} entries")
    cp = info["checkpoint"]
    if cp:
        out.print(f"[bold]checkpoint[/bold] physic {format_time(cp['physic_msg_timestamp'])}  "
                     f"logics {format_time(cp['logics_msg_timestamp'])}  index {format_time(cp['index_msg_timestamp'])}"
                     f"  confirm {cp['confirm_phy_offset']}")
        if cp["file_size"] != CHECKPOINT_FILE_SIZE:      # read from its first page, as the broker does
            out.print(f"  warning: checkpoint is {cp['file_size']} bytes, expected {CHECKPOINT_FILE_SIZE} "
                         f"(read from its first {CHECKPOINT_FILE_SIZE})")
    if "controller" in info:
        _controller_lines(info["controller"])
    if "dledger" in info:
        _dledger_lines(info["dledger"])
    if "rocksdb_consumequeue" in info:
        r = info["rocksdb_consumequeue"]
        out.print(escape_control(
            f"consumequeue: RocksDB (read-only) at {r['path']}: {counted(r['units'], 'unit')} in {counted(r['queues'], 'queue')}, "
            f"dispatched to {r['max_phy_offset_checkpoint']}"
            + (f"; {counted(r['bad_entries'], 'entry')} that are not units" if r["bad_entries"] else "")), markup=False)
    if "timer" in info:
        t = info["timer"]
        due = ("" if t["first_due_ms"] is None else
               f", due {format_time(t['first_due_ms'])} .. {format_time(t['last_due_ms'])}")
        out.print(escape_control(
            f"timer: {t['pending']} pending ({t['rolling']} rolling){due}; precision {t['precision_ms']} ms, "
            f"{counted(t['timer_log_files'], 'timer log file')} to {t['timer_log_end']}"
            + (f"; DAMAGED at {t['timer_log_damage'][0]['file']}@{t['timer_log_damage'][0]['position']}"
               if t["timer_log_damage"] else "")), markup=False)
    if "consumequeue_ext" in info:
        x = info["consumequeue_ext"]
        bad = [q for q in x["queue_ends"] if q.get("problem")]
        out.print(escape_control(
            f"consumequeue_ext: {counted(x['files'], 'file')} of {x['file_size']} bytes in {counted(x['queues'], 'queue')} at "
            f"{x['path']} (enableConsumeQueueExt: CQ tagsCodes are ext addresses)"
            + (f"; {counted(len(bad), 'queue')} with an unreadable unit (verify names them)" if bad else "")), markup=False)
    if "consumer_restart" in info:
        print_consumer_restart(out, info["consumer_restart"])
    if "queue_kinds" in info:
        k = info["queue_kinds"]
        out.print(escape_control(
            f"queue kinds: multi-dispatch {'on' if k['multi_dispatch'] else 'off'}"
            f"{' (LMQ)' if k['lmq'] else ''}; BatchCQ topics: {', '.join(k['batch_cq_topics']) or 'none'} "
            f"({counted(len(k['batch_queues']), 'BatchConsumeQueue')}); from {k['source']}"), markup=False)


def _dledger_lines(d: dict) -> None:
    """The DLedger member's view: entries, terms, checkpoint, currterm, files, where the data ends."""
    from rich.markup import escape
    out = prose()
    cp, ct = d["checkpoint"] or {}, d["currterm"] or {}
    span = "no entries" if d["first_index"] is None else f"entries {d['first_index']} - {d['last_index']}"
    out.print("[bold]dledger[/bold] " + escape(escape_control(
        f"member {d['self_id']}: {span} ({d['entries']} walked), terms {d['terms']}; "
        f"checkpoint committedIndex {cp.get('committedIndex', '-')} endIndex {cp.get('endIndex', '-')}; "
        f"currTerm {ct.get('currTerm', '-')} voteLeader {ct.get('voteLeader', '-')}")))
    end = d["data_end"]
    where = "" if end is None else f"; the entries end at {end['offset']} ({end['kind']}{': ' + end['detail'] if end['detail'] else ''})"
    out.print(escape_control(f"  {counted(d['data_files'], 'data file')} of {d['data_file_size']} bytes, "
                                f"{counted(d['index_files'], 'index file')} with {counted(d['index_units'], 'unit')}{where}"), markup=False)
    if d.get("recovery"):
        out.print(escape_control("  " + dledger_recovery_text(d["recovery"])), markup=False)


def dledger_recovery_text(r: dict) -> str:
    """One line for what the DLedger member's recovery would do (``broker.dledger_recovery``)."""
    first = "no file passes the start pre-check" if r["first_entry"] is None else f"entry {r['first_entry']}"
    text = (f"DLedger recovery: from {r['start_file']} ({first}), {counted(r['entries'], 'entry')} to {r['end']} "
            f"({r['stop_kind']}{': ' + r['stop_detail'] if r['stop_detail'] else ''}); last entry "
            f"{r['last_entry']} term {r['last_term']}")
    if r["index_rewritten_from"] is not None:
        text += f"; the entry index is rewritten from entry {r['index_rewritten_from']}"
    if r["exits"]:
        text += ("; the end lies more than one file before the last file: the member EXITS instead of "
                 "truncating (check the data by hand before restarting)")
    return text


def _controller_lines(ctl: dict) -> None:
    from rich.markup import escape
    out = prose()
    ident = ctl["broker_identity"]
    if ident:
        state = (f"registering ({ident['path']}, check code {ident['register_check_code']})" if ident["pending"]
                 else f"registered ({ident['path']})")
        text = (f"cluster {ident['cluster_name']}  broker {ident['broker_name']}  id {ident['broker_id']}  {state}")
    else:
        text = "no brokerIdentity"
    out.print("[bold]controller[/bold] " + escape(escape_control(text)))
    ef = ctl["epoch_file"]
    if ef is None:
        out.print("  no epoch file", markup=False)
        return
    used = ef[ef["used"]] if ef["used"] else None
    if used is None:
        crc = ""
    elif not used["crc_checked"]:
        crc = f", crc32 not checked (stored {used['declared_crc']})"
    else:
        crc = f", crc32 {used['declared_crc']} matches"
    out.print(f"  epoch file: {ef['used'] or 'none loaded'}: {ef['why']}"
                 + (f"; {counted(used['declared_count'], 'entry')}{crc}" if used else ""), markup=False)
    if used and used["skipped_lines"]:
        out.print(f"  lines not read as entries: {used['skipped_lines']}", markup=False)
    for r in ctl["epochs"]:
        end = "open (starts past the CommitLog's end)" if r["end"] is None else str(r["end"])
        last = " (the CommitLog's valid end)" if r["end"] == ctl["max_offset"] and r is ctl["epochs"][-1] else ""
        out.print(f"  epoch {r['epoch']}: {r['start']} - {end}{last}", markup=False)


def print_consumer_restart(out, moves: list[dict], indent: str = "") -> None:
    """The committed offsets the next restart moves (``ops/consumers.restart_moves``), for people:
    ``info`` and ``verify`` print them alike."""
    out.print(f"{indent}[bold]consumers[/bold] the next restart moves {counted(len(moves), 'queue')} of the committed "
              "offsets (`consumers` has every group)" + (":" if moves else ""))
    for m in moves:
        out.print(escape_control(f"{indent}  {m['group']} {m['topic']}/{m['queue_id']}: {m['committed_offset']} -> "
                                 f"{m['restart_next_offset']} ({m['restart_status']}): {m['restart_effect']}"),
                  markup=False)
