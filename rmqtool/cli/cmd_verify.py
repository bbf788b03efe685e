"""`rmqtool verify STORE`: findings with stable check names, a recovery forecast, exit codes."""
from __future__ import annotations

import json
import sys
from typing import List, Optional

import typer

from rmqtool.cli.common import (IdleIoOpt, MaxReadRateOpt, gentle, CommitlogDirsOpt, FormatOpt,
                                IndexEntriesOpt, IndexSlotsOpt, app, emit,
                                escape_control, open_stores, EngineOptions,
                                with_engine_options)
from rmqtool.cli.rows import check_kind, emit_kinds, prose
from rmqtool.cli.cmd_info import dledger_recovery_text, print_consumer_restart
from rmqtool.cli.options import CHECK_KINDS, FailOn, Format, Layout, LayoutOpt, Level, option
from rmqtool.cli.progress import Tally
from rmqtool.ops.verify.runner import KINDS, VerifyOptions, verify_stores
from rmqtool.wording import counted


def _split(values: Optional[List[str]]) -> tuple[str, ...]:
    if not values:
        return KINDS
    out = []
    for v in values:
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return tuple(out)


@app.command("verify")
@with_engine_options
def verify_command(
    stores: List[str] = typer.Argument(..., metavar="STORE...",
                                       help="store root directory (several, or quoted globs: a fleet)"),
    level: Level = typer.Option(Level.shallow, "--level", "-l", help="how much to check (deep: every record's CRC "
                                "and every join)"),
    only: Optional[List[str]] = typer.Option(None, "--only", metavar="KIND[,KIND...]",
                                             autocompletion=lambda: list(CHECK_KINDS),
                                             help=f"only these checks: {' | '.join(CHECK_KINDS)} (repeat or "
                                                  "comma-separate)"),
    topic: Optional[str] = option("topic", help="limit record/queue checks to this topic"),
    queue: Optional[int] = option("queue", help="limit to this queue id (needs --topic)"),
    fail_on: FailOn = typer.Option(FailOn.error, "--fail-on", help="which severity makes exit code 1"),
    limit: int = typer.Option(1000, "--limit-per-check", metavar="N",
                              help="list at most N findings per check (all are counted)"),
    kind: Optional[str] = typer.Option(None, "--kind", metavar="KIND", help="print only this kind of row: finding | summary | "
                                       "forecast | lost | not_dispatched | not_indexed | fleet (default: every "
                                       "kind; CSV/TSV one section each; JSON then the report object, with "
                                       "--kind an array of those rows)"),
    max_read_rate: Optional[float] = MaxReadRateOpt,
    idle_io: bool = IdleIoOpt,
    fmt: Format = FormatOpt,
    commitlog_dirs: str = CommitlogDirsOpt,
    index_slots: int = IndexSlotsOpt,
    index_entries: int = IndexEntriesOpt,
    layout: Layout = LayoutOpt,
    engine_options: EngineOptions = EngineOptions(),
):
    """Check a store without writing to it; exit 0 clean, 1 findings, 2 bad usage or unreadable.

    Several stores are verified one after the other (one engine session for all); JSON is then
    one object per store under "reports", JSONL lines carry "store"; exit 1 if any has findings.
    JSONL and CSV/TSV rows name their kind in "type" (finding, summary, forecast, lost,
    not_dispatched, not_indexed, fleet); a table lists the findings, the summary and forecast
    follow as text (on stderr when stdout is not a terminal)."""
    from rmqtool.simplified import use_simplified
    check_kind(kind, ROW_KINDS)
    gentle(max_read_rate, idle_io)
    level, fail_on = level.value, fail_on.value
    if len(stores) == 1 and use_simplified(stores[0], layout):    # the article's store: simplified.* checks
        from rmqtool.cli import simplified_store as simplified_cli
        raise typer.Exit(simplified_cli.verify(stores[0], fmt, fail_on, limit if limit >= 0 else None, kind))
    options = VerifyOptions(level=level, only=_split(only), topic=topic, queue_id=queue,
                            limit_per_check=limit if limit >= 0 else None)
    options.validate()
    opened = open_stores(stores, commitlog_dirs, index_slots, index_entries)
    for _, s in opened:
        s.require_root()
        if topic is not None:
            s.require_topic(topic, queue)
    fleet = len(opened) > 1
    with engine_options.open() as eng:
        results = [(name, report, report.exit_code(fail_on)) for name, report in verify_stores(
            opened, options, lambda s: Tally("verify", total=sum(seg.size for seg in s.commitlog.files)),
            engine=eng, split_size=engine_options.split_size)]
    code = max(c for _, _, c in results)
    fleet_summary = {"stores": len(results), "clean": sum(1 for _, _, c in results if c == 0),
                     "with_findings": sum(1 for _, _, c in results if c != 0),
                     "stores_with_findings": [n for n, _, c in results if c != 0], "worst_exit_code": code}
    if fmt == "json" and kind is None:
        docs = [{**r.as_dict(), "exit_code": c} for _, r, c in results]
        doc = {"reports": docs, "fleet": fleet_summary, "exit_code": code} if fleet else docs[0]
        from rmqtool.cli.render import with_iso          # epoch ms beside their ISO twins
        sys.stdout.write(json.dumps(with_iso(doc), ensure_ascii=False, indent=2) + "\n")
    elif fmt != "table" or kind is not None:
        lines = []
        for name, report, c in results:
            tag = {"store": name} if fleet else {}
            fc = report.forecast
            lines += ([{"type": "finding", **tag, **f.as_dict()} for f in report.findings]
                      + [{"type": "summary", **tag, **report.summary, "exit_code": c},
                         {"type": "forecast", **tag, **fc}]
                      + [{"type": k, **tag, **r} for k in ("lost", "not_dispatched", "not_indexed")
                         for r in fc.get(k, [])])
        if fleet:
            lines.append({"type": "fleet", **fleet_summary})
        lines = [x for x in lines if kind in (None, x["type"])]
        if fmt == "table":
            emit(lines, "table", title=kind)
        else:
            emit_kinds(lines, fmt, ROW_KINDS, key="type")
    else:
        out = prose()
        for name, report, c in results:
            if fleet:
                out.print(escape_control(f"== {name}"), markup=False)
            _render_table(report, c)
        if fleet:
            out.print(escape_control(
                f"fleet: {counted(fleet_summary['stores'], 'store')}, {fleet_summary['clean']} clean, "
                f"{fleet_summary['with_findings']} with findings"
                + (f" ({', '.join(fleet_summary['stores_with_findings'])})" if fleet_summary['with_findings'] else "")
                + f"; worst exit code {code}"), markup=False)
    raise typer.Exit(code)



