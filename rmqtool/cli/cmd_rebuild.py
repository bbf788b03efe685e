"""`rmqtool rebuild consumequeue|batchconsumequeue|index|timerwheel|all STORE`: rebuild from the CommitLog
(the timer wheel from the timer log) on any engine, install crash-safely."""
from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path
from typing import List, Optional

import typer

from rmqtool.cli.common import (CommitlogDirsOpt, FormatOpt, IndexEntriesOpt, IndexSlotsOpt,
                                app, emit, escape_control, stderr, stdout,
                                EngineOptions, with_engine_options)
from rmqtool.cli.options import App, Format, option
from rmqtool.cli.progress import Progress
from rmqtool.cli.rows import emit_kinds
from rmqtool.errors import EXIT_REFUSED, DeclinedError, RefusedError, UsageError
from rmqtool.errors import writing_to
from rmqtool.wording import agree, counted

rebuild_app = App(no_args_is_help=True, help="Rebuild ConsumeQueue or IndexFiles from the CommitLog.")
app.add_typer(rebuild_app, name="rebuild")


_UNCONFIRMED = ("refusing to replace files without confirmation (no terminal to ask on): pass --yes "
                "(or --dry-run to see the plan)")


def _confirm_factory(store, yes: bool, dry_run: bool = False, output=None, build: str | None = None):
    """The prompt before an in-place install (after the build, with the whole plan). Where
    nobody can answer it (stdin not a terminal, no --yes) the run is refused before any work;
    answered no, nothing is written (``_declined``). Both exit 3, as every refusal. A store that
    cannot be changed in place at all (object storage) is said first, as the usage error it is,
    saying what to ``build`` elsewhere (the storelock default: files into a directory)."""
    from rmqtool.io.storelock import refuse_in_place_on_object_storage
    refuse_in_place_on_object_storage(store, output, dry_run, *([build] if build else []))
    if not (yes or dry_run or output is not None or sys.stdin.isatty()):
        raise RefusedError(_UNCONFIRMED)

    def confirm(result) -> bool:
        if yes:
            return True
        _print_plan(result)
        if not sys.stdin.isatty():
            raise RefusedError(_UNCONFIRMED)
        if not typer.confirm("replace these files?", default=False):
            raise DeclinedError("nothing written (declined)")
        return True
    confirm.unattended = yes           # rebuild all may then run its two installs at once
    return confirm


DryRunOpt = typer.Option(False, "--dry-run", help="print the plan, write nothing")
YesOpt = typer.Option(False, "--yes", "-y", help="do not ask before replacing files")
NoCrcOpt = typer.Option(False, "--no-crc", help="skip the body CRC check of the recovery walk")
SkipCorruptOpt = typer.Option(False, "--skip-corrupt",
                              help="rebuild past damaged CommitLog records with the resync (skipped ranges listed)")
AllowTruncateOpt = typer.Option(False, "--allow-truncate",
                                help="accept a rebuild that drops the records after a damaged one, or the "
                                     "data of a later CommitLog segment its walk never reaches")


def _print_plan(r) -> None:
    if hasattr(r, "differing_slots"):           # rebuild all's timer wheel
        stderr.print(escape_control(f"rebuild timerwheel: replace {r.target} ({counted(r.differing_slots, 'slot')} {agree(r.differing_slots, 'differs', 'differ')})"),
                     markup=False)
        return
    stderr.print(f"rebuild {r.kind} of {r.store}", markup=False)
    for line in damage_lines(r) + consumer_lines(r):
        stderr.print(line, markup=False)
    stderr.print(f"  replace {counted(len(r.files_replaced), 'file')} in {r.target}; keep {len(r.files_kept)} "
                 f"(carried over as hard links); originals go to {Path(r.target).name}.backup-<UTC time>",
                 markup=False)


