"""`rmqtool report STORE -o report.html`: one self-contained HTML page for an incident ticket."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from rmqtool.cli.common import (FormatOpt, IdleIoOpt, MaxReadRateOpt, app, emit, gentle, open_store, stdout,
                                EngineOptions, with_engine_options)
from rmqtool.cli.options import Format, Level, option
from rmqtool.errors import RefusedError


@app.command("report")
@with_engine_options
def report_command(
    store: str = typer.Argument(..., metavar="STORE", help="store root directory"),
    output: Path = option("output", ..., metavar="FILE", help="the HTML file to write (must not exist, unless --force)"),
    force: bool = typer.Option(False, "--force", help="replace an existing output file (written whole, then renamed over it)"),
    level: Level = typer.Option(Level.deep, "--level", "-l", help="the verify the report runs"),
    max_read_rate: Optional[float] = MaxReadRateOpt,
    idle_io: bool = IdleIoOpt,
    fmt: Format = FormatOpt,
    engine_options: EngineOptions = EngineOptions(),
):
    """Write one self-contained HTML report (no network): info, the verify summary and findings, the recovery
    forecast with the messages a restart loses, CommitLog file map, write rate, dispatch lag per queue.
    What it wrote (the file and its size) is printed in the --format asked for."""
    from rmqtool.ops.report import write_report
    level = level.value
    gentle(max_read_rate, idle_io)
    if output.is_dir():
        raise RefusedError("the output is a directory; give the HTML file's path", output)
    if output.exists() and not force:
        raise RefusedError("the output exists: pass --force to replace it", output)
    s = open_store(store)
    from rmqtool.cli.progress import Progress
    with engine_options.open() as eng, Progress("report") as bar:
        n = write_report(s, store, output, level, engine=eng, split_size=engine_options.split_size, progress=bar)
    if fmt != "table":
        emit([{"store": store, "output": str(output), "bytes": n, "level": level}], fmt)
    else:
        stdout.print(f"wrote {output} ({n} bytes)", markup=False)