def _who(r: dict) -> str:
    """One listed record as a person looks for it: where, which queue, which message."""
    from rmqtool.cli.common import format_time
    return (f"{r['phy_offset']} {r['topic']}/{r['queue_id']} queue offset {r['queue_offset']}, stored "
            f"{format_time(r['store_timestamp'])}, keys {r.get('keys') or '-'}, UNIQ_KEY {r.get('uniq_key') or '-'}, "
            f"offsetMsgId {r.get('offset_msg_id') or '-'}")


FINDING_COLUMNS = ["severity", "check", "file", "offset", "message", "excerpt"]
#: the kinds of row verify prints (their ``type``), in the order it prints them
ROW_KINDS = ("finding", "summary", "forecast", "lost", "not_dispatched", "not_indexed", "fleet")


def _render_table(report, code: int) -> None:
    """The findings as a table on stdout; the summary and the forecast as text for people (``prose``)."""
    rows = [f.as_dict() for f in report.findings]
    if rows:
        emit(rows, "table", FINDING_COLUMNS, title="findings")
    out = prose()
    s = report.summary
    f = s["findings"]
    out.print(f"[bold]verify[/bold] {escape_control(report.store)} ({report.options.level}): "
                 f"{counted(f['error'], 'error')}, {counted(f['warning'], 'warning')}, {f['info']} info"
                 + (f", {s['findings_not_listed']} not listed" if s["findings_not_listed"] else ""))
    cl = s["commitlog"]
    out.print(f"  commitlog: {counted(cl['files'], 'file')}, {counted(cl['records'], 'record')}"
                 f" ({cl['carved_records']} carved), findings {cl.get('findings', {})}")
    cq = s["consumequeue"]
    out.print(f"  consumequeue: {counted(cq['queues'], 'queue')}, {counted(cq['units'], 'unit')}, findings {cq.get('findings', {})}")
    ix = s["index"]
    out.print(f"  index: {counted(ix['files'], 'file')}, {counted(ix['entries'], 'entry')}, findings {ix.get('findings', {})}")
    out.print(f"  checkpoint: {'present' if s['checkpoint']['present'] else 'missing'}, "
                 f"findings {s['checkpoint'].get('findings', {})}")
    fc = report.forecast
    out.print(f"[bold]recovery forecast[/bold] ({fc['mode']} start"
                 f"{', abort file present' if fc['abort_present'] else ''})")
    out.print(f"  start file {fc['start_file']} ({fc['start_rule']}); normal start would use "
                 f"{fc['normal_start_file']}, abnormal {fc['abnormal_start_file']}")
    out.print(f"  valid end of the CommitLog: {fc['valid_end']} ({fc['end_kind']} at {fc['end_file']}"
                 f"@{fc['end_position']}{': ' + fc['end_detail'] if fc['end_detail'] else ''})")
    if fc.get("dledger_recovery"):
        out.print(escape_control("  " + dledger_recovery_text(fc["dledger_recovery"])), markup=False)
    out.print(f"  commitlog files deleted: {', '.join(fc['commitlog_files_deleted']) or 'none'}")
    out.print(f"  index files deleted: {', '.join(fc['index_files_deleted']) or 'none'}"
                 + ("" if fc["mode"] == "abnormal" or not fc["index_files_deleted_on_abnormal_start"]
                    else f" (on an abnormal start: {', '.join(fc['index_files_deleted_on_abnormal_start'])})"))
    for t in fc["consume_queues_truncated"]:
        out.print(f"  consume queue {escape_control(t['topic'])}/{t['queue_id']} truncated from queue offset "
                     f"{t['from_queue_offset']} ({counted(t['units'], 'unit')})")
    out.print(f"  not dispatched (past {fc['dispatch_from']}): {counted(fc['not_dispatched_count'], 'record')}; "
                 f"not indexed (past {fc['index_frontier']}): {counted(fc['not_indexed_count'], 'record')}")
    for r in fc["not_dispatched"][:20]:
        out.print(escape_control(f"    not dispatched: {_who(r)}"), markup=False)
    if fc["not_dispatched_count"] > 20:
        out.print(f"    ... {fc['not_dispatched_count'] - 20} more (--format jsonl lists them)")
    out.print(f"  lost at restart (records past the valid end): {counted(fc['lost_count'], 'record')}")
    for r in fc["lost"][:20]:
        out.print(escape_control(f"    lost: {_who(r)}"), markup=False)
    if fc["lost_count"] > 20:
        out.print(f"    ... {fc['lost_count'] - 20} more (--format jsonl lists them)")
    if "consumer_restart" in fc:
        print_consumer_restart(out, fc["consumer_restart"], indent="  ")
    out.print(f"exit code {code}")