def damage_lines(r) -> list[str]:
    """What a walk that stopped before the CommitLog's last data means for this rebuild."""
    if not r.damage:
        return []
    what = "units" if r.kind in ("consumequeue", "batchconsumequeue") else "index entries"
    first = r.damage[0]
    out = [f"  the CommitLog walk stops at {first['file']}@{first['position']} (offset {first['offset']}, "
           f"{first['check']}: {first['detail']}); the resync finds {counted(r.tail_records, 'record')} after it"]
    if r.skipped:
        out.append(f"  --skip-corrupt: rebuilt past {counted(len(r.damage), 'damaged range')}, skipped:")
        out += [f"    [{d['offset']}, {d['resumed_at']}) {d['skipped_bytes']} bytes at {d['file']}@{d['position']} "
                f"({d['check']})" for d in r.damage[:50]]
    if r.before is not None:
        out.append(f"  {what}: {r.before} now -> {r.after} after the rebuild ({r.after - r.before:+d})"
                   + ("" if r.skipped else f"; --skip-corrupt would keep {r.tail_items} more"))
    f = r.restart
    if f is not None:
        if f["truncated_bytes"]:
            out.append(f"  a broker restart on the rebuilt queues ({f['mode']} start from {f['start_file']}) "
                       f"truncates the CommitLog at {f['valid_end']}: {f['truncated_bytes']} bytes of data, "
                       f"{counted(len(f['files_deleted']), 'file')} deleted")
        else:
            out.append(f"  a broker restart on the rebuilt queues ({f['mode']} start from {f['start_file']}) "
                       f"keeps the CommitLog data up to {f['data_end']}")
    return out


#: consumer rows a plan lists before it says how many more there are
CONSUMER_LINES = 50


def consumer_lines(r) -> list[str]:
    """The committed offsets whose pull answer the rebuilt queues change (``ops.consumers.rebuild_moves``)."""
    rows = getattr(r, "consumers", None)
    if not rows:
        return []
    groups = sorted({x["group"] for x in rows})
    out = [f"  consumer groups: the rebuilt queues change what {counted(len(groups), 'group')} "
           f"({', '.join(escape_control(g) for g in groups[:8])}{', ...' if len(groups) > 8 else ''}) "
           f"{agree(len(groups), 'reads', 'read')} at {counted(len(rows), 'committed offset')}:"]
    for x in rows[:CONSUMER_LINES]:
        out.append(f"    {escape_control(x['group'])} {escape_control(x['topic'])}/{x['queue_id']} at "
                   f"{x['committed_offset']}: {x['status']} [{x['min_offset']}, {x['max_offset']}) -> "
                   f"{x['rebuilt_status']} [{x['rebuilt_min_offset']}, {x['rebuilt_max_offset']}): {x['effect']}")
    if len(rows) > CONSUMER_LINES:
        out.append(f"    ... {len(rows) - CONSUMER_LINES} more (-f json lists them all)")
    return out


def _render(r, fmt: str, dry_run: bool, head: str | None = None) -> None:
    if fmt != "table":
        emit([r.as_dict()], fmt)
        return
    d = r.as_dict()
    head = head or ("plan (dry run)" if dry_run else "rebuilt")
    stdout.print(f"{head}: {r.kind} of {r.store}", markup=False)
    stdout.print(f"  commitlog read [{r.range_start}, {r.range_end}) ({r.end_kind}), "
                 f"{counted(r.records, 'record')}", markup=False)
    written = sum(f["size"] for f in r.files_written)
    what = counted(r.units, "unit") if r.kind in ("consumequeue", "batchconsumequeue") else counted(r.entries, "entry")
    stdout.print(f"  {'would write' if dry_run else 'wrote'} {counted(len(r.files_written), 'file')} "
                 f"({written} bytes), {what}; replaced {len(r.files_replaced)}, kept {len(r.files_kept)}",
                 markup=False)
    if "cq_ext_units" in r.geometry:         # a 4.x store's ConsumeQueueExt files, rebuilt with the queues
        g = r.geometry
        stdout.print(f"  consumequeue_ext: {g['cq_ext_units']} ext units {'would be ' if dry_run else ''}put in "
                     f"{g['cq_ext_file_size']}-byte files" + (f"; originals moved to: {g['cq_ext_backup']}"
                                                              if g.get("cq_ext_backup") else ""), markup=False)
    if r.output:
        stdout.print(f"  output: {r.output} (store untouched)", markup=False)
    elif not dry_run:
        stdout.print(f"  originals moved to: {r.backup or '(nothing to back up)'}", markup=False)
    for note in r.recovered:
        stdout.print(f"  recovered: {note}", markup=False)
    for line in damage_lines(r) + consumer_lines(r):
        stdout.print(line, markup=False)
    for w in r.warnings[:20]:
        stderr.print(f"warning: {w}", markup=False)
    if dry_run and head is None:
        for f in r.files_written[:50]:
            stdout.print(f"  + {f['path']} ({f['size']} bytes)", markup=False)
        for f in r.files_replaced[:50]:
            stdout.print(f"  - {f}", markup=False)
    stdout.print(f"  {r.seconds:.2f} s (whole run), {d['messages_per_second'] or 0} messages/s", markup=False)


