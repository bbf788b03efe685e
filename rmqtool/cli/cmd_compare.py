"""`compare`: two replicas of one broker group, to where they diverge."""
from __future__ import annotations

import typer

from rmqtool.cli.common import CommitlogDirsOpt, FormatOpt, app, emit, open_store, stdout
from rmqtool.cli.options import Format
from rmqtool.errors import EXIT_FINDINGS
from rmqtool.wording import agree, counted


def _side(label: str, side) -> str:
    text = f"  {label} {side.store}: {counted(side.records, 'record')}"
    if side.last_index is not None and side.dledger:
        text += f", last entry index {side.last_index} term {side.last_term}"
    if side.end_offset is not None:
        text += f", ends at {side.end_offset}"
    if side.past:
        text += f"; {side.past} past the agreement, first {side.first_past}"
    return text


def _epoch_lines(view: dict) -> None:
    for k in "ab":
        side = view[k]
        ranges = ", ".join(f"{r['epoch']}@{r['start']}" for r in side["ranges"]) or "none"
        stdout.print(f"  epochs {k} ({side['epoch_file'] or 'no epoch file loaded'}): {ranges}; "
                     f"ends at {side['max_offset']}", markup=False)
    if view["consistent_point"] is not None:
        stdout.print(f"  consistent point {view['consistent_point']} (last agreed epoch "
                     f"{view['last_agreed_epoch']}), likely master {view['master']}", markup=False)
    stdout.print(f"  epoch view: {view['reason']}", markup=False)


@app.command("compare")
def compare_command(
    store_a: str = typer.Argument(..., metavar="STORE_A", help="one replica's store root"),
    store_b: str = typer.Argument(..., metavar="STORE_B", help="the other replica's store root"),
    queues: bool = typer.Option(False, "--queues", help="compare the two ConsumeQueue sets unit by unit instead "
                                "(each side a store, file or RocksDB queues, or a bare consumequeue tree)"),
    fmt: Format = FormatOpt,
    commitlog_dirs: str = CommitlogDirsOpt,
):
    """Compare two replicas of one group (DLedger members, or a master and its slave) record by
    record: where they diverge, what each holds past it, which log a new DLedger leader keeps.
    Exit 0 when identical, 1 when they differ."""
    from rmqtool.ops.compare import compare_stores
    if queues:
        return _compare_queues(store_a, store_b, fmt, commitlog_dirs)
    from rmqtool.cli.progress import Progress
    with Progress("compare") as bar:
        c = compare_stores(open_store(store_a, commitlog_dirs), open_store(store_b, commitlog_dirs), progress=bar)
    if fmt != "table":
        emit([c.as_dict()], fmt)
    else:
        head = {"identical": "identical", "prefix": "one log is a prefix of the other",
                "diverged": "diverged"}[c.status]
        stdout.print(f"compare: {head}; {counted(c.agreed, 'record')} {agree(c.agreed, 'agrees', 'agree')} from the start"
                     + (f" (to offset {c.agreed_end})" if c.agreed_end is not None else ""), markup=False)
        if c.status == "diverged":
            stdout.print(f"  first difference: {', '.join(c.differs_by)}", markup=False)
        stdout.print(_side("a", c.a), markup=False)
        stdout.print(_side("b", c.b), markup=False)
        if c.keeps and c.status != "identical":
            stdout.print(f"  a new leader keeps {c.keeps}: {c.reason}", markup=False)
        if c.epochs is not None:
            _epoch_lines(c.epochs)
    return 0 if c.identical else EXIT_FINDINGS


def _queue_side(path: str, commitlog_dirs):
    """A store root, or a bare consumequeue tree (its queue directories directly below)."""
    from pathlib import Path
    p = Path(path)
    if p.is_dir() and not any((p / n).exists() for n in ("commitlog", "consumequeue", "checkpoint", "index")) \
            and not any(d.name.startswith("dledger-") for d in p.iterdir()):
        return p
    return open_store(path, commitlog_dirs)


def _compare_queues(a: str, b: str, fmt: str, commitlog_dirs) -> int:
    from rmqtool.ops.compare_queues import compare_queues
    c = compare_queues(_queue_side(a, commitlog_dirs), _queue_side(b, commitlog_dirs), a, b)
    if fmt != "table":
        emit([c.as_dict()], fmt)
    else:
        stdout.print(f"compare queues: {'identical' if c.identical else 'differ'}; "
                     f"{counted(c.same_queues, 'queue')} the same, {c.differing} {agree(c.differing, 'differs', 'differ')} "
                     f"(a: {counted(c.queues_a, 'queue')}, {counted(c.units_a, 'unit')}; "
                     f"b: {counted(c.queues_b, 'queue')}, {counted(c.units_b, 'unit')})",
                     markup=False)
        for d in c.diffs:
            where = (f"first difference at queue offset {d.first_queue_offset}: a {d.a}, b {d.b}"
                     if d.status == "differ" else d.status)
            stdout.print(f"  {d.topic}/{d.queue_id}: {where} ({d.units_a} / {counted(d.units_b, 'unit')})", markup=False)
    raise typer.Exit(0 if c.identical else EXIT_FINDINGS)
