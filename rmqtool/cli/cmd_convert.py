"""`convert`: a DLedger-mode store rewritten as a classic store."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from rmqtool.cli.common import CommitlogDirsOpt, FormatOpt, app, emit, open_store, stdout
from rmqtool.cli.options import ConvertTarget, Format, option
from rmqtool.errors import EXIT_FINDINGS, writing_to
from rmqtool.wording import counted


@app.command("convert")
def convert_command(
    store: str = typer.Argument(..., metavar="STORE", help="store root of a DLedger-mode broker (dledger-<selfId>/data)"),
    into: ConvertTarget = typer.Option(ConvertTarget.commitlog, "--into",
                                       help="the kind of store to write (commitlog: a classic store with commitlog/, "
                                            "queues and index)"),
    output: Path = option("output", ..., help="the new store's directory (must not exist)"),
    commitlog_file_size: Optional[int] = option("commitlog_file_size",
                                                help="the new CommitLog files' size (default: the data files')"),
    include_uncommitted: bool = typer.Option(False, "--include-uncommitted",
                                             help="also entries past the member's committedIndex"),
    fmt: Format = FormatOpt,
    commitlog_dirs: str = CommitlogDirsOpt,
):
    """Rewrite a DLedger-mode store as a classic store: every committed message with its fields,
    at new CommitLog offsets, with its ConsumeQueues, IndexFiles and checkpoint. The source is only read."""
    from rmqtool.cli.progress import Progress
    from rmqtool.ops.convert import convert_to_commitlog
    src = open_store(store, commitlog_dirs)
    bar = Progress("convert", unit="records")
    try:
        with writing_to(output):
            s = convert_to_commitlog(src, output, commitlog_file_size, include_uncommitted, progress=bar)
    finally:
        bar.close()
    if fmt != "table":
        emit([s.as_dict()], fmt)
    else:
        stdout.print(f"converted {counted(s.records, 'record')} to {s.store} [{s.first_offset}, {s.end_offset}) in "
                     f"{counted(len(s.commitlog_files), 'commitlog file')}; {counted(s.cq_units, 'ConsumeQueue unit')}, "
                     f"{counted(s.index_entries, 'index entry', 'index entries')}", markup=False)
        for w in s.warnings:
            stdout.print(f"  warning: {w}", markup=False)
    return EXIT_FINDINGS if any("walk stopped" in w for w in s.warnings) else 0