@contextmanager
def _declined():
    """A prompt answered no: one line, ``rebuild: nothing written (declined)``, not an error; exit 3."""
    try:
        yield
    except DeclinedError as exc:
        stderr.print(f"rebuild: {exc}", markup=False)
        raise typer.Exit(EXIT_REFUSED) from None


@contextmanager
def _show_refused_plan(fmt: str):
    """A rebuild refused because its walk stops early: show its plan(s), then the error."""
    from rmqtool.broker.truncation import TruncationRefused
    try:
        yield
    except TruncationRefused as exc:
        if fmt != "table":
            _emit_results([dict(r.as_dict(), refused=True) for r in exc.results], fmt)
        else:
            for r in exc.results:
                _render(r, "table", True, head="refused")
        raise


def _open(store: str, commitlog_dirs):
    from rmqtool.io.store import Store
    return Store(store, commitlog_dirs=commitlog_dirs).require_root()


def _index_geometry(s, index_slots: int, index_entries: int):
    """--index-slots/--index-entries (both or neither), else the store's own geometry."""
    from rmqtool.io.indexfile import IndexGeometry
    if bool(index_slots) != bool(index_entries):
        raise UsageError("pass both --index-slots and --index-entries")
    return IndexGeometry(index_slots, index_entries) if index_slots else s.index_geometry


def _run(bar_label: str, s, fmt: str, dry_run: bool, output, engine_options: EngineOptions, build):
    """One rebuild with a progress bar on the engine of ``engine_options`` (the operation takes the
    writer lock); ``build(bar, engine)`` returns its result(s), rendered as a table each or as one
    JSON array."""
    bar = Progress(bar_label)
    try:
        with _declined(), _show_refused_plan(fmt), writing_to(output or s.root), \
                engine_options.open(own_pool=True) as eng:
            results = build(bar, eng)
    finally:
        bar.close()
    results = list(results) if isinstance(results, (list, tuple)) else [results]
    if fmt != "table":
        _emit_results([r.as_dict() for r in results], fmt)
        return 0
    for r in results:
        if hasattr(r, "differing_slots"):
            _render_wheel(r)
        else:
            _render(r, "table", dry_run)
    return 0


def _emit_results(rows: list[dict], fmt: str) -> None:
    """The results of one rebuild in a machine format: one row per structure rebuilt (its ``kind``;
    CSV/TSV one section per kind)."""
    emit_kinds(rows, fmt, [r["kind"] for r in rows])


def _render_wheel(r) -> None:
    stdout.print(escape_control(
        f"{'would rebuild' if r.dry_run else 'rebuilt'}: {r.target}{' -> ' + r.output if r.output else ''}: "
        f"{counted(r.units, 'timer log unit')}, {counted(r.slots, 'slot')}, {r.differing_slots} {agree(r.differing_slots, 'differs', 'differ')} from the current wheel "
        f"(precision {r.precision_ms} ms)" + (f"; the old wheel is {r.backup}" if r.backup else "")), markup=False)


