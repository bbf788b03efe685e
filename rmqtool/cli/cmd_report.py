"""`rmqtool report STORE -o report.html`: one self-contained HTML page for an incident ticket."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from rmqtool.cli.common import (CommitlogDirsOpt, FormatOpt, IdleIoOpt, MaxReadRateOpt, app, emit, gentle, open_stores,
                                stdout, EngineOptions, with_engine_options)
from rmqtool.cli.options import Format, Level, option
from rmqtool.errors import RefusedError


@app.command("report")
@with_engine_options
def report_command(
    stores: List[str] = typer.Argument(..., metavar="STORE...", help="store roots (or quoted globs: a fleet's page)"),
    output: Path = option("output", ..., metavar="FILE", help="the HTML file to write (must not exist, unless --force)"),
    force: bool = typer.Option(False, "--force", help="replace an existing output file (written whole, then renamed over it)"),
    level: Level = typer.Option(Level.deep, "--level", "-l", help="the verify the report runs"),
    max_read_rate: Optional[float] = MaxReadRateOpt,
    idle_io: bool = IdleIoOpt,
    fmt: Format = FormatOpt,
    commitlog_dirs: str = CommitlogDirsOpt,
    engine_options: EngineOptions = EngineOptions(),
):
    """Write one self-contained HTML report (no network, no scripts): a headline from the store's state
    (clean shutdown, abnormal shutdown, running broker, damaged) with the numbers that matter, the recovery
    forecast with the messages a restart loses or has not dispatched / indexed yet, dispatch and index lag
    per queue, the write rate per topic, a map of every file kind with findings drawn where they are, the
    findings, and each section's data as JSON. Several stores (or globs): one summary row per store, then
    each store's section. What it wrote (the file and its size) is printed in the --format asked for."""
    import rmqtool
    from rmqtool.ops.report import write_report
    level = level.value
    gentle(max_read_rate, idle_io)
    if output.is_dir():
        raise RefusedError("the output is a directory; give the HTML file's path", output)
    if output.exists() and not force:
        raise RefusedError("the output exists: pass --force to replace it", output)
    opened = open_stores(stores, commitlog_dirs)
    from rmqtool.cli.progress import Progress
    with engine_options.open() as eng, Progress("report") as bar:
        n = write_report(opened, output, level, engine=eng, split_size=engine_options.split_size, progress=bar,
                         command=["rmqtool", *sys.argv[1:]], version=rmqtool.__version__)
    if fmt != "table":
        emit([{"store": name, "output": str(output), "bytes": n, "level": level} for name, _ in opened], fmt)
    else:
        stdout.print(f"wrote {output} ({n} bytes)", markup=False)
