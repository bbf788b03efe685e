"""`rmqtool verify STORE`: findings with stable check names, a recovery forecast, exit codes."""
from __future__ import annotations

import json
import sys
import time
from typing import List, Optional

import typer

from rmqtool.cli.common import (IdleIoOpt, MaxReadRateOpt, gentle, FORMATS, CommitlogDirsOpt, FormatOpt,
                                IndexEntriesOpt, IndexSlotsOpt, app, check_choice, emit, emit_jsonl,
                                escape_control, open_stores, real_console, stderr, stdout, EngineOptions,
                                with_engine_options)
from rmqtool.cli.cmd_info import dledger_recovery_text
from rmqtool.ops.verify.runner import FAIL_ON, KINDS, LEVELS, VerifyOptions, verify_stores

PROGRESS_AFTER_S = 1.0


class Progress:
    """A rich progress bar on stderr, shown only on a TTY and only once a run passes ~1 s."""

    def __init__(self, total: int, enabled: bool):
        self.total, self.enabled = total, enabled
        self.done = 0
        self.started = time.monotonic()
        self.bar = None
        self.task = None

    def restart(self) -> None:
        """Back to zero: verify reads the store again (it was replaced meanwhile)."""
        self.done = 0

    def __call__(self, nbytes: int) -> None:
        self.done += nbytes
        if not self.enabled:
            return
        if self.bar is None and time.monotonic() - self.started > PROGRESS_AFTER_S:
            from rich.progress import BarColumn, DownloadColumn, Progress as RichProgress, TransferSpeedColumn
            self.bar = RichProgress("verify", BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                                    console=real_console(stderr), transient=True)
            self.bar.start()
            self.task = self.bar.add_task("commitlog", total=self.total)
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


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
    level: str = typer.Option("shallow", "--level", "-l", help="shallow | deep"),
    only: Optional[List[str]] = typer.Option(None, "--only",
                                             help="commitlog | consumequeue | index | checkpoint (repeat or comma-separate)"),
    topic: Optional[str] = typer.Option(None, "--topic", help="limit record/queue checks to this topic"),
    queue: Optional[int] = typer.Option(None, "--queue", help="limit to this queue id (needs --topic)"),
    fail_on: str = typer.Option("error", "--fail-on", help="error | warning: which severity makes exit code 1"),
    limit: int = typer.Option(1000, "--limit-per-check", help="list at most N findings per check (all are counted)"),
    max_read_rate: Optional[float] = MaxReadRateOpt,
    idle_io: bool = IdleIoOpt,
    fmt: str = FormatOpt,
    commitlog_dirs: str = CommitlogDirsOpt,
    index_slots: int = IndexSlotsOpt,
    index_entries: int = IndexEntriesOpt,
    layout: str = typer.Option("auto", "--layout", help="auto | rocketmq | simplified (the article's *.txt files)"),
    engine_options: EngineOptions = EngineOptions(),
):
    """Check a store without writing to it; exit 0 clean, 1 findings, 2 bad usage or unreadable.

    Several stores are verified one after the other (one engine session for all); JSON is then
    one object per store under ``reports``, JSONL lines carry ``store``; exit 1 if any has findings."""
    from rmqtool.simplified import use_simplified
    check_choice(fmt, FORMATS, "--format")
    gentle(max_read_rate, idle_io)
    check_choice(level, LEVELS, "--level")
    check_choice(fail_on, FAIL_ON, "--fail-on")
    if len(stores) == 1 and use_simplified(stores[0], layout):    # the article's store: simplified.* checks
        from rmqtool.cli import simplified_store as simplified_cli
        raise typer.Exit(simplified_cli.verify(stores[0], fmt, fail_on, limit if limit >= 0 else None))
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
            opened, options, lambda s: Progress(sum(seg.size for seg in s.commitlog.files), sys.stderr.isatty()),
            engine=eng, split_size=engine_options.split_size)]
    code = max(c for _, _, c in results)
    fleet_summary = {"stores": len(results), "clean": sum(1 for _, _, c in results if c == 0),
                     "with_findings": sum(1 for _, _, c in results if c != 0),
                     "stores_with_findings": [n for n, _, c in results if c != 0], "worst_exit_code": code}
    if fmt == "json":
        docs = [{**r.as_dict(), "exit_code": c} for _, r, c in results]
        doc = {"reports": docs, "fleet": fleet_summary, "exit_code": code} if fleet else docs[0]
        from rmqtool.cli.render import with_iso          # epoch ms beside their ISO twins
        sys.stdout.write(json.dumps(with_iso(doc), ensure_ascii=False, indent=2) + "\n")
    elif fmt == "jsonl":
        lines = []
        for name, report, c in results:
            tag = {"store": name} if fleet else {}
            fc = report.forecast
            lines += ([{"type": "finding", **tag, **f.as_dict()} for f in report.findings]
                      + [{"type": "summary", **tag, **report.summary, "exit_code": c},
                         {"type": "forecast", **tag, **fc}]
                      + [{"type": kind, **tag, **r} for kind in ("lost", "not_dispatched", "not_indexed")
                         for r in fc.get(kind, [])])
        if fleet:
            lines.append({"type": "fleet", **fleet_summary})
        emit_jsonl(lines)
    elif fmt in ("csv", "tsv"):             # the findings, one row each (summary and forecast: json/jsonl)
        emit([{**({"store": name} if fleet else {}), **f.as_dict()} for name, report, _ in results
              for f in report.findings], fmt, (["store"] if fleet else []) + FINDING_COLUMNS)
    else:
        for name, report, c in results:
            if fleet:
                stdout.print(escape_control(f"== {name}"), markup=False)
            _render_table(report, c)
        if fleet:
            stdout.print(escape_control(
                f"fleet: {fleet_summary['stores']} stores, {fleet_summary['clean']} clean, "
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


def _render_table(report, code: int) -> None:
    rows = [f.as_dict() for f in report.findings]
    if rows:
        emit(rows, "table", ["severity", "check", "file", "offset", "message", "excerpt"], title="findings")
    s = report.summary
    f = s["findings"]
    stdout.print(f"[bold]verify[/bold] {escape_control(report.store)} ({report.options.level}): "
                 f"{f['error']} error(s), {f['warning']} warning(s), {f['info']} info"
                 + (f", {s['findings_not_listed']} not listed" if s["findings_not_listed"] else ""))
    cl = s["commitlog"]
    stdout.print(f"  commitlog: {cl['files']} files, {cl['records']} records"
                 f" ({cl['carved_records']} carved), findings {cl.get('findings', {})}")
    cq = s["consumequeue"]
    stdout.print(f"  consumequeue: {cq['queues']} queues, {cq['units']} units, findings {cq.get('findings', {})}")
    ix = s["index"]
    stdout.print(f"  index: {ix['files']} files, {ix['entries']} entries, findings {ix.get('findings', {})}")
    stdout.print(f"  checkpoint: {'present' if s['checkpoint']['present'] else 'missing'}, "
                 f"findings {s['checkpoint'].get('findings', {})}")
    fc = report.forecast
    stdout.print(f"[bold]recovery forecast[/bold] ({fc['mode']} start"
                 f"{', abort file present' if fc['abort_present'] else ''})")
    stdout.print(f"  start file {fc['start_file']} ({fc['start_rule']}); normal start would use "
                 f"{fc['normal_start_file']}, abnormal {fc['abnormal_start_file']}")
    stdout.print(f"  valid end of the CommitLog: {fc['valid_end']} ({fc['end_kind']} at {fc['end_file']}"
                 f"@{fc['end_position']}{': ' + fc['end_detail'] if fc['end_detail'] else ''})")
    if fc.get("dledger_recovery"):
        stdout.print(escape_control("  " + dledger_recovery_text(fc["dledger_recovery"])), markup=False)
    stdout.print(f"  commitlog files deleted: {', '.join(fc['commitlog_files_deleted']) or 'none'}")
    stdout.print(f"  index files deleted: {', '.join(fc['index_files_deleted']) or 'none'}"
                 + ("" if fc["mode"] == "abnormal" or not fc["index_files_deleted_on_abnormal_start"]
                    else f" (on an abnormal start: {', '.join(fc['index_files_deleted_on_abnormal_start'])})"))
    for t in fc["consume_queues_truncated"]:
        stdout.print(f"  consume queue {escape_control(t['topic'])}/{t['queue_id']} truncated from queue offset "
                     f"{t['from_queue_offset']} ({t['units']} units)")
    stdout.print(f"  not dispatched (past {fc['dispatch_from']}): {fc['not_dispatched_count']} record(s); "
                 f"not indexed (past {fc['index_frontier']}): {fc['not_indexed_count']} record(s)")
    for r in fc["not_dispatched"][:20]:
        stdout.print(escape_control(f"    not dispatched: {_who(r)}"), markup=False)
    if fc["not_dispatched_count"] > 20:
        stdout.print(f"    ... {fc['not_dispatched_count'] - 20} more (--format jsonl lists them)")
    stdout.print(f"  lost at restart (records past the valid end): {fc['lost_count']} record(s)")
    for r in fc["lost"][:20]:
        stdout.print(escape_control(f"    lost: {_who(r)}"), markup=False)
    if fc["lost_count"] > 20:
        stdout.print(f"    ... {fc['lost_count'] - 20} more (--format jsonl lists them)")
    stdout.print(f"exit code {code}")