@rebuild_app.command("consumequeue")
@with_engine_options
def rebuild_consumequeue_command(
    store: str = typer.Argument(..., metavar="STORE", help="store root directory"),
    topic: Optional[List[str]] = option("topic", help="only this topic (repeatable)"),
    queue: Optional[List[int]] = option("queue", help="only this queue id (repeatable; needs --topic)"),
    to_offset: Optional[int] = option("to_offset", help="stop reading the CommitLog here"),
    cq_file_size: Optional[int] = option("cq_file_size",
                                         help="mappedFileSizeConsumeQueue (default: from existing files, else 6,000,000)"),
    output: Optional[Path] = option("output", help="build the new consumequeue tree here instead"),
    dry_run: bool = DryRunOpt,
    yes: bool = YesOpt,
    no_crc: bool = NoCrcOpt,
    skip_corrupt: bool = SkipCorruptOpt,
    allow_truncate: bool = AllowTruncateOpt,
    engine_options: EngineOptions = EngineOptions(),
    fmt: Format = FormatOpt,
    commitlog_dirs: str = CommitlogDirsOpt,
):
    """Rebuild ConsumeQueue files from the CommitLog, byte-identical to the broker's."""
    from rmqtool.ops.rebuild import rebuild_consumequeue
    s = _open(store, commitlog_dirs)
    confirm = _confirm_factory(s, yes, dry_run, output)
    return _run("rebuild consumequeue", s, fmt, dry_run, output,
                engine_options, lambda bar, eng: rebuild_consumequeue(
                    s, topic or None, queue or None, cq_file_size, to_offset, output, dry_run, not no_crc,
                    progress=bar, confirm=confirm, skip_corrupt=skip_corrupt, allow_truncate=allow_truncate,
                    engine=eng, workers=engine_options.jobs, split_size=engine_options.split_size))


@rebuild_app.command("batchconsumequeue")
@with_engine_options
def rebuild_batchconsumequeue_command(
    store: str = typer.Argument(..., metavar="STORE", help="store root directory"),
    topic: Optional[List[str]] = option("topic", help="only this BatchCQ topic (repeatable)"),
    to_offset: Optional[int] = option("to_offset", help="stop reading the CommitLog here"),
    bcq_file_size: Optional[int] = option("bcq_file_size", help="mapperFileSizeBatchConsumeQueue (default: from "
                                                                "existing files, else 13,800,000)"),
    output: Optional[Path] = option("output", help="build the new batchconsumequeue tree here instead"),
    dry_run: bool = DryRunOpt,
    yes: bool = YesOpt,
    no_crc: bool = NoCrcOpt,
    skip_corrupt: bool = SkipCorruptOpt,
    allow_truncate: bool = AllowTruncateOpt,
    engine_options: EngineOptions = EngineOptions(),
    fmt: Format = FormatOpt,
    commitlog_dirs: str = CommitlogDirsOpt,
):
    """Rebuild the BatchConsumeQueue files of BatchCQ topics (5.x) from the CommitLog, byte-identical to the broker's."""
    from rmqtool.ops.rebuild import rebuild_batchconsumequeue
    s = _open(store, commitlog_dirs)
    confirm = _confirm_factory(s, yes, dry_run, output)
    return _run("rebuild batchconsumequeue", s, fmt, dry_run, output,
                engine_options, lambda bar, eng: rebuild_batchconsumequeue(
                    s, topic or None, bcq_file_size, to_offset, output, dry_run, not no_crc, progress=bar,
                    confirm=confirm, skip_corrupt=skip_corrupt, allow_truncate=allow_truncate, engine=eng,
                    workers=engine_options.jobs, split_size=engine_options.split_size))


@rebuild_app.command("timerwheel")
@with_engine_options
def rebuild_timerwheel_command(
    store: str = typer.Argument(..., metavar="STORE", help="store root of a broker with timerWheelEnable"),
    output: Optional[Path] = option("output", metavar="FILE", help="write the new wheel to this (new) file instead"),
    precision_ms: Optional[int] = option("timer_precision_ms",
                                         help="timerPrecisionMs (default: found from the wheel, else 1000)"),
    dry_run: bool = DryRunOpt,
    yes: bool = YesOpt,
    engine_options: EngineOptions = EngineOptions(),
    fmt: Format = FormatOpt,
):
    """Regenerate the timer wheel (timerwheel) from the timer log, as the broker's enqueue built it.

    The timer log is read by this process whichever --engine is named (it walks no CommitLog)."""
    from rmqtool.ops.timer import WHEEL_BUILT_ELSEWHERE, rebuild_timerwheel
    engine_options.check()
    s = _open(store, None)
    confirm = _confirm_factory(s, yes, dry_run, output, WHEEL_BUILT_ELSEWHERE)   # rebuild all's timer wheel prompt
    with _declined(), writing_to(output or s.root):
        r = rebuild_timerwheel(s, output, dry_run, precision_ms, None if output else confirm)
    if fmt != "table":
        emit([r.as_dict()], fmt)
        return 0
    _render_wheel(r)
    return 0


@rebuild_app.command("index")
@with_engine_options
def rebuild_index_command(
    store: str = typer.Argument(..., metavar="STORE", help="store root directory"),
    from_offset: Optional[int] = option("from_offset", help="keep the index files wholly below this CommitLog offset"),
    to_offset: Optional[int] = option("to_offset", help="stop indexing here"),
    output: Optional[Path] = option("output", help="build the new index directory here instead"),
    dry_run: bool = DryRunOpt,
    yes: bool = YesOpt,
    no_crc: bool = NoCrcOpt,
    skip_corrupt: bool = SkipCorruptOpt,
    allow_truncate: bool = AllowTruncateOpt,
    engine_options: EngineOptions = EngineOptions(),
    index_slots: int = IndexSlotsOpt,
    index_entries: int = IndexEntriesOpt,
    fmt: Format = FormatOpt,
    commitlog_dirs: str = CommitlogDirsOpt,
):
    """Rebuild IndexFiles from the CommitLog (headers, slots and entries as the broker writes them)."""
    from rmqtool.ops.rebuild import rebuild_index
    s = _open(store, commitlog_dirs)
    geometry = _index_geometry(s, index_slots, index_entries)
    confirm = _confirm_factory(s, yes, dry_run, output)
    return _run("rebuild index", s, fmt, dry_run, output,
                engine_options, lambda bar, eng: rebuild_index(
                    s, geometry, from_offset, to_offset, output, dry_run, not no_crc, progress=bar, confirm=confirm,
                    skip_corrupt=skip_corrupt, allow_truncate=allow_truncate, engine=eng, workers=engine_options.jobs, split_size=engine_options.split_size))


@rebuild_app.command("all")
@with_engine_options
def rebuild_all_command(
    store: str = typer.Argument(..., metavar="STORE", help="store root directory"),
    to_offset: Optional[int] = option("to_offset", help="stop reading the CommitLog here"),
    cq_file_size: Optional[int] = option("cq_file_size", help="mappedFileSizeConsumeQueue"),
    output: Optional[Path] = option("output", help="build DIR/consumequeue, DIR/index (and "
                                          "DIR/batchconsumequeue, DIR/consumequeue_ext, DIR/timerwheel where the "
                                          "store has them) instead"),
    dry_run: bool = DryRunOpt,
    yes: bool = YesOpt,
    no_crc: bool = NoCrcOpt,
    skip_corrupt: bool = SkipCorruptOpt,
    allow_truncate: bool = AllowTruncateOpt,
    engine_options: EngineOptions = EngineOptions(),
    index_slots: int = IndexSlotsOpt,
    index_entries: int = IndexEntriesOpt,
    drop_filter_bitmaps: bool = typer.Option(False, "--drop-filter-bitmaps", help="a 4.x store with "
                                             "consumequeue_ext/: rebuild its ext units even where they hold "
                                             "consumer filter bitmaps, without them (refused otherwise)"),
    fmt: Format = FormatOpt,
    commitlog_dirs: str = CommitlogDirsOpt,
):
    """Rebuild everything the store derives from its CommitLog in one pass (ConsumeQueue, IndexFiles,
    BatchConsumeQueue, a 4.x store's ConsumeQueueExt files), and the timer wheel from the timer log."""
    from rmqtool.ops.rebuild import rebuild_all
    s = _open(store, commitlog_dirs)
    geometry = _index_geometry(s, index_slots, index_entries)
    if output is not None:
        output.mkdir(parents=True, exist_ok=True)
    return _run("rebuild", s, fmt, dry_run, output,
                engine_options, lambda bar, eng: rebuild_all(
                    s, geometry, cq_file_size, to_offset, output, dry_run, not no_crc, progress=bar,
                    confirm=_confirm_factory(s, yes, dry_run, output), skip_corrupt=skip_corrupt,
                    allow_truncate=allow_truncate, drop_filter_bitmaps=drop_filter_bitmaps, engine=eng,
                    workers=engine_options.jobs, split_size=engine_options.split_size))
